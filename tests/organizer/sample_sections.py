"""A section provider as evalsuite or safety would write one, for the dashboard's hook."""

from frontend.organizer import OrganizerSection


def organizer_sections() -> list[OrganizerSection]:
    return [
        OrganizerSection(
            title="Held-out benchmarks",
            columns=["model", "gap closed"],
            rows=[["ann-model", "0.42"], ["<b>bold</b>", "0.10"]],
            note="median over 16 benchmarks",
        )
    ]


def broken_sections() -> list[OrganizerSection]:
    raise RuntimeError("the eval database is down")
