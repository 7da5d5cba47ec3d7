"""GET /metrics: Prometheus text. Gauges are read from SQL and Redis at scrape time; request
latency is a histogram observed by a middleware, labelled by route template (not raw path).

Without a token it holds counts only, no job ids or owner names (docs/design.md); the series
labelled by job or owner are added for a scraper holding an admin's token (Prometheus's
`authorization: {credentials: ...}`)."""

from __future__ import annotations

import time

import redis
from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, Histogram, generate_latest
from sqlalchemy import func, select
from starlette.concurrency import run_in_threadpool

from trainjobs.contract.clock import utcnow
from trainjobs.contract.states import JOB_STATES
from trainjobs.jobs.repositories import jobs
from trainjobs.jobs.tables import EpochMetricsRow
from trainjobs.service.api.deps import AppState, State

router = APIRouter(tags=["health"])


class ApiMetrics:
    def __init__(self):
        self.registry = CollectorRegistry()
        self.detailed = CollectorRegistry()  # the series labelled by job or owner: admins only
        self.jobs = Gauge("trainjobs_jobs", "jobs by state", ["state"], registry=self.registry)
        self.queue_depth = Gauge(
            "trainjobs_queue_depth", "run messages waiting in the broker", ["device"], registry=self.registry
        )
        self.epochs = Gauge("trainjobs_epochs_finished", "epochs finished, all jobs", registry=self.registry)
        self.dead_letters = Gauge(
            "trainjobs_dead_letter_events",
            "stream entries the collector set aside (malformed, or failing to apply); see <namespace>:events:dead",
            registry=self.registry,
        )
        # One series per running job, dropped when it ends (each scrape sets only the running ones).
        self.per_job = {
            name: Gauge(f"trainjobs_job_{name}", help_, ["job"], registry=self.detailed)
            for name, help_ in (
                ("samples_per_second", "a running job's samples/s (its latest progress, else its last epoch)"),
                ("data_wait_fraction", "a running job's share of training time waiting for data, last epoch"),
                ("peak_memory_bytes", "a running job's peak memory over ranks, last epoch"),
                ("gpu_utilization", "a running job's mean GPU utilisation, last epoch (absent on cpu)"),
            )
        }
        self._sharing_gauges()
        self.latency = Histogram(
            "trainjobs_api_request_seconds",
            "API request latency",
            ["method", "route", "status"],
            registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )

    def _sharing_gauges(self) -> None:
        self.devices_in_use = Gauge(
            "trainjobs_devices_in_use", "devices held by jobs, per owner and device type", ["owner", "device"],
            registry=self.detailed,
        )  # fmt: skip
        self.preemptions = Gauge(
            "trainjobs_preemptions", "preemptions of the jobs SQL holds (they only rise while jobs are kept)",
            registry=self.registry,
        )  # fmt: skip
        self.queue_wait = Gauge(
            "trainjobs_queue_wait_seconds", "how long queued jobs have waited since they entered the queue",
            ["device", "statistic"], registry=self.registry,
        )  # fmt: skip

    def refresh(self, state: AppState) -> None:
        with state.read_sessions() as session:
            counts = jobs.count_by_state(session)
            epochs = session.scalar(select(func.count()).select_from(EpochMetricsRow))
            running = jobs.running_figures(session)
        for gauge in self.per_job.values():
            gauge.clear()
        for job_id, metrics, progress in running:
            figures = {**(metrics or {})}
            if progress:
                figures["samples_per_second"] = progress.get("samples_per_second")
            for name, gauge in self.per_job.items():
                if isinstance(figures.get(name), int | float):
                    gauge.labels(job_id).set(figures[name])
        self._sharing(state)
        for job_state in JOB_STATES:
            self.jobs.labels(job_state).set(counts.get(job_state, 0))
        self.epochs.set(epochs or 0)
        try:
            for device in ("cpu", "cuda"):
                self.queue_depth.labels(device).set(state.redis.llen(state.settings.keys.run_queue(device)))
            self.dead_letters.set(state.redis.xlen(state.settings.keys.dead_letters))
        except redis.RedisError:
            pass

    def _sharing(self, state: AppState) -> None:
        """Devices in use per owner, preemptions, and the queue's waits (oldest, mean)."""
        with state.read_sessions() as session:
            held = jobs.devices_in_use(session)
            preemptions = jobs.preemptions_so_far(session)
            entered = jobs.queue_entry_times(session)
        self.devices_in_use.clear()
        for owner, device, count in held:
            self.devices_in_use.labels(owner, device).set(count)
        self.preemptions.set(preemptions)
        now = utcnow()
        for device in ("cpu", "cuda"):
            waits = [(now - at).total_seconds() for kind, at in entered if kind == device]
            self.queue_wait.labels(device, "oldest").set(max(waits, default=0.0))
            self.queue_wait.labels(device, "mean").set(sum(waits) / len(waits) if waits else 0.0)


class LatencyMiddleware:
    """Plain ASGI (no per-request task or body buffering, unlike @app.middleware("http")):
    observes each request's latency by method, route template and status."""

    def __init__(self, app, metrics: ApiMetrics):
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        status = 500

        async def send_and_note_status(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note_status)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.latency.labels(scope["method"], route, str(status)).observe(time.perf_counter() - start)


@router.get("/metrics", response_class=Response, responses={200: {"content": {"text/plain": {}}}})
async def prometheus_metrics(request: Request, state: State) -> Response:
    metrics: ApiMetrics = request.app.state.api_metrics
    await run_in_threadpool(metrics.refresh, state)
    caller = getattr(request.state, "caller", None)
    text = generate_latest(metrics.registry)
    if caller is not None and caller.is_admin:
        text += generate_latest(metrics.detailed)
    return Response(text, media_type=CONTENT_TYPE_LATEST)
