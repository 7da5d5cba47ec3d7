"""The leader's sharing sweep on real SQL (SQLite and PostgreSQL): every queued job gets the
waiting reason the rule gives it, a long queue is written a batch at a time, a pass over an
unchanged fleet changes nothing, and a job that can start loses its reason and is dispatched again."""

import time

from sqlalchemy import func, select

from devstack import job_sessions, tiny_wavenet_spec
from trainjobs.contract.spec import JobSpec
from trainjobs.contract.workers import WorkerStatus
from trainjobs.jobs import queue
from trainjobs.jobs.db import transaction
from trainjobs.jobs.sharing import Rules
from trainjobs.jobs.tables import DispatchIntentRow, JobEventRow, JobRow
from trainjobs.service import sharing
from trainjobs.service.auth import Principal
from trainjobs.service.jobs import submit


class NoBroker:
    """Submit's message goes out after the commit; these tests look at SQL only."""

    def send_committed(self, job_id: str, device: str) -> None:
        pass


def worker(slots: int) -> WorkerStatus:
    return WorkerStatus(hostname=f"host-{slots}", device="cpu", slots=slots, busy=0, jobs=[], last_seen=time.time())


def submit_jobs(sessions, gpus: int, count: int) -> None:
    spec = JobSpec.model_validate(tiny_wavenet_spec(gpus=gpus))
    with transaction(sessions) as session:
        for _ in range(count):
            submit(session, Principal("alice", False), spec, NoBroker())


def explain_waiting_jobs(sessions, workers: list[WorkerStatus], limit: int = sharing.REASONS_BATCH) -> int:
    with transaction(sessions) as session:
        decided = queue.decision(session, "cpu", workers, Rules(time.time()))
    return sharing.explain(sessions, decided, limit=limit)


def reasons(sessions) -> dict[str | None, int]:
    with transaction(sessions) as session:
        rows = session.execute(select(JobRow.waiting_reason, func.count()).group_by(JobRow.waiting_reason))
        return dict(rows.all())


def count(sessions, table) -> int:
    with transaction(sessions) as session:
        return session.scalar(select(func.count()).select_from(table))


def test_every_queued_job_gets_its_reason_however_long_the_queue(database_url, namespace):
    sessions = job_sessions(database_url, namespace)
    submit_jobs(sessions, gpus=3, count=120)
    submit_jobs(sessions, gpus=1, count=5)

    # 50 a pass: three passes reach the 120 three-rank jobs and the three one-rank jobs that wait
    # (two start on the worker's two slots: no reason), and a fourth finds none left.
    assert [explain_waiting_jobs(sessions, [worker(2)], limit=50) for _ in range(4)] == [50, 50, 23, 0]
    waits = (
        "waiting for 1 free cpu devices: owner alice would be above its fair share (2 in use + 1 > 2.0), "
        "so it preempts no one"
    )
    assert reasons(sessions) == {"needs 3 cpu devices; the largest live cpu worker has 2": 120, None: 2, waits: 3}


def test_a_pass_over_an_unchanged_fleet_changes_nothing(database_url, namespace):
    sessions = job_sessions(database_url, namespace)
    submit_jobs(sessions, gpus=3, count=10)
    explain_waiting_jobs(sessions, [worker(2)])
    events = count(sessions, JobEventRow)

    assert explain_waiting_jobs(sessions, [worker(2)]) == 0
    assert count(sessions, JobEventRow) == events


def test_a_job_that_can_run_again_loses_its_reason_and_is_dispatched_again(database_url, namespace):
    sessions = job_sessions(database_url, namespace)
    submit_jobs(sessions, gpus=3, count=4)
    with transaction(sessions) as session:
        session.query(DispatchIntentRow).delete()  # as if every message had gone out
    assert explain_waiting_jobs(sessions, []) == 4
    assert reasons(sessions) == {"no live cpu worker": 4}

    assert explain_waiting_jobs(sessions, [worker(4)]) == 4
    waits = (
        "waiting for 3 free cpu devices: owner alice would be above its fair share (3 in use + 3 > 4.0), "
        "so it preempts no one"
    )
    assert reasons(sessions) == {None: 1, waits: 3}  # the first starts; the others wait for it
    assert count(sessions, DispatchIntentRow) == 1
