"""`python -m agents.harness --run RUN_ID` (started by the supervisor's keeper), or, for tests
and by hand, `python -m agents.harness --agent NAME --model MODEL --state-dir DIR`.

The environment gives the gateway and the token: ARENA_PROXY_URL (the gateway's `/proxy/v1`) and
ARENA_SCAFFOLD_TOKEN (a proxy token billed to the agent's scaffold ledger). Neither reaches the
agent's processes. Exit codes: `agents.harness.loop.ExitCode`.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arena.settings")


def main() -> int:
    import django

    django.setup()
    from agents.harness.run import harness_main

    return harness_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
