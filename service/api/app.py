"""The FastAPI application: routers, error answers, and the background loop's lifetime."""

from __future__ import annotations

import ctypes
import logging
import math
import signal
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from sqlalchemy import Engine

from trainjobs.connections import async_redis_client, redis_client
from trainjobs.jobs.db import make_engine, make_session_factory
from trainjobs.jobs.errors import Conflict, Forbidden, InvalidRequest, NotFound
from trainjobs.jobs.job_cache import JobCache, JobCacheWriter
from trainjobs.service.api import prometheus
from trainjobs.service.api.authentication import AuthenticationMiddleware
from trainjobs.service.api.body_guard import BodyGuardMiddleware
from trainjobs.service.api.dashboard_files import install_dashboard
from trainjobs.service.api.deps import AppState
from trainjobs.service.api.prometheus import ApiMetrics, LatencyMiddleware
from trainjobs.service.api.routers import catalog, checkpoints, code, health, jobs, metrics, sharing, workers
from trainjobs.service.api.security_headers import SecurityHeadersMiddleware
from trainjobs.service.background import BackgroundLoop
from trainjobs.service.dispatch import Dispatcher
from trainjobs.service.streams import Feeds, StreamLimits, TooManyStreams
from trainjobs.settings import Settings, load_settings
from trainjobs.store import CheckpointStore

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or load_settings()
    state, engines = _app_state(settings)
    # Swagger's page loads its scripts from a CDN, on the origin whose sessionStorage holds the
    # dashboard's token: off unless asked for. /openapi.json is always served.
    app = FastAPI(
        title="trainjobs",
        version="0.1.0",
        lifespan=_lifespan(state, engines),
        description="Submit PyTorch training jobs over HTTP; workers train them with DDP.",
        docs_url="/docs" if settings.api_docs else None,
        redoc_url=None,
    )
    app.state.trainjobs = state
    app.state.api_metrics = ApiMetrics()
    _install_middleware(app, settings, state)
    for router in ROUTERS:
        app.include_router(router)
    _install_error_answers(app)
    install_dashboard(app)
    return app


ROUTERS = (
    health.router,
    prometheus.router,
    jobs.router,
    metrics.router,
    checkpoints.router,
    code.router,
    catalog.router,
    workers.router,
    sharing.router,
)


def _app_state(settings: Settings) -> tuple[AppState, set[Engine]]:
    """The process's pools and clients: SQL engines (on SQLite a read-only one for GETs), one
    Redis client, the dispatcher, the job cache and the checkpoint store."""
    timeout = settings.sql_timeout_seconds
    engine = make_engine(settings.sql_url, timeout_seconds=timeout)
    sqlite = settings.sql_url.startswith("sqlite")
    read_engine = make_engine(settings.sql_url, read_only=True, timeout_seconds=timeout) if sqlite else engine
    client = redis_client(settings)
    sessions = make_session_factory(engine, JobCacheWriter(client, settings.keys))
    state = AppState(
        settings=settings,
        sessions=sessions,
        read_sessions=make_session_factory(read_engine, job_cache=None),  # GETs change no job
        dispatcher=Dispatcher(settings, sessions),
        redis=client,
        job_cache=JobCache(async_redis_client(settings), settings.keys),
        checkpoint_store=CheckpointStore(settings.checkpoint_store),
        streams=StreamLimits(settings.streams_per_process, settings.streams_per_owner),
        feeds=Feeds(),
    )
    return state, {engine, read_engine}


def _lifespan(state: AppState, engines: set[Engine]) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """Start the background loop (collector, sweeps) with the app; close the pools after it."""
    settings = state.settings

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # The limiter belongs to the running event loop, so it is set here, not at import.
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.api_threads
        loop = None
        if settings.run_background:
            loop = BackgroundLoop(settings, state.sessions, state.dispatcher, state.redis, state.checkpoint_store)
            loop.start()
        yield
        if loop:
            loop.stop()
        for engine in engines:
            engine.dispose()
        state.redis.close()
        await state.job_cache.client.aclose()

    return lifespan


def create_app_in_worker_process() -> FastAPI:
    """The app of one of several API processes (`trainjobs api --workers N`). It asks the kernel
    to end it when its supervisor dies, even by SIGKILL: a process left behind would go on
    answering on the shared socket."""
    _end_with_parent()
    return create_app()


def _end_with_parent() -> None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):  # not Linux: the supervisor's own shutdown still ends it
        log.warning("cannot ask to end with the supervisor on this platform")


def _install_middleware(app: FastAPI, settings: Settings, state: AppState) -> None:
    """Outermost last: latency, security headers, CORS (answers preflights without a token),
    authentication (before any body is read), the body guard, then the routes."""
    app.add_middleware(BodyGuardMiddleware, max_bytes=settings.max_request_bytes)
    app.add_middleware(
        AuthenticationMiddleware, sessions=state.read_sessions, cache_seconds=settings.token_cache_seconds
    )
    if settings.cors_origin_list:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origin_list,
            allow_methods=["*"],
            allow_headers=["Authorization", "Content-Type", "Idempotency-Key", "If-None-Match", "Last-Event-ID"],
            expose_headers=["ETag", "Location"],
        )
    if not settings.api_docs:
        app.add_middleware(SecurityHeadersMiddleware)
    app.add_middleware(LatencyMiddleware, metrics=app.state.api_metrics)


def _json_safe(value: Any) -> Any:
    """What a 422 reports of the input, as JSON can carry it: a NaN or infinity the client sent
    is named by its repr rather than failing the answer."""
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(item) for item in value]
    return value


def _install_error_answers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def _invalid_input(_request: Request, error: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": _json_safe(jsonable_encoder(error.errors()))}, status_code=422)

    @app.exception_handler(TooManyStreams)
    async def _too_many_streams(_request: Request, error: TooManyStreams) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=429, headers={"Retry-After": str(error.retry_after)})

    @app.exception_handler(NotFound)
    async def _not_found(_request: Request, error: NotFound) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=404)

    @app.exception_handler(Forbidden)
    async def _forbidden(_request: Request, error: Forbidden) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=403)

    @app.exception_handler(Conflict)
    async def _conflict(_request: Request, error: Conflict) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=409)

    @app.exception_handler(InvalidRequest)
    async def _invalid(_request: Request, error: InvalidRequest) -> JSONResponse:
        detail = [{"loc": [error.location, error.field], "msg": error.message, "type": "value_error"}]
        return JSONResponse({"detail": detail}, status_code=422)
