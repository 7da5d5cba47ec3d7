"""Shipped log lines on real SQL (SQLite and PostgreSQL): kept once, capped per job."""

from devstack import job_sessions
from tests.service.test_collector import make_job
from trainjobs.contract.events import LogLines
from trainjobs.jobs.db import transaction
from trainjobs.jobs.repositories import job_logs


def test_lines_are_kept_once_per_position_and_served_rank_by_rank(database_url, namespace):
    sessions = job_sessions(database_url, namespace)
    job_id = make_job(sessions)
    with transaction(sessions) as session:
        job_logs.append(session, job_id, 1, LogLines(rank=1, first_line=0, lines=["b0", "b1"]), cap=100)
        job_logs.append(session, job_id, 1, LogLines(rank=0, first_line=0, lines=["a0"]), cap=100)
        job_logs.append(session, job_id, 1, LogLines(rank=1, first_line=0, lines=["b0", "b1"]), cap=100)  # again
        job_logs.append(session, job_id, 2, LogLines(rank=0, first_line=0, lines=["second attempt"]), cap=100)
    with transaction(sessions) as session:
        assert job_logs.attempt_text(session, job_id, 1, tail=None) == ["[rank 0] a0", "[rank 1] b0", "[rank 1] b1"]
        assert job_logs.attempt_text(session, job_id, 1, tail=1) == ["[rank 0] a0", "[rank 1] b1"]
        assert job_logs.attempt_text(session, job_id, 2, tail=None) == ["[rank 0] second attempt"]


def test_past_the_cap_one_notice_is_kept_and_the_rest_dropped(database_url, namespace):
    sessions = job_sessions(database_url, namespace)
    job_id = make_job(sessions)
    with transaction(sessions) as session:
        for start in range(0, 150, 50):
            lines = [f"line {n}" for n in range(start, start + 50)]
            job_logs.append(session, job_id, 1, LogLines(rank=0, first_line=start, lines=lines), cap=100)
    with transaction(sessions) as session:
        kept = job_logs.attempt_text(session, job_id, 1, tail=None)
    assert len(kept) == 101 and kept[99] == "[rank 0] line 99"
    assert "reached 100 lines" in kept[100]
