"""The FastAPI application: routers, error answers, and the background loop's lifetime."""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager

import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from trainjobs.connections import redis_client
from trainjobs.service.api import prometheus
from trainjobs.service.api.body_limit import BodyLimitMiddleware
from trainjobs.service.api.dashboard_files import install_dashboard
from trainjobs.service.api.deps import AppState
from trainjobs.service.api.prometheus import ApiMetrics, LatencyMiddleware
from trainjobs.service.api.routers import catalog, checkpoints, health, jobs, metrics, workers
from trainjobs.service.background import BackgroundLoop
from trainjobs.service.db import make_engine, make_session_factory
from trainjobs.service.dispatch import Dispatcher
from trainjobs.service.errors import Conflict, InvalidRequest, NotFound
from trainjobs.settings import Settings, load_settings

log = logging.getLogger(__name__)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or load_settings()
    engine = make_engine(settings.sql_url)
    read_engine = make_engine(settings.sql_url, read_only=True) if settings.sql_url.startswith("sqlite") else engine
    sessions = make_session_factory(engine)
    state = AppState(
        settings=settings,
        sessions=sessions,
        read_sessions=make_session_factory(read_engine),
        dispatcher=Dispatcher(settings, sessions),
        redis=redis_client(settings),
    )

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        # The limiter belongs to the running event loop, so it is set here, not at import.
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.api_threads
        loop = BackgroundLoop(settings, sessions, state.dispatcher, state.redis) if settings.run_background else None
        if loop:
            loop.start()
        yield
        if loop:
            loop.stop()
        engine.dispose()
        read_engine.dispose()
        state.redis.close()

    app = FastAPI(
        title="trainjobs",
        version="0.1.0",
        lifespan=lifespan,
        description="Submit PyTorch training jobs over HTTP; workers train them with DDP.",
    )
    app.state.trainjobs = state
    app.state.api_metrics = ApiMetrics()
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_request_bytes)
    app.add_middleware(LatencyMiddleware, metrics=app.state.api_metrics)
    for router in (
        health.router,
        prometheus.router,
        jobs.router,
        metrics.router,
        checkpoints.router,
        catalog.router,
        workers.router,
    ):
        app.include_router(router)
    _install_error_answers(app)
    install_dashboard(app)
    return app


def _install_error_answers(app: FastAPI) -> None:
    @app.exception_handler(NotFound)
    async def _not_found(_request: Request, error: NotFound) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=404)

    @app.exception_handler(Conflict)
    async def _conflict(_request: Request, error: Conflict) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=409)

    @app.exception_handler(InvalidRequest)
    async def _invalid(_request: Request, error: InvalidRequest) -> JSONResponse:
        detail = [{"loc": [error.location, error.field], "msg": error.message, "type": "value_error"}]
        return JSONResponse({"detail": detail}, status_code=422)
