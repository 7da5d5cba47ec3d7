"""The job_log_lines repository on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from devstack import job_sessions, tiny_wavenet_spec
from trainjobs.contract.events import LogLines
from trainjobs.contract.spec import JobSpec
from trainjobs.jobs import lifecycle
from trainjobs.jobs.db import transaction
from trainjobs.jobs.repositories import job_logs


@pytest.fixture
def sessions(database_url, namespace):
    return job_sessions(database_url, namespace)


def test_a_nul_byte_in_a_rank_s_output_keeps_the_whole_batch(sessions):
    """PostgreSQL refuses a NUL in text: the batch once failed whole (and went to dead letters)."""
    with transaction(sessions) as session:
        job_id = lifecycle.submit(session, "alice", JobSpec.model_validate(tiny_wavenet_spec()), None).id
    batch = LogLines(rank=0, first_line=0, lines=["before", "a\x00b", "after"])
    with transaction(sessions) as session:
        assert job_logs.append(session, job_id, 1, batch, cap=100) == 3
    with transaction(sessions) as session:
        assert job_logs.attempt_text(session, job_id, 1, None) == [
            "[rank 0] before",
            f"[rank 0] a{job_logs.NUL_SHOWN_AS}b",
            "[rank 0] after",
        ]
