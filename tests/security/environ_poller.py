"""An agent's background process that reads the environment of each new process of its own
user as soon as the kernel lets it (`/proc/PID/environ`), the attack of issue 25, finding 1.

Run as the agent with the system's python3: `python3 environ_poller.py OUT STOP`. It watches
the pids just allocated (`/proc/sys/kernel/ns_last_pid`), so it catches a process that lives a
millisecond, and lists all of /proc now and then for longer ones. Each environment read, with
the process's command line, goes to OUT as a JSON line (once per distinct pair). It stops when
the file STOP appears (or after a minute), then writes OUT.done.
"""

import json
import os
import sys
import time

LIMIT_S = 60.0
MAX_RECORDS = 2000


def start_time(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as stat:
        return int(stat.read().rsplit(b")", 1)[1].split()[19])


def read(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 1 << 16)
    finally:
        os.close(fd)


def ancestors() -> set[int]:
    found, pid = set(), os.getpid()
    while pid > 1:
        found.add(pid)
        with open(f"/proc/{pid}/stat", "rb") as stat:
            pid = int(stat.read().rsplit(b")", 1)[1].split()[1])
    return found


def main(out_path: str, stop_path: str) -> None:
    # Not the poller itself nor its starters: only processes born after it are news.
    mine, born = ancestors(), start_time(os.getpid())
    seen: set[tuple[bytes, bytes]] = set()
    records = 0
    deadline = time.monotonic() + LIMIT_S
    with open(out_path, "w") as out:
        rounds = 0
        while time.monotonic() < deadline and records < MAX_RECORDS:
            rounds += 1
            if rounds % 50 == 0:
                if os.path.exists(stop_path):
                    break
                candidates = [int(name) for name in os.listdir("/proc") if name.isdigit()]
            else:
                top = int(read("/proc/sys/kernel/ns_last_pid"))
                candidates = range(max(1, top - 48), top + 2)
            for pid in candidates:
                if pid in mine:
                    continue
                try:
                    environ = read(f"/proc/{pid}/environ")
                    cmdline = read(f"/proc/{pid}/cmdline")
                    if start_time(pid) < born:
                        continue  # the poller's own starter: not a new process
                except (OSError, ValueError, IndexError):
                    continue
                if environ and (cmdline, environ) not in seen:
                    seen.add((cmdline, environ))
                    records += 1
                    out.write(json.dumps({
                        "cmdline": cmdline.decode(errors="replace").split("\0"),
                        "environ": [v for v in environ.decode(errors="replace").split("\0") if v],
                    }) + "\n")  # fmt: skip
                    out.flush()
    with open(out_path + ".done", "w") as done:
        done.write(f"{rounds}\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
