"""What must hold after the chaos run, each counted: epochs recorded twice or lost, a job run
twice at once, checkpoints that do not download with their listed sha256, processes left behind,
devices still leased, jobs that never ended, and the dead letters with their reasons."""

from __future__ import annotations

import hashlib
from collections import Counter

import redis

from devstack.chaos.fleet import ChaosFleet
from devstack.chaos.observer import Sightings
from devstack.chaos.stream import TERMINAL, JobStream
from devstack.processes import processes_of_job
from devstack.services import wait_until
from trainjobs.contract.redis_keys import RedisKeys

# Each a count or a list that must be empty at the end of a run (BENCHMARKS.md §13 shows them all).
PROMISES = (
    "epochs recorded twice",
    "epochs lost",
    "jobs run twice at once",
    "checkpoints not downloading with their sha256",
    "processes left behind",
    "devices still leased",
    "not ended",
    "workers that exited on their own",
)


def check(fleet: ChaosFleet, stream: JobStream, seen: Sightings) -> dict:
    """The figures of the run's end; every count but `ended` and the dead letters must be 0."""
    assert fleet.stack is not None and fleet.redis is not None
    admin = fleet.stack.client(fleet.stack.token("root", admin=True))
    jobs = {job_id: admin.get(f"/v1/jobs/{job_id}").json() for job_id in stream.jobs}
    figures: dict = {
        "jobs": len(jobs),
        "ended": dict(Counter(job["state"] for job in jobs.values())),
        "not ended": sorted(job_id for job_id, job in jobs.items() if job["state"] not in TERMINAL),
        "epochs recorded twice": 0,
        "epochs lost": 0,
        "jobs run twice at once": sorted(seen.overlaps),
        "checkpoints not downloading with their sha256": [],
        "processes left behind": sorted(pid for job_id in jobs for pid in processes_of_job(job_id)),
        "preemptions": sum(job["preemptions"] for job in jobs.values()),
        "attempts": sum(job["attempt"] for job in jobs.values()),
    }
    for job_id, job in jobs.items():
        epochs = [row["epoch"] for row in admin.get(f"/v1/jobs/{job_id}/metrics").json()["items"]]
        figures["epochs recorded twice"] += len(epochs) - len(set(epochs))
        # A job ended succeeded ran every epoch; any other has each epoch up to the one it reached.
        reached = stream.jobs[job_id].epochs if job["state"] == "succeeded" else job["epoch"]
        figures["epochs lost"] += len(set(range(1, reached + 1)) - set(epochs))
        for checkpoint in admin.get(f"/v1/jobs/{job_id}/checkpoints").json()["items"]:
            body = admin.get(f"/v1/jobs/{job_id}/checkpoints/{checkpoint['id']}")
            if body.status_code != 200 or hashlib.sha256(body.content).hexdigest() != checkpoint["sha256"]:
                figures["checkpoints not downloading with their sha256"].append(
                    f"{checkpoint['id']} (HTTP {body.status_code}, {len(body.content)} of {checkpoint['size_bytes']} "
                    f"bytes)"
                )
    figures["failed, why"] = {
        job_id: _why_failed(fleet, job) for job_id, job in jobs.items() if job["state"] == "failed"
    }
    figures["devices still leased"] = _devices_leased(admin)
    figures["workers at the end"] = [
        f"{worker['hostname']}: busy {worker['busy']}, jobs {worker['jobs']}, lost {worker['lost']}"
        for worker in admin.get("/v1/workers").json()["items"]
    ]
    figures["dead letters"] = _dead_letters(redis.Redis.from_url(fleet.redis.url), fleet.stack.namespace)
    return figures


def failures(figures: dict) -> dict:
    """The counts that break a promise (empty when the run kept every one)."""
    return {key: figures[key] for key in PROMISES if figures.get(key)}


def settle(fleet: ChaosFleet, stream: JobStream, timeout: float) -> None:
    """Wait for every job of the stream to end, then for their processes to be gone."""
    assert fleet.stack is not None
    admin = fleet.stack.client(fleet.stack.token("root", admin=True))

    def ended() -> bool:
        try:
            return all(admin.get(f"/v1/jobs/{job_id}").json()["state"] in TERMINAL for job_id in stream.jobs)
        except Exception:  # the API may still be coming back
            return False

    try:
        wait_until(ended, timeout, interval=2, what="every job of the run to end")
        wait_until(lambda: not any(processes_of_job(job_id) for job_id in stream.jobs), 30, what="processes to end")
    except TimeoutError:
        pass  # counted by `check`


def _why_failed(fleet: ChaosFleet, job: dict) -> str:
    """The job's error's first line; for a launcher that exited, the last lines of its log."""
    lines = [line.strip() for line in (job["error"] or "").splitlines() if line.strip()]
    why = " ... ".join(dict.fromkeys([lines[0][:200], lines[-1][:200]])) if lines else ""
    if "launcher exited" in why:
        for home in fleet.homes:
            log = home / "runs" / job["id"] / f"attempt{job['attempt']}" / "launcher.log"
            tail = log.read_text(errors="replace").strip().splitlines()[-3:] if log.exists() else []
            if tail:
                why += " | " + " / ".join(line[-160:] for line in tail)
    return why


def _devices_leased(admin) -> int:
    """Devices the workers still count as busy, once every job has ended (heartbeats are 1 s)."""
    try:
        wait_until(lambda: all(w["busy"] == 0 for w in admin.get("/v1/workers").json()["items"]), 15, what="idle")
    except TimeoutError:
        pass
    return sum(worker["busy"] for worker in admin.get("/v1/workers").json()["items"])


def _dead_letters(client: redis.Redis, namespace: str) -> list[str]:
    entries = client.xrange(RedisKeys(namespace).dead_letters)
    return [
        " ".join(f"{key.decode()}={value.decode(errors='replace')[:200]}" for key, value in fields.items())
        for _, fields in entries
    ]
