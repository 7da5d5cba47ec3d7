"""Request dependencies: the app's state, one transaction per request, the caller."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session, sessionmaker

from service.auth import Principal, authenticate
from service.db import run_on_commit_callbacks
from service.dispatch import Dispatcher
from trainjobs.settings import Settings


@dataclass
class AppState:
    settings: Settings
    sessions: sessionmaker[Session]        # for requests that write
    read_sessions: sessionmaker[Session]   # for GET requests (on SQLite: never wait for writers)
    dispatcher: Dispatcher


def app_state(request: Request) -> AppState:
    return request.app.state.trainjobs


def db_session(request: Request, state: Annotated[AppState, Depends(app_state)]) -> Iterator[Session]:
    """The request's one transaction: committed here, once, after the handler returned and
    before the response is sent (scope="function" below), then the on-commit callbacks run."""
    sessions = state.read_sessions if request.method in ("GET", "HEAD") else state.sessions
    with sessions() as session:
        with session.begin():
            yield session
        run_on_commit_callbacks(session)


_bearer = HTTPBearer(auto_error=False)


def principal(
    session: Annotated[Session, Depends(db_session, scope="function")],
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise HTTPException(401, "missing bearer token", headers={"WWW-Authenticate": "Bearer"})
    caller = authenticate(session, credentials.credentials)
    if caller is None:
        raise HTTPException(401, "invalid or revoked token", headers={"WWW-Authenticate": "Bearer"})
    return caller


State = Annotated[AppState, Depends(app_state)]
DbSession = Annotated[Session, Depends(db_session, scope="function")]
Caller = Annotated[Principal, Depends(principal)]
