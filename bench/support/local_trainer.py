"""`python -m bench.support.local_trainer SPEC.json WORKDIR THREADS`: the service's launcher, fork server,
ranks and trainer on a spec, as `trainjobs train` runs them, with THREADS per rank (as a worker
gives its ranks; `trainjobs train` gives them the host's cores over the ranks). The run is named
"bench": its events are in WORKDIR/runs/bench/events.jsonl (bench/gap.py)."""

from __future__ import annotations

import sys
from pathlib import Path

from trainjobs.contract.spec import JobSpec
from trainjobs.worker.local_run import local_request, train_locally

if __name__ == "__main__":
    spec = JobSpec.model_validate_json(Path(sys.argv[1]).read_text())
    request = local_request(spec, Path(sys.argv[2]), Path(sys.argv[2]) / "data", job_id="bench")
    outcome = train_locally(request.model_copy(update={"threads_per_rank": int(sys.argv[3])}))
    if outcome.state != "succeeded":
        raise SystemExit(f"bench.support.local_trainer: {outcome.state}: {outcome.error}")
