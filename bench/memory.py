"""Memory of a 2-rank cpu job: PSS (proportional set size: shared pages split among the processes
that share them) summed over the job's whole process tree, sampled while it trains, through the
service (its launcher, the launcher's fork server, its ranks, and any launcher the worker keeps
waiting meanwhile) beside the plain spawn script (bench/support/plain_ddp.py: the script and its ranks).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from devstack import (
    REDIS_URL,
    Stack,
    descendants,
    find_launcher,
    sql_database,
    tiny_wavenet_spec,
    wait_for_terminal,
    wait_until,
    waiting_launchers,
)

ROOT = Path(__file__).resolve().parents[1]
# Epochs of a few seconds: the samples fall inside training, not start-up.
SPEC = tiny_wavenet_spec(
    epochs=4, data={"name": "synthetic-audio", "params": {"num_samples": 4096, "length": 256, "mu": 32}}
)
SAMPLES, SAMPLE_EVERY = 8, 0.5


def pss_bytes(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def tree_pss(roots: list[int]) -> int:
    pids = set(roots)
    for root in roots:
        pids.update(descendants(root))
    return sum(pss_bytes(pid) for pid in pids)


def sample(roots) -> int:
    """The median of SAMPLES sums of the tree's PSS, half a second apart."""
    values = []
    for _ in range(SAMPLES):
        values.append(tree_pss(roots()))
        time.sleep(SAMPLE_EVERY)
    return int(statistics.median(values))


def through_service(scratch: Path) -> int:
    scratch.mkdir(parents=True, exist_ok=True)
    with sql_database("sqlite", scratch) as url:
        stack = Stack(scratch / "stack", url, REDIS_URL).start()
        try:
            client = stack.client(stack.token())
            job_id = client.post("/v1/jobs", json=SPEC).json()["id"]
            wait_until(lambda: client.get(f"/v1/jobs/{job_id}").json()["epoch"] >= 1, 120, what="an epoch")
            launcher = find_launcher(job_id)
            pss = sample(lambda: [launcher, *waiting_launchers(stack.home)])
            wait_for_terminal(client, job_id)
        finally:
            stack.stop()
    return pss


def plain_script(scratch: Path) -> int:
    spec_file = scratch / "spec.json"
    spec_file.write_text(json.dumps(SPEC))
    process = subprocess.Popen(
        [sys.executable, "-u", "-m", "bench.support.plain_ddp", str(spec_file), str(scratch / "result.json")],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    for line in process.stdout:
        if line.startswith("first optimizer step"):
            break
    time.sleep(2)  # into the first epoch, as the service's sample is
    pss = sample(lambda: [process.pid])
    process.wait()
    return pss


def run() -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        service = through_service(Path(scratch) / "service")
        plain = plain_script(Path(scratch))
    mib = 1024 * 1024
    result = {
        "service_pss_mib": round(service / mib),
        "plain_pss_mib": round(plain / mib),
        "service_over_plain_mib": round((service - plain) / mib),
    }
    print(
        f"memory  PSS of the job's process tree: service {result['service_pss_mib']} MiB, plain script "
        f"{result['plain_pss_mib']} MiB: {result['service_over_plain_mib']} MiB over",
        flush=True,
    )
    return {"memory": result}
