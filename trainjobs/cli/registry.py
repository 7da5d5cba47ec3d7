"""How the command families register their commands, and what every command shares: exit codes,
the usage error, the connection options and the client they build."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import Any

from trainjobs.client import TrainJobsClient

EXIT_FAILED = 1  # the job failed or was cancelled; or the command could not do its work
EXIT_USAGE = 2  # bad arguments or input (argparse exits 2 too), or the API refused the request (4xx)
EXIT_API_DOWN = 3  # the API did not answer, or answered 5xx
EXIT_INTERRUPTED = 130
DEFAULT_URL = "http://127.0.0.1:8000"

Handler = Callable[[argparse.Namespace], int | None]


class UsageError(ValueError):
    """The command line or its input is wrong (exit code 2)."""


class Commands:
    """The sub-commands. `extra`: what `pip install trainjobs[EXTRA]` a command needs beyond the
    bare client install (named in one line when it is missing)."""

    def __init__(self, parser: argparse.ArgumentParser):
        self.commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    def add(self, name: str, handler: Handler, help_: str, client: bool = False, extra: str | None = None):
        sub = self.commands.add_parser(name, help=help_, description=help_)
        sub.set_defaults(handler=handler, extra=extra)
        if client:
            # Also accepted before the command (`trainjobs --url U jobs`); given here, they win.
            add_connection_options(sub, default=argparse.SUPPRESS)
            sub.add_argument(
                "--give-up-after",
                type=float,
                default=300.0,
                metavar="SECONDS",
                help="while following a job, stop (exit code 3) after the API has not answered this long [300]",
            )
        return sub

    def group(self, name: str, help_: str) -> Any:
        """A command with actions of its own (`trainjobs token create`): add each with `add_action`."""
        return self.commands.add_parser(name, help=help_, description=help_).add_subparsers(metavar="ACTION")


def add_action(
    group: Any, name: str, handler: Handler, help_: str, client: bool = False, extra: str | None = None
) -> argparse.ArgumentParser:
    """An action of a command group; `client` ones take the connection options, as commands do."""
    sub = group.add_parser(name, help=help_, description=help_)
    sub.set_defaults(handler=handler, extra=extra)
    if client:
        add_connection_options(sub, default=argparse.SUPPRESS)
        sub.set_defaults(give_up_after=300.0)
    return sub


def add_connection_options(parser: argparse.ArgumentParser, default: Any) -> None:
    parser.add_argument("--url", default=default, help=f"API address [$TRAINJOBS_URL or {DEFAULT_URL}]")
    parser.add_argument("--token", default=default, help="bearer token [$TRAINJOBS_TOKEN]")


def add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the API's JSON instead of a table, for scripts")


def api_url(args: argparse.Namespace) -> str:
    return getattr(args, "url", None) or os.environ.get("TRAINJOBS_URL") or DEFAULT_URL


def client_for(args: argparse.Namespace) -> TrainJobsClient:
    token = getattr(args, "token", None) or os.environ.get("TRAINJOBS_TOKEN")
    if not token:
        raise UsageError("no token: pass --token or set TRAINJOBS_TOKEN")
    return TrainJobsClient(api_url(args), token, give_up_after=args.give_up_after)
