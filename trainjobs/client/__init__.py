"""Typed clients for the trainjobs HTTP API: `TrainJobsClient` (sync) and
`AsyncTrainJobsClient` (httpx's async client, for async services that call this one). Both
return the contract's pydantic models and raise `ApiError` subclasses carrying the status and the
API's `detail`. The CLI is built on the sync one.

    with TrainJobsClient("http://127.0.0.1:8000", token) as client:
        job = client.submit(spec)
        final = client.wait(job.id, timeout=600)
        for job in client.iter_jobs(label=["team=speech"], state="failed"):
            client.delete(job.id)
"""

from trainjobs.client.async_client import AsyncTrainJobsClient
from trainjobs.client.calls import JobFilters
from trainjobs.client.errors import (
    ApiError,
    Conflict,
    Forbidden,
    InvalidRequest,
    NotFound,
    TooManyRequests,
    Unauthorized,
    Unreachable,
)
from trainjobs.client.reconnect import RECONNECT_CAP_SECONDS, reconnect_delay
from trainjobs.client.sync_client import Event, TrainJobsClient

__all__ = [
    "RECONNECT_CAP_SECONDS",
    "ApiError",
    "AsyncTrainJobsClient",
    "Conflict",
    "Event",
    "Forbidden",
    "InvalidRequest",
    "JobFilters",
    "NotFound",
    "TooManyRequests",
    "TrainJobsClient",
    "Unauthorized",
    "Unreachable",
    "reconnect_delay",
]
