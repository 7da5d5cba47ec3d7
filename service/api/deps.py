"""What each request needs: the app's state, its one transaction, and the caller.

A route opens `unit_of_work(request)` in its own body rather than receiving a session from a
yield-dependency: FastAPI runs a sync dependency's exit in another worker thread, and a request
cancelled in between (a client that hung up) never runs it, so its connection is never returned
to the pool. A sync route's body runs whole in one thread, so its `with` always ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Annotated

import redis
from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPBearer
from sqlalchemy.orm import Session, sessionmaker

from trainjobs.jobs.db import run_on_commit_callbacks
from trainjobs.jobs.job_cache import JobCache
from trainjobs.service.auth import Principal
from trainjobs.service.dispatch import Dispatcher
from trainjobs.service.streams import Feeds, StreamLimits
from trainjobs.settings import Settings
from trainjobs.store import CheckpointStore


@dataclass
class AppState:
    settings: Settings
    sessions: sessionmaker[Session]  # for requests that write
    read_sessions: sessionmaker[Session]  # for GET requests (on SQLite: never wait for writers)
    dispatcher: Dispatcher
    redis: redis.Redis  # the process's one Redis client
    job_cache: JobCache  # each job's version and document in Redis: polls without SQL
    checkpoint_store: CheckpointStore
    streams: StreamLimits  # how many /events and /logs?follow streams may be open
    feeds: Feeds  # one reader per job for all its streams


@dataclass(frozen=True)
class Work:
    session: Session
    caller: Principal


async def app_state(request: Request) -> AppState:
    # async: FastAPI runs a sync dependency in a worker thread, a hand-off per request.
    return request.app.state.trainjobs


@contextmanager
def unit_of_work(request: Request) -> Iterator[Work]:
    """The request's one transaction, with its authenticated caller: committed once, when the
    block ends without error, then the on-commit callbacks (the dispatch message) run."""
    state: AppState = request.app.state.trainjobs
    sessions = state.read_sessions if request.method in ("GET", "HEAD") else state.sessions
    with sessions() as session:
        with session.begin():
            yield Work(session, _caller(request))
        run_on_commit_callbacks(session)


def require_caller(request: Request) -> Principal:
    """For routes that read nothing from SQL but must still be authenticated."""
    return _caller(request)


def _caller(request: Request) -> Principal:
    """Authenticated by AuthenticationMiddleware before the request reached the route."""
    caller = getattr(request.state, "caller", None)
    if caller is None:  # a route outside /v1/ asked for a caller: refuse rather than guess
        raise HTTPException(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
    return caller


# Documents the bearer scheme in OpenAPI; the check itself is in unit_of_work.
bearer_scheme = [Depends(HTTPBearer(auto_error=False))]

State = Annotated[AppState, Depends(app_state)]
