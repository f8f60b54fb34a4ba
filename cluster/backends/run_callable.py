"""Run a pickled call inside a local job: `python -m cluster.backends.run_callable CALL.pkl`.

Writes (True, value) or (False, exception) to callable-result-<job id>.pkl beside the call.
"""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path

import cloudpickle


def main(call_path: Path) -> int:
    function, args, kwargs = pickle.loads(call_path.read_bytes())
    result_path = call_path.with_name(f"callable-result-{os.environ['SLURM_JOB_ID']}.pkl")
    try:
        outcome = (True, function(*args, **kwargs))
    except Exception as exc:  # the caller re-raises it from callable_result
        outcome = (False, exc)
    result_path.write_bytes(cloudpickle.dumps(outcome))
    return 0 if outcome[0] else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
