"""A running job's watch (worker/job_runner.py) reads SQL only when its lease is due for renewal
or a notice wakes it: a cancel reaches the ranks by its notice, long before the next renewal, and
a cancel whose notice never came is still found at that renewal. Real API, worker and ranks."""

import pytest
import redis

from devstack import REDIS_URL, processes_of_job, tiny_wavenet_spec, wait_for_terminal, wait_until
from trainjobs.contract.redis_keys import RedisKeys
from trainjobs.jobs import lifecycle
from trainjobs.jobs.db import make_engine, make_session_factory, transaction
from trainjobs.jobs.job_cache import JobCacheWriter
from trainjobs.jobs.repositories import jobs

pytestmark = pytest.mark.e2e


def running_job(stack) -> tuple[object, str]:
    client = stack.client(stack.token())
    job_id = client.post("/v1/jobs", json=tiny_wavenet_spec(epochs=10_000)).json()["id"]
    wait_until(lambda: client.get(f"/v1/jobs/{job_id}").json()["epoch"] >= 1, 120, what="a first epoch")
    return client, job_id


def test_a_cancel_ends_the_job_by_its_notice_between_two_lease_renewals(stack_on, sqlite_url):
    stack = stack_on(sqlite_url, TRAINJOBS_LEASE_SECONDS="300")  # renewed every 100 s
    client, job_id = running_job(stack)

    assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
    wait_until(lambda: not processes_of_job(job_id), 30, what="every process of the job to end")
    assert wait_for_terminal(client, job_id, timeout=30)["state"] == "cancelled"


class NoticeLost(JobCacheWriter):
    """Publishes to the job cache, but its notices never reach a worker (Redis restarted, say)."""

    def announce(self, job_id: str, state: str) -> None:
        pass


def test_a_cancel_whose_notice_never_came_is_found_at_the_next_lease_renewal(stack_on, sqlite_url):
    stack = stack_on(sqlite_url, TRAINJOBS_LEASE_SECONDS="6")  # renewed every 2 s
    client, job_id = running_job(stack)

    engine = make_engine(sqlite_url)
    try:
        with transaction(
            make_session_factory(engine, NoticeLost(redis.Redis.from_url(REDIS_URL), RedisKeys(stack.namespace)))
        ) as session:
            lifecycle.cancel(session, jobs.get(session, job_id, for_update=True))
    finally:
        engine.dispose()
    wait_until(lambda: not processes_of_job(job_id), 30, what="every process of the job to end")
    assert wait_for_terminal(client, job_id, timeout=30)["state"] == "cancelled"
