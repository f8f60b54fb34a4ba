"""A stand-in for the shipped harness (`agents.harness`), selected with AGENTS_HARNESS_MODULE
in tests/agents/test_runs.py: it reports what the keeper gave it and starts one tool the way
the harness does (as the agent's user, inside the run's limits), then exits 0."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--run", type=int, required=True)
    run_id = parser.parse_args().run
    import django

    django.setup()
    from agents.runs.limits import RunLimits
    from agents.runs.models import AgentRun

    run = AgentRun.objects.select_related("agent").get(pk=run_id)
    limits = RunLimits.for_run(run_id)
    tool = subprocess.run(
        [
            "/usr/sbin/runuser",
            "-u",
            run.agent.unix_user,
            "--",
            "sh",
            "-c",
            "id -un; cat /proc/self/cgroup",
        ],
        preexec_fn=limits.preexec,
        capture_output=True,
        text=True,
        cwd=run.agent.sandbox,
        env={"PATH": "/usr/bin:/bin", "HOME": run.agent.sandbox},
        timeout=30,
    )
    with open(f"/proc/{os.getpid()}/cgroup") as own:
        harness_cgroup = own.read()
    report = {
        "uid": os.getuid(),
        "token": os.environ.get("ARENA_SCAFFOLD_TOKEN", ""),
        "proxy_url": os.environ.get("ARENA_PROXY_URL", ""),
        "harness_cgroup": harness_cgroup,
        "tool_output": tool.stdout,
    }
    print("REPORT " + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
