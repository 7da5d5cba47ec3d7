"""Where a training step's time goes, in the service's rank and in the plain loop's, on the same
spec (fp32; 1 rank with accumulation 1 and 4, 2 ranks with 4: where the overhead benchmark lost
most). Each rank is sampled with py-spy for `SECONDS` in its second epoch, and every sample is
charged to the line of the training loop it was under (`Trainer.train_epoch` for the service,
`_rank` in bench/support/plain_ddp.py for the plain loop), or to "outside the loop". perf's software
counters (CPU time, page faults, context switches) are read over the same span. Both are read
from outside the rank; py-spy does not pause it (--nonblocking).

The point: the trainer's step carries a few lines that the plain loop does not (the loss sum, the
finite check without a host sync, the scheduler, telemetry). Their share of the samples is their
cost.
"""

from __future__ import annotations

import collections
import math
import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from bench.support.plain_ddp import run_plain_ddp
from bench.support.process_cpu import read_process, role_of, wait_until_quiet
from bench.support.py_spy import py_spy
from bench.support.workload import calibrated_clips, default_stack, wavenet_spec
from devstack import sql_database, wait_for_terminal, wait_until
from trainjobs.contract.spec import JobSpec

SECONDS = 10
LOOPS = {"service": ("train_epoch", "trainer.py"), "plain": ("_rank", "plain_ddp.py")}
FRAME = re.compile(r"^(?P<function>[^ ]+) \((?P<file>[^:]+):(?P<line>\d+)\)$")


def rank_pids(run: str) -> list[int]:
    """The live ranks of a plain script (spawned) or of a job (forked from a launcher's fork server),
    told apart as bench/support/process_cpu.py tells its roles."""
    processes = {pid: read for pid in os.listdir("/proc") if pid.isdigit() and (read := read_process(pid))}
    cmdlines = {pid: read[0] for pid, read in processes.items()}
    return sorted(
        int(pid)
        for pid, (cmdline, parent, _, _) in processes.items()
        if role_of(cmdline, cmdlines.get(str(parent), "")) == "ranks" and ("spawn_main" in cmdline) == (run == "plain")
    )


def one_rank(run: str) -> int:
    pids = rank_pids(run)
    if not pids:  # its epochs are too short to be sampled (BENCH_EPOCH_SECONDS)
        raise RuntimeError(f"the {run} run ended before its ranks could be sampled")
    return pids[0]


def sample(pid: int, run: str, scratch: Path, seconds: float = SECONDS) -> dict:
    """py-spy and perf stat over `seconds` of one rank: per loop line, its share of the samples."""
    raw = scratch / f"{run}-{pid}.txt"
    counters = scratch / f"{run}-{pid}.perf"
    perf_command = "perf" if shutil.which("perf") else "true"  # optional: without it the counters read 0
    perf = subprocess.Popen(
        [perf_command, "stat", "-x", ",", "-o", str(counters), "-e", "task-clock,page-faults,context-switches",
         "-p", str(pid), "--", "sleep", str(seconds)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    subprocess.run(
        [py_spy() or "py-spy", "record", "--pid", str(pid), "--duration", str(math.ceil(seconds)), "--rate", "100",
         "--nonblocking", "--format", "raw", "--output", str(raw)],
        check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    perf.wait()
    by_line, total = _samples_by_line(raw, *LOOPS[run])
    figures = {}
    for line in (counters.read_text() if counters.exists() else "").splitlines():
        parts = line.split(",")
        if len(parts) > 2 and parts[0].replace(".", "").isdigit():
            figures[parts[2]] = float(parts[0])
    return {
        "samples": total,
        "lines": {where: round(count / total, 4) for where, count in by_line.most_common()},
        "code": {where: source_line(where) for where in by_line},  # as it read when measured
        "cpu_seconds": round(figures.get("task-clock", 0.0) / 1000, 2),
        "page_faults_per_s": round(figures.get("page-faults", 0.0) / seconds, 1),
        "context_switches_per_s": round(figures.get("context-switches", 0.0) / seconds, 1),
    }


def _samples_by_line(raw: Path, function: str, file: str) -> tuple[collections.Counter[str], int]:
    """py-spy's samples, each charged to the line of the training loop it was under."""
    by_line: collections.Counter[str] = collections.Counter()
    total = 0
    for row in raw.read_text().splitlines():
        stack, _, count = row.rpartition(" ")
        total += int(count)
        where = "outside the loop"
        for frame in stack.split(";"):
            match = FRAME.match(frame.strip())
            # py-spy names a method by its qualified name on Python 3.11+ (Trainer.train_epoch).
            if match and match["function"].rpartition(".")[2] == function and match["file"].endswith(file):
                where = f"{file}:{match['line']}"
        by_line[where] += int(count)
    return by_line, total


def source_line(where: str) -> str:
    file, _, line = where.partition(":")
    if not line:
        return ""
    path = {"trainer.py": "worker/trainer/trainer.py", "plain_ddp.py": "bench/support/plain_ddp.py"}[file]
    return (Path(__file__).resolve().parents[1] / path).read_text().splitlines()[int(line) - 1].strip()


def run(configurations=((1, "fp32", 1), (1, "fp32", 4), (2, "fp32", 4)), seconds: float = SECONDS) -> dict:
    rows = []
    with tempfile.TemporaryDirectory() as scratch, sql_database("sqlite", Path(scratch)) as url:
        stack, threads = default_stack(scratch, url)
        try:
            client = stack.client(stack.token("bench"))
            for ranks, precision, accumulation in configurations:
                spec = wavenet_spec(ranks, precision, accumulation, 3, calibrated_clips(ranks, precision, threads))
                row = {"ranks": ranks, "precision": precision, "accumulation": accumulation}

                wait_until_quiet()
                job_id = client.post("/v1/jobs", json=spec).json()["id"]
                wait_until(lambda job_id=job_id: client.get(f"/v1/jobs/{job_id}").json()["epoch"] >= 1, 600)
                row["service"] = sample(one_rank("service"), "service", Path(scratch), seconds)
                wait_for_terminal(client, job_id, timeout=600)

                wait_until_quiet()
                results = Path(scratch) / f"plain-{len(rows)}.json"
                plain_args = (JobSpec.model_validate(spec), str(results), threads)
                plain = threading.Thread(target=run_plain_ddp, args=plain_args)
                plain.start()
                # Past start-up and the first epoch, as the service's side: its rank 0 writes the
                # results file after each epoch.
                wait_until(results.exists, 600, what="the plain loop's first epoch")
                row["plain"] = sample(one_rank("plain"), "plain", Path(scratch), seconds)
                plain.join()
                print_row(row)
                rows.append(row)
        finally:
            stack.stop()
    return {"steps": rows}


def print_row(row: dict) -> None:
    print(f"step profile  {row['ranks']} rank(s) {row['precision']} accumulation {row['accumulation']}", flush=True)
    for run in ("service", "plain"):
        figures = row[run]
        print(
            f"  {run}: {figures['samples']} samples, cpu {figures['cpu_seconds']} s of {SECONDS}, "
            f"{figures['page_faults_per_s']} page faults/s, {figures['context_switches_per_s']} switches/s",
            flush=True,
        )
        for where, share in figures["lines"].items():
            print(f"    {100 * share:5.1f}%  {where:22} {figures['code'][where][:80]}", flush=True)
