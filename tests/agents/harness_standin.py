"""A stand-in for the shipped harness (`agents.harness`), selected with AGENTS_HARNESS_MODULE
in tests/agents/test_runs.py and tests/security/test_storage_quota.py: it reports what the
keeper gave it and runs one tool call through the harness's own executor, wired as the harness
wires it for a supervised run, then exits 0. The calls are ARENA_STANDIN_TOOLS (JSON), or one that says
who and where it runs."""

from __future__ import annotations

import argparse
import json
import os
import sys


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--run", type=int, required=True)
    run_id = parser.parse_args().run
    import django

    django.setup()
    from agents.harness.run import tool_executor
    from agents.runs.limits import RunLimits
    from agents.runs.models import AgentRun

    run = AgentRun.objects.select_related("agent").get(pk=run_id)
    tools = tool_executor(run.agent, run_id=run.pk, preexec=RunLimits.for_run(run_id).preexec)
    calls = json.loads(os.environ.get("ARENA_STANDIN_TOOLS", '["id -un; cat /proc/self/cgroup"]'))
    outputs = [tools.shell(call).output for call in calls]
    with open(f"/proc/{os.getpid()}/cgroup") as own:
        harness_cgroup = own.read()
    report = {
        "uid": os.getuid(),
        "token": os.environ.get("ARENA_SCAFFOLD_TOKEN", ""),
        "proxy_url": os.environ.get("ARENA_PROXY_URL", ""),
        "environment": sorted(os.environ),
        "harness_cgroup": harness_cgroup,
        "tool_output": outputs[0],
        "tool_outputs": outputs,
    }
    print("REPORT " + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
