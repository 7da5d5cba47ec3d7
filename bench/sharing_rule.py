"""The sharing rule's cost: one decision (trainjobs.jobs.sharing.decide) over 200 running jobs of
50 owners on 50 workers of 8 devices, with 100, 1,000 and 10,000 queued jobs of those owners
(random sizes and priorities, a fixed seed), both as a worker or the leader decides
(`explain=False`: it stops once nothing more can start or be preempted) and as the waiting
reasons and `GET /v1/queue` need it (`explain=True`: the whole queue). The best of `repeats`
runs, in this process: the rule alone, without reading SQL."""

from __future__ import annotations

import random
import time

from trainjobs.jobs.sharing import Host, QueuedJob, Rules, RunningJob, decide

SIZES = (100, 1_000, 10_000)
RULES = Rules(now=2_000.0, min_runtime_seconds=600.0)  # every running job old enough to be a victim


def fleet(queued: int, owners: int = 50, running: int = 200, hosts: int = 50):
    rng = random.Random(queued)
    free = {f"w{index:03d}": 8 for index in range(hosts)}
    jobs = []
    for index in range(running):
        hostname = sorted(free)[index % hosts]
        if free[hostname] >= 2:
            free[hostname] -= 2
            owner = f"o{rng.randrange(owners)}"
            jobs.append(RunningJob(f"r{index}", owner, 2, (hostname,), rng.choice([0, 50, 100]), True, rng.random()))
    waiting = [
        QueuedJob(
            f"q{index}", f"o{rng.randrange(owners)}", rng.choice([1, 2, 4]), float(index), rng.choice([0, 50, 100])
        )
        for index in range(queued)
    ]
    return [Host(name, 8, count) for name, count in free.items()], jobs, waiting


def run(repeats: int = 5) -> dict:
    found = {}
    for size in SIZES:
        hosts, running, queued = fleet(size)
        for explain in (False, True):
            best, decided = float("inf"), None
            for _ in range(repeats):
                started = time.perf_counter()
                decided = decide(
                    "cuda", hosts, running, queued, {}, Rules(now=2_000.0, min_runtime_seconds=600.0), explain
                )
                best = min(best, time.perf_counter() - started)
            key = f"{size}_{'whole' if explain else 'decision'}"
            found[key] = {
                "ms": round(best * 1000, 2), "looked_at": len(decided.order), "preemptions": len(decided.preemptions),
            }  # fmt: skip
            print(f"sharing rule  {size} queued, explain={explain}: {best * 1000:.2f} ms", flush=True)
    return {"sharing_rule": found | {"running": 200, "owners": 50, "workers": 50}}
