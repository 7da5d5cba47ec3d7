"""Side by side: the service's 1-rank job and the plain loop (bench/support/plain_ddp.py) training at the
same time on the same spec, each rank on one of the machine's two cores, compared over the same
seconds; and, as the control, two plain loops side by side.

Why: this machine's speed drifts by 5 to 15% over seconds (other tenants of the host share its
caches and memory bandwidth; steal time stays near 0), so two runs a minute apart, as the
interleaved rounds of bench/overhead.py are, differ by more than the 1% to be resolved. Two loops
that train at the same moment, timed over the same seconds, share the host's drift; not all of
it, since each core has its own neighbours on the host: the control shows what is left (a few %
in the runs so far). What this measures is the work inside the rank: the cores the service's own processes
take (API, worker, Redis) fall on both ranks alike here, and are counted on their own in the
overhead benchmark's CPU table.

How: the plain loop starts first; once its rank exists the job is posted (it reaches its first
step in well under a second, while the plain rank still imports torch). The service runs
`EPOCHS` epochs, the plain loop two more, so that it is still training when the job ends. The
windows are the service's epochs after the first: each ends when rank 0's end-of-epoch progress
report says (`at`, replayed from the job's event stream once it has ended) and lasts its
`epoch_seconds`. Over each window the plain loop's samples come from its own record of every
optimizer step (time, samples so far), interpolated at the window's ends. A window's ratio is
service / plain samples per second over the same seconds; the configuration's ratio is the median
of its windows'. The control takes one plain loop's epochs after the first as windows and the
other's record over them.

`make bench` runs bench/turns.py instead, which puts both loops on the same cores over the
same stretch of time; this one runs when named (`python -m bench sidebyside`).
"""

from __future__ import annotations

import bisect
import statistics
import tempfile
import threading
from pathlib import Path

from bench.steps import rank_pids
from bench.support.epochs import service_epochs
from bench.support.plain_ddp import timed_plain_ddp
from bench.support.process_cpu import wait_until_quiet
from bench.support.workload import calibrated_clips, default_stack, wavenet_spec
from devstack import sql_database, wait_for_terminal, wait_until
from trainjobs.contract.spec import JobSpec

EPOCHS = 6
CONFIGURATIONS = [(1, "fp32", 1), (1, "fp32", 4), (1, "bf16", 1), (1, "bf16", 4)]
CONTROL = (1, "fp32", 4)


class PlainInBackground:
    """The plain loop on its own thread (it blocks in torch.multiprocessing.spawn)."""

    def __init__(self, spec: dict, result_path: str, threads: int):
        self.result: dict = {}
        self._thread = threading.Thread(target=self._run, args=(JobSpec.model_validate(spec), result_path, threads))

    def _run(self, spec: JobSpec, result_path: str, threads: int) -> None:
        self.result = timed_plain_ddp(spec, result_path, threads)

    def start(self) -> PlainInBackground:
        self._thread.start()
        return self

    def join(self) -> PlainInBackground:
        self._thread.join()
        return self

    def rate_over(self, start: float, end: float) -> float | None:
        """Samples per second over the wall-clock window, from the record of every optimizer
        step; None unless the window lies within the loop's epochs after its first."""
        trained, windows = self.result["trained"], self.result["epoch_windows"]
        if len(windows) < 2 or start < windows[0][1] or end > trained[-1][0]:
            return None
        return (samples_by(trained, end) - samples_by(trained, start)) / (end - start)

    def windows(self) -> list[tuple[float, float, float]]:
        """(start, end, samples per second) of each epoch after the first."""
        return [
            (started, ended, rate)
            for (started, ended), rate in zip(
                self.result["epoch_windows"][1:], self.result["samples_per_second"][1:], strict=True
            )
        ]


def samples_by(trained: list[list[float]], at: float) -> float:
    """Samples trained by wall-clock `at`, interpolated between the optimizer steps around it."""
    i = max(1, bisect.bisect_left([when for when, _ in trained], at))
    (before, done_before), (after, done_after) = trained[i - 1], trained[i]
    return done_before + (done_after - done_before) * (at - before) / (after - before)


def service_beside_plain(client, spec: dict, plain_spec: dict, scratch: str, threads: int) -> dict:
    plain = PlainInBackground(plain_spec, f"{scratch}/beside.json", threads).start()
    wait_until(lambda: rank_pids("plain"), 60, interval=0.05, what="the plain loop's rank")
    job_id = client.post("/v1/jobs", json=spec).json()["id"]
    job = wait_for_terminal(client, job_id, timeout=1800)
    if job["state"] != "succeeded":
        raise RuntimeError(f"benchmark job failed: {job['error']}")
    plain.join()
    windows = [(start, end, samples / (end - start)) for start, end, samples in service_epochs(client, job_id)[1:]]
    return paired(windows, plain)


def plain_beside_plain(spec: dict, scratch: str, threads: int) -> dict:
    first = PlainInBackground(spec, f"{scratch}/first.json", threads).start()
    second = PlainInBackground(spec, f"{scratch}/second.json", threads).start()
    first.join(), second.join()
    return paired(first.windows(), second)


def paired(windows: list[tuple[float, float, float]], other: PlainInBackground) -> dict:
    """Per window, the first loop's samples per second over the other's in the same seconds."""
    ratios, firsts, seconds = [], [], []
    for start, end, rate in windows:
        other_rate = other.rate_over(start, end)
        if other_rate:
            ratios.append(rate / other_rate)
            firsts.append(rate)
            seconds.append(other_rate)
    if not ratios:
        raise RuntimeError(f"no window of {len(windows)} lies within the other loop's training")
    return {
        "a_samples_per_s": round(statistics.median(firsts), 2),
        "b_samples_per_s": round(statistics.median(seconds), 2),
        "ratio": round(statistics.median(ratios), 3),
        "window_ratios": [round(ratio, 3) for ratio in ratios],
        "window_seconds": round(statistics.median(end - start for start, end, _ in windows), 1),
    }


def run(configurations=CONFIGURATIONS, control=CONTROL) -> dict:
    rows = []
    with tempfile.TemporaryDirectory() as scratch, sql_database("sqlite", Path(scratch)) as url:
        stack, threads = default_stack(scratch, url)
        try:
            client = stack.client(stack.token("bench"))
            pairs = [("service / plain", config) for config in configurations] + [("plain / plain", control)]
            for pair, (ranks, precision, accumulation) in pairs:
                clips = calibrated_clips(ranks, precision, threads)
                wait_until_quiet()
                if pair == "service / plain":
                    figures = service_beside_plain(
                        client,
                        wavenet_spec(ranks, precision, accumulation, EPOCHS, clips),
                        wavenet_spec(ranks, precision, accumulation, EPOCHS + 2, clips),
                        scratch,
                        threads,
                    )
                else:
                    figures = plain_beside_plain(
                        wavenet_spec(ranks, precision, accumulation, EPOCHS + 1, clips), scratch, threads
                    )
                row = {"pair": pair, "ranks": ranks, "precision": precision, "accumulation": accumulation,
                       "clips": clips, **figures}  # fmt: skip
                print(
                    f"side by side  {pair}  {ranks} rank {precision} accumulation {accumulation}: "
                    f"{row['a_samples_per_s']} and {row['b_samples_per_s']} samples/s, ratio {row['ratio']} "
                    f"(windows {row['window_ratios']})",
                    flush=True,
                )
                rows.append(row)
        finally:
            stack.stop()
    return {"side_by_side": rows}
