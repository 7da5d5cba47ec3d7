"""All a worker reads and writes in SQL (trainjobs.jobs.worker_gateway), on real SQLite and
PostgreSQL: what a run message finds, the claim and what a run needs, the gathering of a
multi-node job's nodes, the lease, and waiting reasons."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest

from devstack import job_sessions, tiny_wavenet_spec
from trainjobs.contract.checkpoints import checkpoint_id, checkpoint_path
from trainjobs.contract.clock import utcnow
from trainjobs.contract.events import CheckpointRecord
from trainjobs.contract.spec import JobSpec
from trainjobs.contract.workers import WorkerStatus
from trainjobs.jobs import lifecycle, worker_gateway
from trainjobs.jobs.db import transaction
from trainjobs.jobs.repositories import jobs
from trainjobs.jobs.sharing import Rules


@pytest.fixture
def sessions(database_url, namespace):
    return job_sessions(database_url, namespace)


def submitted(sessions, **spec) -> str:
    with transaction(sessions) as session:
        return lifecycle.submit(session, "alice", JobSpec.model_validate(tiny_wavenet_spec(**spec)), None).id


def checkpointed(sessions, job_id: str, epoch: int, attempt: int = 1) -> str:
    checkpoint = checkpoint_id(job_id, epoch)
    record = CheckpointRecord(
        id=checkpoint, epoch=epoch, size_bytes=1, sha256="0" * 64, is_best=False, created_at=utcnow(),
        path=checkpoint_path(job_id, checkpoint, attempt),
    )  # fmt: skip
    with transaction(sessions) as session:
        lifecycle.record_checkpoint(session, jobs.get(session, job_id, for_update=True), attempt, record)
    return record.path


def test_a_message_view_names_its_job(sessions):
    job_id = submitted(sessions, gpus=4, nodes=2)
    with transaction(sessions) as session:
        view = worker_gateway.view_message(session, job_id)
        unknown = worker_gateway.view_message(session, "jnosuchjob")
    assert (view.state, view.job.id, view.job.needed, view.job.nodes) == ("queued", job_id, 2, 2)
    assert (unknown.state, unknown.job) == (None, None)


def fleet(*workers: tuple[str, int, int]) -> list[WorkerStatus]:
    return [
        WorkerStatus(hostname=name, device="cpu", slots=slots, busy=busy, jobs=[], last_seen=time.time())
        for name, slots, busy in workers
    ]


def test_a_worker_starts_only_what_the_rule_places_on_it(sessions):
    """The oldest job first; a worker that the rule gives nothing starts nothing, even with free
    slots: a 2-device job goes to the worker with exactly 2 free (best fit), not to the one with 4."""
    first = submitted(sessions, gpus=2)
    time.sleep(0.01)
    submitted(sessions, gpus=2)
    workers = fleet(("w-two", 2, 0), ("w-four", 4, 0))
    with transaction(sessions) as session:
        on_two = worker_gateway.next_start(session, "w-two", "cpu", workers, Rules(time.time()), free=2)
        on_four = worker_gateway.next_start(session, "w-four", "cpu", workers, Rules(time.time()), free=4)
        two_busy = worker_gateway.next_start(session, "w-two", "cpu", workers, Rules(time.time()), free=0)
    assert on_two is not None and on_two.id == first  # best fit: the worker with exactly 2 free
    assert on_four is not None and on_four.id != first  # the second job
    assert two_busy is None  # with w-two full, both go to w-four: w-two starts nothing


def test_a_claim_is_won_once_and_a_later_attempt_resumes_from_the_latest_checkpoint(sessions):
    job_id = submitted(sessions)
    with transaction(sessions) as session:
        claimed = worker_gateway.claim(session, job_id, "w1", lease_seconds=30)
    with transaction(sessions) as session:
        again = worker_gateway.claim(session, job_id, "w2", lease_seconds=30)
    assert (claimed.id, claimed.attempt, claimed.resume_path, claimed.node_rank) == (job_id, 1, None, 0)
    assert again is None

    checkpointed(sessions, job_id, 1)
    latest = checkpointed(sessions, job_id, 2)
    with transaction(sessions) as session:
        job = jobs.get(session, job_id, for_update=True)
        job.lease_expires_at = utcnow() - timedelta(seconds=1)  # as the reaper finds it
        lifecycle.requeue(session, job, "requeued: worker w1 was lost")
    with transaction(sessions) as session:
        resumed = worker_gateway.claim(session, job_id, "w2", lease_seconds=30)
    assert (resumed.attempt, resumed.resume_path) == (2, latest)


@pytest.mark.parametrize("how", ["node lost", "preemption's grace ran out"])
def test_a_job_requeued_while_its_lease_runs_starts_again_only_once_that_lease_is_over(sessions, how):
    """Its worker kills the attempt's processes before the lease runs out (worker/job_watch.py):
    until then the next attempt would run beside them."""
    job_id = submitted(sessions)
    with transaction(sessions) as session:
        worker_gateway.claim(session, job_id, "w1", lease_seconds=1.5)
    with transaction(sessions) as session:
        job = jobs.get(session, job_id, for_update=True)
        if how == "node lost":
            lifecycle.requeue(session, job, "requeued: a node was lost")
        else:
            lifecycle.preempt(session, job, "jother")
            lifecycle.preempted(session, job, "no checkpoint came in time")
    with transaction(sessions) as session:
        assert worker_gateway.next_start(session, "w2", "cpu", fleet(("w2", 2, 0)), Rules(now=time.time()), 2) is None
        assert worker_gateway.claim(session, job_id, "w2", lease_seconds=30) is None
    time.sleep(1.6)
    with transaction(sessions) as session:
        assert (
            worker_gateway.next_start(session, "w2", "cpu", fleet(("w2", 2, 0)), Rules(now=time.time()), 2).id == job_id
        )
        assert worker_gateway.claim(session, job_id, "w2", lease_seconds=30).attempt == 2


def test_a_preempted_job_whose_ranks_stopped_can_start_again_at_once(sessions):
    job_id = submitted(sessions)
    with transaction(sessions) as session:
        worker_gateway.claim(session, job_id, "w1", lease_seconds=30)
    with transaction(sessions) as session:
        job = jobs.get(session, job_id, for_update=True)
        lifecycle.preempt(session, job, "jother")
        lifecycle.preempted(session, job, "it stopped after its checkpoint", stopped=True)
    with transaction(sessions) as session:
        assert worker_gateway.claim(session, job_id, "w2", lease_seconds=30).attempt == 2


def test_a_first_attempt_starts_from_resume_from_and_says_when_that_checkpoint_is_gone(sessions):
    source = submitted(sessions)
    with transaction(sessions) as session:
        worker_gateway.claim(session, source, "w1", lease_seconds=30)
    path = checkpointed(sessions, source, 1)
    follower, orphan = submitted(sessions, resume_from=checkpoint_id(source, 1)), submitted(sessions)
    with transaction(sessions) as session:
        job = jobs.get(session, orphan, for_update=True)
        job.spec = {**job.spec, "init_from": f"{source}-e0009"}  # a checkpoint rotated out since
    with transaction(sessions) as session:
        started = worker_gateway.claim(session, follower, "w1", lease_seconds=30)
        missing = worker_gateway.claim(session, orphan, "w1", lease_seconds=30)
    assert (started.resume_path, started.init_path, started.missing_checkpoint) == (path, None, None)
    assert "no longer exists" in missing.missing_checkpoint


def test_a_multi_node_job_starts_once_every_node_is_held_with_node_0_s_address(sessions):
    job_id = submitted(sessions, gpus=2, nodes=2)
    with transaction(sessions) as session:
        first = worker_gateway.join(session, job_id, "w1", "10.0.0.1", lease_seconds=30)
    with transaction(sessions) as session:
        waiting = worker_gateway.gathering(session, job_id, first.attempt, "w1", lease_seconds=30)
    with transaction(sessions) as session:
        second = worker_gateway.join(session, job_id, "w2", "10.0.0.2", lease_seconds=30)
    with transaction(sessions) as session:
        started = worker_gateway.gathering(session, job_id, first.attempt, "w1", lease_seconds=30)
    assert (first.node_rank, first.started, waiting.state, waiting.started) == (0, None, "queued", None)
    assert (second.node_rank, second.started.node_rank, second.started.leader_address) == (1, 1, "10.0.0.1")
    assert (started.state, started.started.node_rank, started.started.leader_address) == ("running", 0, "10.0.0.1")


def test_a_node_given_back_leaves_the_job_queued_for_another_worker(sessions):
    job_id = submitted(sessions, gpus=2, nodes=2)
    with transaction(sessions) as session:
        held = worker_gateway.join(session, job_id, "w1", "10.0.0.1", lease_seconds=30)
    with transaction(sessions) as session:
        worker_gateway.leave(session, job_id, held.attempt, "w1")
    with transaction(sessions) as session:
        other = worker_gateway.join(session, job_id, "w2", "10.0.0.2", lease_seconds=30)
    assert other.node_rank == 0  # the node w1 gave back


def test_the_lease_check_renews_while_the_lease_is_ours_and_says_when_it_is_not(sessions):
    job_id = submitted(sessions)
    with transaction(sessions) as session:
        worker_gateway.claim(session, job_id, "w1", lease_seconds=5)
        before = jobs.get(session, job_id).lease_expires_at
    with transaction(sessions) as session:
        ours = worker_gateway.check_lease(session, job_id, "w1", 1, renew_for=60)
    with transaction(sessions) as session:
        renewed = jobs.get(session, job_id).lease_expires_at
        stranger = worker_gateway.check_lease(session, job_id, "w2", 1, renew_for=60)
        lifecycle.requeue(session, jobs.get(session, job_id, for_update=True), "requeued: worker w1 was lost")
    with transaction(sessions) as session:
        moved_on = worker_gateway.check_lease(session, job_id, "w1", 1, renew_for=60)
        gone = worker_gateway.check_lease(session, "jnosuchjob", "w1", 1, renew_for=None)
    assert (ours.state, ours.same_attempt, ours.ours) == ("running", True, True)
    assert (renewed - before).total_seconds() > 50
    assert (stranger.same_attempt, stranger.ours) == (True, False)
    assert (moved_on.state, moved_on.same_attempt, moved_on.ours) == ("queued", False, False)
    assert (gone.state, gone.ours) == (None, False)


def test_a_waiting_reason_is_set_on_a_queued_job_only(sessions):
    queued, running = submitted(sessions), submitted(sessions)
    with transaction(sessions) as session:
        worker_gateway.claim(session, running, "w1", lease_seconds=30)
    with transaction(sessions) as session:
        worker_gateway.explain_waiting(session, queued, "needs 3 cpu devices")
        worker_gateway.explain_waiting(session, running, "needs 3 cpu devices")
    with transaction(sessions) as session:
        assert jobs.get(session, queued).waiting_reason == "needs 3 cpu devices"
        assert jobs.get(session, running).waiting_reason is None
