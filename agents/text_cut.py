"""Long text cut to its head and tail, with the cut said in the text: how the trajectory bounds
what it stores (`agents.trajectory`) and the livestream what it shows (`agents.trajectory_live`,
`frontend.live`)."""

from __future__ import annotations


def cut(text: str, limit: int) -> str:
    """`text` in at most about `limit` characters: its head and tail, with the cut said."""
    if len(text) <= limit:
        return text
    head, tail = limit * 3 // 4, limit // 4
    return f"{text[:head]}…[{len(text) - head - tail} chars cut]…{text[len(text) - tail :]}"
