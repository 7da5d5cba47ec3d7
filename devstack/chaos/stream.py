"""The chaos run's jobs: a seeded stream of small jobs from several owners (1 and 2 ranks, some on
2 nodes, some accumulating gradients, some with their own code, some urgent enough to preempt),
some of them cancelled on purpose a few seconds after they are submitted."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field

import httpx

from devstack.archives import archive_of, example_files
from devstack.chaos.fleet import OWNERS, ChaosFleet
from devstack.specs import tiny_wavenet_spec

MAX_OPEN_JOBS = 8  # queued or running at once: the machine has 2 cores
SUBMIT_EVERY_SECONDS = 2.0
TERMINAL = ("succeeded", "failed", "cancelled")


@dataclass
class Submitted:
    id: str
    owner: str
    kind: str
    epochs: int
    cancel_at: float | None  # monotonic time of the cancel on purpose


@dataclass
class JobStream:
    fleet: ChaosFleet
    seed: int
    jobs: dict[str, Submitted] = field(default_factory=dict)
    job_ids: set[str] = field(default_factory=set)  # shared with the observer
    open: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        assert self.fleet.stack is not None
        stack = self.fleet.stack
        self.random = random.Random(self.seed)
        admin = stack.client(stack.token("root", admin=True))
        for owner in OWNERS:  # the urgent jobs of the stream come from every owner
            admin.put(f"/v1/owners/{owner}", json={"max_priority": 100}).raise_for_status()
        self.clients = {owner: stack.client(stack.token(owner)) for owner in OWNERS}
        archive = archive_of(example_files())
        self.code = {
            owner: client.post("/v1/code", content=archive, headers={"Content-Type": "application/gzip"}).json()["id"]
            for owner, client in self.clients.items()
        }
        self.next_submit = time.monotonic()

    def tick(self) -> None:
        """Submit the next job when due, cancel those due, forget those ended. The API may be
        down for a moment (a fault): whatever fails here is tried again at the next tick."""
        now = time.monotonic()
        try:
            self._forget_ended()
            for job in [self.jobs[job_id] for job_id in self.open]:
                if job.cancel_at is not None and now >= job.cancel_at:
                    self.clients[job.owner].post(f"/v1/jobs/{job.id}/cancel")
                    job.cancel_at = None
            if now >= self.next_submit and len(self.open) < MAX_OPEN_JOBS:
                self._submit(now)
                self.next_submit = now + self.random.expovariate(1 / SUBMIT_EVERY_SECONDS)
        except httpx.HTTPError:
            pass

    def _submit(self, now: float) -> None:
        owner = self.random.choice(OWNERS)
        kind, spec = self._spec(owner)
        cancel_at = now + self.random.uniform(1, 10) if self.random.random() < 0.15 else None
        response = self.clients[owner].post("/v1/jobs", json=spec)
        response.raise_for_status()
        job_id = response.json()["id"]
        self.jobs[job_id] = Submitted(job_id, owner, kind, spec["epochs"], cancel_at)
        self.job_ids.add(job_id)
        self.open.add(job_id)

    def _spec(self, owner: str) -> tuple[str, dict]:
        choose = self.random
        kind = choose.choices(
            ["one rank", "two ranks", "two nodes", "accumulation", "own code", "urgent"], [2, 3, 1, 2, 2, 1]
        )[0]
        common = {
            "epochs": choose.randint(3, 8),
            "data": {"name": "synthetic-audio", "params": {"num_samples": 256, "length": 128, "mu": 32}},
            "priority": 90 if kind == "urgent" else choose.choice([30, 50]),
            "seed": choose.randint(0, 1000),
        }
        if kind == "own code":
            return kind, {
                "model": {"name": "wavesort.catalog:CLASSIFIER", "params": {"channels": 8, "layers": 2}},
                "data": {"name": "wavesort.catalog:WAVES", "params": {"num_samples": 256, "length": 64}},
                "device": "cpu",
                "gpus": choose.choice([1, 2]),
                "batch_size": 8,
                "optimizer": {"name": "adamw", "lr": 0.003},
                "code": self.code[owner],
                **{key: common[key] for key in ("epochs", "priority", "seed")},
            }
        shape = {
            "one rank": {"gpus": 1},
            "two ranks": {"gpus": 2},
            "two nodes": {"gpus": 2, "nodes": 2},
            "accumulation": {"gpus": 2, "accumulation_steps": 2},
            "urgent": {"gpus": 2},
        }[kind]
        return kind, tiny_wavenet_spec(**common, **shape)

    def _forget_ended(self) -> None:
        for job_id in list(self.open):
            job = self.clients[self.jobs[job_id].owner].get(f"/v1/jobs/{job_id}")
            if job.status_code == 200 and job.json()["state"] in TERMINAL:
                self.open.discard(job_id)
