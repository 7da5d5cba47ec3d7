"""The Python clients (sync and async) against a running API process on real SQL and Redis:
contract models back, pages followed, waits that end, errors with the status and detail."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from devstack import tiny_wavenet_spec
from trainjobs.client import (
    ApiError,
    AsyncTrainJobsClient,
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    TrainJobsClient,
    Unauthorized,
)
from trainjobs.contract.job import JobDocument, JobPage

pytestmark = pytest.mark.e2e


@pytest.fixture
def api_stack(stack_on, sqlite_url):
    return stack_on(sqlite_url, with_worker=False)


def cancel_soon(stack, token: str, job_id: str, after: float = 1.0) -> threading.Thread:
    def cancel():
        time.sleep(after)
        stack.client(token).post(f"/v1/jobs/{job_id}/cancel")

    thread = threading.Thread(target=cancel)
    thread.start()
    return thread


def test_the_sync_client_returns_models_pages_through_everything_and_waits(api_stack):
    token = api_stack.token("alice")
    with TrainJobsClient(api_stack.url, token) as client:
        made = [client.submit(tiny_wavenet_spec(name=f"run-{i}", labels={"sweep": "7"})) for i in range(5)]
        client.submit(tiny_wavenet_spec(name="other"))
        assert all(isinstance(job, JobDocument) and job.state == "queued" for job in made)
        assert made[0].spec["labels"] == {"sweep": "7"}

        page = client.jobs(label="sweep=7", limit=2)
        assert isinstance(page, JobPage) and len(page.items) == 2 and page.next_cursor
        everything = list(client.iter_jobs(label=["sweep=7"], page_size=2))
        assert [job.id for job in everything] == [job.id for job in reversed(made)]
        assert [job.name for job in client.iter_jobs(name="OTHER")] == ["other"]

        waiter = cancel_soon(api_stack, token, made[0].id)
        final = client.wait(made[0].id, timeout=30, poll_seconds=0.2)
        waiter.join()
        assert (final.state, final.stop_reason) == ("cancelled", "cancelled")
        with pytest.raises(TimeoutError):
            client.wait(made[1].id, timeout=0.5, poll_seconds=0.2)

        assert client.metrics(made[0].id) == [] and client.checkpoints(made[0].id) == []
        client.delete(made[0].id)
        with pytest.raises(NotFound) as missing:
            client.job(made[0].id)
        assert missing.value.status == 404 and made[0].id in missing.value.detail
    assert client.http.is_closed


def test_the_sync_client_raises_errors_carrying_the_status_and_the_api_s_detail(api_stack):
    token = api_stack.token("alice")
    with TrainJobsClient(api_stack.url, token) as client:
        with pytest.raises(InvalidRequest) as invalid:
            client.submit(tiny_wavenet_spec(labels={"Bad Key": "x"}))
        assert invalid.value.status == 422 and "Bad Key" in invalid.value.detail
        with pytest.raises(Forbidden) as forbidden:
            client.jobs(owner="bob")
        assert forbidden.value.status == 403 and "owner" in forbidden.value.detail
        queued = client.submit(tiny_wavenet_spec())
        with pytest.raises(Conflict) as conflict:
            client.delete(queued.id)
        assert conflict.value.status == 409 and "queued" in conflict.value.detail
    with TrainJobsClient(api_stack.url, "tj_wrong") as stranger, pytest.raises(Unauthorized) as refused:
        stranger.jobs()
    assert isinstance(refused.value, ApiError) and refused.value.status == 401


def test_the_async_client_does_the_same_on_httpx_s_async_client(api_stack):
    token = api_stack.token("alice")

    async def scenario():
        async with AsyncTrainJobsClient(api_stack.url, token) as client:
            made = [await client.submit(tiny_wavenet_spec(labels={"team": "speech"})) for _ in range(3)]
            assert all(isinstance(job, JobDocument) for job in made)
            assert (await client.job(made[0].id)).id == made[0].id
            assert len((await client.jobs(label="team", limit=2)).items) == 2
            listed = [job.id async for job in client.iter_jobs(label="team=speech", state="queued", page_size=2)]
            assert listed == [job.id for job in reversed(made)]

            waiter = cancel_soon(api_stack, token, made[1].id)
            final = await client.wait(made[1].id, timeout=30, poll_seconds=0.2)
            await asyncio.to_thread(waiter.join)
            assert final.state == "cancelled"
            with pytest.raises(TimeoutError):
                await client.wait(made[2].id, timeout=0.5, poll_seconds=0.2)

            assert await client.metrics(made[1].id) == []
            await client.delete(made[1].id)
            with pytest.raises(NotFound) as missing:
                await client.job(made[1].id)
            assert missing.value.status == 404
            with pytest.raises(InvalidRequest) as invalid:
                await client.jobs(state="paused")
            assert invalid.value.status == 422 and "state" in invalid.value.detail
            return client

    client = asyncio.run(scenario())
    assert client.http.is_closed
