"""`AsyncTrainJobsClient`: the same calls on httpx's async client, for async services that call
this one (the streams are the sync client's alone)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any, Unpack

import httpx

from trainjobs.client.calls import AnswerT, Call, Calls, JobFilters, answer, auth_headers, changed, job_filters
from trainjobs.client.errors import NotFound, raise_for
from trainjobs.client.packing import Packed
from trainjobs.client.sync_client import GZIP, WAIT_POLL_SECONDS
from trainjobs.contract.code import CodeArchive, CodeLimits
from trainjobs.contract.events import EpochMetrics
from trainjobs.contract.job import CheckpointInfo, JobDocument, JobPage, WorkerInfo
from trainjobs.contract.sharing import OwnerSettingsDocument, OwnerSettingsUpdate, QueueView
from trainjobs.contract.states import TERMINAL_STATES


class AsyncTrainJobsClient:
    """`async with AsyncTrainJobsClient(url, token) as client: job = await client.wait(job_id)`."""

    def __init__(self, url: str, token: str | None, timeout: float = 30.0):
        self.http = httpx.AsyncClient(base_url=url.rstrip("/"), headers=auth_headers(token), timeout=timeout)

    async def __aenter__(self) -> AsyncTrainJobsClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.http.aclose()

    async def _send(self, call: Call[AnswerT]) -> AnswerT:
        response = await self.http.request(
            call.method, call.path, params=call.params, json=call.body, headers=call.headers
        )
        return answer(call, response)

    async def submit(self, spec: dict[str, Any], idempotency_key: str | None = None) -> JobDocument:
        return await self._send(Calls.submit(spec, idempotency_key))

    async def job(self, job_id: str) -> JobDocument:
        return await self._send(Calls.job(job_id))

    async def jobs(self, limit: int = 50, cursor: str | None = None, **filters: Unpack[JobFilters]) -> JobPage:
        return await self._send(Calls.jobs(limit, cursor, job_filters(**filters)))

    async def iter_jobs(self, page_size: int = 100, **filters: Unpack[JobFilters]) -> AsyncIterator[JobDocument]:
        query, cursor = job_filters(**filters), None
        while True:
            page = await self._send(Calls.jobs(page_size, cursor, query))
            for job in page.items:
                yield job
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def cancel(self, job_id: str) -> JobDocument:
        return await self._send(Calls.cancel(job_id))

    async def delete(self, job_id: str) -> None:
        await self._send(Calls.delete(job_id))

    async def wait(
        self, job_id: str, timeout: float | None = None, poll_seconds: float = WAIT_POLL_SECONDS
    ) -> JobDocument:
        deadline = None if timeout is None else time.monotonic() + timeout
        job, etag = changed(await self.http.get(f"/v1/jobs/{job_id}"), None, None)
        while job.state not in TERMINAL_STATES:
            if deadline is not None and time.monotonic() + poll_seconds > deadline:
                raise TimeoutError(f"job {job_id} is still {job.state} after {timeout} s")
            await asyncio.sleep(poll_seconds)
            response = await self.http.get(f"/v1/jobs/{job_id}", headers={"If-None-Match": etag} if etag else {})
            job, etag = changed(response, job, etag)
        return job

    async def logs(self, job_id: str, tail: int | None = None) -> str:
        return await self._send(Calls.logs(job_id, tail))

    async def workers(self) -> list[WorkerInfo]:
        return (await self._send(Calls.workers())).items

    async def metrics(self, job_id: str) -> list[EpochMetrics]:
        return (await self._send(Calls.metrics(job_id))).items

    async def queue(self, device: str = "cuda") -> QueueView:
        """The queued jobs of `device` in start order, with reasons, and each owner's share."""
        return await self._send(Calls.queue(device))

    async def owners(self) -> list[OwnerSettingsDocument]:
        return (await self._send(Calls.owners())).items

    async def put_owner(self, owner: str, settings: OwnerSettingsUpdate) -> OwnerSettingsDocument:
        """An owner's whole sharing settings (admins only)."""
        return await self._send(Calls.put_owner(owner, settings))

    async def code_limits(self) -> CodeLimits:
        """This API's bounds on a code archive (an older API without them: NotFound)."""
        return await self._send(Calls.code_limits())

    async def code(self, code: str) -> CodeArchive:
        return await self._send(Calls.code(code))

    async def delete_code(self, code: str) -> None:
        await self._send(Calls.delete_code(code))

    async def push_code(self, packed: Packed) -> tuple[CodeArchive, bool]:
        """As TrainJobsClient.push_code: uploaded unless the API has these bytes already."""
        try:
            return await self.code(packed.code), False
        except NotFound:
            pass

        async def chunks() -> AsyncIterator[bytes]:
            with open(packed.path, "rb") as archive:
                while chunk := archive.read(1 << 20):
                    yield chunk

        response = await self.http.post(
            "/v1/code", content=chunks(), headers=GZIP, timeout=httpx.Timeout(30.0, write=600.0)
        )
        if response.status_code >= 400:
            raise_for(response)
        return CodeArchive.model_validate_json(response.content), True

    async def checkpoints(self, job_id: str) -> list[CheckpointInfo]:
        return (await self._send(Calls.checkpoints(job_id))).items
