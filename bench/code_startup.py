"""Start-up of jobs with their own code, beside built-in jobs: from POST to the end of the first
optimizer step, through the real API and a warm worker (bench/dispatch.py's measure), four kinds
of job in turn, `repeats` rounds, all in one stack:

- **built-in**: the tiny wavenet by its catalog name;
- **code, cached**: the same model named from a code archive (`bench_code.entries:WAVENET`, an
  entry that is the built-in one) the worker has already unpacked;
- **code, new archive**: the same, from an archive the worker has never seen (a nonce in it):
  downloaded from the store, its sha256 checked, unpacked;
- **code, new archive + requirement**: a new archive whose `requirements.txt` installs a wheel it
  ships: a venv made and pip run in its sandbox before the job starts.

Every job runs in the sandbox (the worker's default where bubblewrap is installed). Uploads
happen before the POST and are timed apart (`upload_s`)."""

from __future__ import annotations

import secrets
import statistics
import tempfile
import time
from pathlib import Path

from bench.dispatch import SPEC, through_service
from devstack import REDIS_URL, Stack, archive_of, sql_database, wheel

KINDS = ("built-in", "code, cached", "code, new archive", "code, new archive + requirement")
ENTRIES = "from trainjobs.contract.builtins import MODELS\n\nWAVENET = MODELS['wavenet']  # {nonce}\n"


def code_archive(nonce: str, requirement: bool) -> bytes:
    files: dict[str, bytes | str] = {
        "bench_code/__init__.py": "",
        "bench_code/entries.py": ENTRIES.format(nonce=nonce),
    }
    if requirement:
        name, wheel_bytes = wheel("tjbench", "1.0", "VALUE = 1\n")
        files[f"wheels/{name}"] = wheel_bytes
        files["requirements.txt"] = f"# {nonce}\n./wheels/{name}\n"  # a file never seen: a new environment
    return archive_of(files)


def spec_for(kind: str, client, cached_code: str) -> tuple[dict, float]:
    """The job's spec, and the seconds its upload took (0 for one that uploads nothing)."""
    if kind == "built-in":
        return SPEC, 0.0
    code = cached_code
    uploaded = 0.0
    if kind != "code, cached":
        archive = code_archive(secrets.token_hex(8), requirement=kind.endswith("requirement"))
        started = time.perf_counter()
        response = client.post("/v1/code", content=archive, headers={"Content-Type": "application/gzip"})
        uploaded = time.perf_counter() - started
        code = response.json()["id"]
    model = {"name": "bench_code.entries:WAVENET", "params": SPEC["model"]["params"]}
    return {**SPEC, "model": model, "code": code}, uploaded


def run(repeats: int = 6) -> dict:
    found: dict[str, list[tuple[float, float, float]]] = {kind: [] for kind in KINDS}
    with tempfile.TemporaryDirectory() as scratch, sql_database("sqlite", Path(scratch)) as url:
        stack = Stack(Path(scratch) / "stack", url, REDIS_URL, TRAINJOBS_HEARTBEAT_SECONDS="0.5").start()
        try:
            token = stack.token("bench")
            client = stack.client(token)
            cached = client.post(
                "/v1/code", content=code_archive("cached", False), headers={"Content-Type": "application/gzip"}
            ).json()["id"]
            through_service(stack, token, spec_for("code, cached", client, cached)[0])  # warm-up; unpacks it
            for number in range(1, repeats + 1):
                for kind in KINDS:
                    spec, uploaded = spec_for(kind, client, cached)
                    running, first_step = through_service(stack, token, spec)
                    found[kind].append((running, first_step, uploaded))
                    print(f"code start-up  round {number}/{repeats}  {kind}: first step {first_step:.3f} s", flush=True)
        finally:
            stack.stop()
    return {"code_startup": {kind: _summary(runs) for kind, runs in found.items()} | {"repeats": repeats}}


def _summary(runs: list[tuple[float, float, float]]) -> dict:
    def of(values: list[float]) -> dict:
        ordered = sorted(values)
        return {
            "median_s": round(statistics.median(ordered), 3),
            "p90_s": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 3),
            "runs_s": [round(value, 3) for value in values],
        }

    return {
        "post_to_running": of([run[0] for run in runs]),
        "post_to_first_step": of([run[1] for run in runs]),
        "upload_s": of([run[2] for run in runs]),
    }
