"""A job whose code attacks from inside its ranks: it looks for the service's secrets, reads and
writes outside its run directory, connects to the service's servers, signals the worker, forks
without end and fills the disk. Each is blocked or bounded, each job still ends readably, the
worker stays healthy, and another owner's job beside it trains to the end."""

import json
import os
from pathlib import Path

import pytest

from devstack import HALF_SECOND_EPOCHS, archive_of, example_files, tiny_wavenet_spec, wait_for_terminal, wait_until
from trainjobs.worker.sandbox import unavailable_because

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(unavailable_because() is not None, reason=f"no sandbox: {unavailable_because()}"),
]

HOSTILE_PACKAGE = Path(__file__).resolve().parent / "hostile_code"
DISK_BYTES = 64 << 20
MAX_PROCESSES = 128
HOST_SHM = Path(f"/dev/shm/trainjobs-hostile-victim-{os.getpid()}")  # the host's, not the sandbox's


def hostile_archive() -> bytes:
    files = {str(path.relative_to(HOSTILE_PACKAGE)): path.read_bytes() for path in HOSTILE_PACKAGE.rglob("*.py")}
    return archive_of({**example_files(), **files})


def hostile_spec(code: str, attack: str, targets: dict) -> dict:
    return {
        "model": {"name": "hostile.catalog:HOSTILE", "params": {"channels": 4, "attack": attack, "targets": targets}},
        "data": {"name": "wavesort.catalog:WAVES", "params": {"num_samples": 64, "length": 32}},
        "device": "cpu",
        "gpus": 1,
        "epochs": 1,
        "batch_size": 8,
        "optimizer": {"name": "sgd", "lr": 0.01},
        "code": code,
    }


def reported(client, job_id: str) -> str:
    lines = [line for line in client.get(f"/v1/jobs/{job_id}/logs").text.splitlines() if "HOSTILE " in line]
    assert lines, f"job {job_id} reported nothing"
    return lines[-1].split("HOSTILE ", 1)[1]


@pytest.fixture
def host_shm():
    HOST_SHM.write_bytes(b"another process's shared memory")
    yield HOST_SHM
    HOST_SHM.unlink(missing_ok=True)


def test_a_hostile_job_is_blocked_or_bounded_and_another_owners_job_beside_it_succeeds(stack_on, sqlite_url, host_shm):
    stack = stack_on(sqlite_url, with_worker=False)
    token = stack.token("alice")
    (stack.home / "admin-token").write_text(token)  # as an operator might keep it
    bounds = {"TRAINJOBS_JOB_DISK_BYTES": str(DISK_BYTES), "TRAINJOBS_SANDBOX_MAX_PROCESSES": str(MAX_PROCESSES)}
    worker = stack.start_worker(TRAINJOBS_TOKEN=token, **bounds)
    alice, bob = stack.client(token), stack.client(stack.token("bob"))

    beside = bob.post("/v1/jobs", json=tiny_wavenet_spec(gpus=1, epochs=8, data=HALF_SECOND_EPOCHS)).json()["id"]
    wait_until(lambda: bob.get(f"/v1/jobs/{beside}").json()["epoch"] >= 1, 120, what="bob's first epoch")

    code = alice.post("/v1/code", content=hostile_archive(), headers={"Content-Type": "application/gzip"}).json()["id"]
    targets = aimed_at(stack, token, beside, worker.pid)
    attacks = {
        attack: alice.post("/v1/jobs", json=hostile_spec(code, attack, targets)).json()["id"]
        for attack in ("probe", "fork", "fill")
    }
    ended = {attack: wait_for_terminal(alice, job_id, timeout=240) for attack, job_id in attacks.items()}
    each_attack_was_blocked_or_bounded(alice, attacks, ended)
    assert not (stack.home / "pwned").exists()
    assert HOST_SHM.exists()  # no tracker of root's was asked to unlink it

    finished = wait_for_terminal(bob, beside, timeout=240)
    assert finished["state"] == "succeeded", finished["error"]
    assert [row["epoch"] for row in bob.get(f"/v1/jobs/{beside}/metrics").json()["items"]] == list(range(1, 9))
    assert finished["finished_at"] > ended["probe"]["started_at"]  # it ran beside the attacks

    assert worker.poll() is None  # the worker lives, and still takes and runs jobs
    after = alice.post("/v1/jobs", json=tiny_wavenet_spec(gpus=1, epochs=1)).json()["id"]
    assert wait_for_terminal(alice, after)["state"] == "succeeded"
    idle = lambda: [item["busy"] for item in alice.get("/v1/workers").json()["items"]] == [0]  # noqa: E731
    wait_until(idle, 15, what="the worker to say it is idle")  # its next heartbeat


def aimed_at(stack, token: str, other_job: str, worker_pid: int) -> dict[str, str]:
    """What the hostile code is told to go for: the stack's secrets and the paths that hold them."""
    return {
        "token": token,
        "database_url": stack.database_url,
        "redis_url": stack.redis_url,
        "database_file": stack.database_url.removeprefix("sqlite:///"),
        "token_file": str(stack.home / "admin-token"),
        "other_run_dir": str(stack.home / "runs" / other_job),
        "other_checkpoints": str(stack.home / "checkpoints" / other_job),
        "home": str(stack.home),
        "redis_port": stack.redis_url.rsplit(":", 1)[1].split("/")[0],
        "postgres_port": "5432",
        "api_port": str(stack.port),
        "worker_pid": str(worker_pid),
        "host_shm": HOST_SHM.name,
    }


def each_attack_was_blocked_or_bounded(client, attacks: dict[str, str], ended: dict[str, dict]) -> None:
    probe = json.loads(reported(client, attacks["probe"]))
    assert ended["probe"]["state"] == "succeeded", ended["probe"]["error"]
    assert len(probe) == 12, probe
    assert {name: outcome for name, outcome in probe.items() if not outcome.startswith("blocked")} == {}

    fork = json.loads(reported(client, attacks["fork"]))["fork"]
    assert fork.startswith("blocked: BlockingIOError") and int(fork.split()[-2]) < MAX_PROCESSES, fork
    assert ended["fork"]["state"] == "succeeded", ended["fork"]["error"]

    assert (ended["fill"]["state"], ended["fill"]["stop_reason"]) == ("failed", "error")
    assert "TRAINJOBS_JOB_DISK_BYTES" in ended["fill"]["error"]
