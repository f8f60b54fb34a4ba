"""A process named by its pid *and* its start time, so a recycled pid is never taken for it."""

from __future__ import annotations


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (field 22 of /proc/PID/stat), or
    None when there is no such live process (a zombie has ended its work: it counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read(4096)
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold anything, ")" and spaces
    # included: the fields after it start after its *last* ")".
    fields = stat[stat.rfind(b")") + 2 :].split()
    try:
        state, started = fields[0], int(fields[19])
    except (IndexError, ValueError):
        return None
    if state in (b"Z", b"X"):
        return None
    return started


def alive(pid: int | None, started: int | None) -> bool:
    return pid is not None and started is not None and start_time(pid) == started
