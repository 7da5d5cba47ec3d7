"""The commands that run the API host (the `server` extra): up, migrate, api, and tokens."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from trainjobs.cli.output import print_table
from trainjobs.cli.registry import Commands, UsageError, add_action

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from trainjobs.settings import Settings

UP_OWNER = "admin"  # `up` owns this owner name: each start revokes the token the last one printed


def register(commands: Commands) -> None:
    up = commands.add("up", run_up, "migrate, then run the API and one local worker in the foreground", extra="all")
    up.add_argument("--host", default="127.0.0.1")
    up.add_argument("--port", type=int, default=8000)
    up.add_argument("--cpu-slots", type=int, default=2, help="cpu ranks the local worker may run at once")

    commands.add("migrate", migrate, "apply the database migrations (alembic upgrade head)", extra="server")

    api = commands.add("api", run_api, "run the HTTP API alone", extra="server")
    api.add_argument("--host", default="127.0.0.1")
    api.add_argument("--port", type=int, default=8000)
    api.add_argument("--workers", type=int, help="API processes [TRAINJOBS_API_WORKERS, by default the host's cores]")

    token = commands.group("token", "manage API tokens (on the server)")
    create = add_action(token, "create", create_token, "create a token; prints it as the last line", extra="server")
    create.add_argument("--owner", required=True)
    create.add_argument("--admin", action="store_true", help="may see every owner's jobs")
    add_action(token, "list", list_tokens, "list tokens (never the tokens themselves)", extra="server")
    revoke = add_action(token, "revoke", revoke_token, "revoke a token by its id (from `token list`)", extra="server")
    revoke.add_argument("token_id")


def server_settings() -> Settings:
    from trainjobs.settings import load_settings

    # What the service writes (databases, run logs, checkpoints) is not for other users of the host.
    os.umask(0o027)
    settings = load_settings()
    settings.home.mkdir(parents=True, exist_ok=True)
    return settings


@contextmanager
def sql_transaction(settings: Settings | None = None) -> Iterator[Session]:
    """One transaction on the configured database, for commands that change no job (tokens)."""
    from trainjobs.jobs.db import make_engine, make_session_factory, transaction

    settings = settings or server_settings()
    engine = make_engine(settings.sql_url, timeout_seconds=settings.sql_timeout_seconds)
    try:
        with transaction(make_session_factory(engine, job_cache=None)) as session:
            yield session
    finally:
        engine.dispose()


def migrate(_args: argparse.Namespace) -> None:
    from trainjobs.service.migrate import upgrade_to_head

    upgrade_to_head(server_settings().sql_url)
    print("database is at the latest schema")


def run_api(args: argparse.Namespace) -> None:
    import uvicorn

    from trainjobs.service.api.serving import serve, serve_in_processes

    settings = server_settings()
    workers = getattr(args, "workers", None) or settings.api_workers
    if workers < 1:
        raise UsageError("--workers must be at least 1")
    if workers == 1:
        from trainjobs.service.api.app import create_app

        serve(uvicorn.Config(create_app(settings), host=args.host, port=args.port, log_level="info"))
        return
    # Each process builds its own app (its own pools and clients) from the same TRAINJOBS_*
    # environment; the supervisor restarts one that dies.
    config = uvicorn.Config(
        "trainjobs.service.api.app:create_app_in_worker_process",
        factory=True,
        host=args.host,
        port=args.port,
        log_level="info",
    )
    serve_in_processes(config, workers)


def create_token(args: argparse.Namespace) -> None:
    from trainjobs.service.auth import create_token

    with sql_transaction() as session:
        token = create_token(session, args.owner, args.admin)
    print(f"token for {args.owner}{' (admin)' if args.admin else ''}:")
    print(token)


def list_tokens(_args: argparse.Namespace) -> None:
    from trainjobs.jobs.repositories import api_tokens

    with sql_transaction() as session:
        rows = [
            (
                row.id,
                row.owner,
                "yes" if row.is_admin else "no",
                row.created_at.isoformat(timespec="seconds"),
                row.revoked_at.isoformat(timespec="seconds") if row.revoked_at else "",
            )
            for row in api_tokens.list_all(session)
        ]
    print_table(("ID", "OWNER", "ADMIN", "CREATED", "REVOKED"), rows)


def revoke_token(args: argparse.Namespace) -> None:
    from trainjobs.jobs.repositories import api_tokens

    with sql_transaction() as session:
        if not api_tokens.revoke(session, args.token_id):
            raise UsageError(f"no active token with id {args.token_id}")
    print(f"revoked {args.token_id}")


def run_up(args: argparse.Namespace) -> None:
    from trainjobs.service.auth import create_token

    migrate(args)
    settings = server_settings()
    with sql_transaction(settings) as session:
        from trainjobs.jobs.repositories import api_tokens

        api_tokens.revoke_all_of(session, UP_OWNER)  # the token an earlier start printed stops working
        token = create_token(session, UP_OWNER, is_admin=True)
    worker = subprocess.Popen([sys.executable, "-m", "trainjobs.cli", "worker", "--cpu-slots", str(args.cpu_slots)])
    print(f"trainjobs API on http://{args.host}:{args.port}", flush=True)
    print(f"token: {token}", flush=True)
    try:
        run_api(args)
    finally:
        worker.terminate()
        worker.wait(timeout=30)
