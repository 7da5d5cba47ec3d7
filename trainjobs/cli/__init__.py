# PYTHON_ARGCOMPLETE_OK
"""The `trainjobs` command: run the service's parts, and talk to a running one over HTTP.

Exit codes: 0 ok; 1 the job failed or was cancelled (`--watch`, `watch`), or the command failed;
2 a usage or input error (bad arguments, an unreadable or invalid spec, a 4xx answer, a command
whose extra is not installed); 3 the API was unreachable or answered 5xx; 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from importlib import metadata

import httpx
from pydantic import ValidationError

from trainjobs.cli import (
    client_commands,
    code_commands,
    metrics_table,
    server_commands,
    sharing_commands,
    worker_commands,
)
from trainjobs.cli.registry import (
    EXIT_API_DOWN,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    Commands,
    UsageError,
    add_connection_options,
    api_url,
)
from trainjobs.client import ApiError, Unreachable


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    _enable_completion(parser)
    args = parser.parse_args(argv)
    if not hasattr(args, "handler"):
        parser.print_help()
        sys.exit(EXIT_USAGE)
    sys.exit(_run(args))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainjobs", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"trainjobs {_version()}")
    add_connection_options(parser, default=None)
    commands = Commands(parser)
    server_commands.register(commands)
    worker_commands.register(commands)
    client_commands.register(commands)
    metrics_table.register(commands)
    code_commands.register(commands)
    sharing_commands.register(commands)
    return parser


def _run(args: argparse.Namespace) -> int:
    """The command's exit code; every error it raises becomes one readable line on stderr."""
    try:
        return args.handler(args) or 0
    except ModuleNotFoundError as error:
        if args.extra is None or (error.name or "trainjobs").partition(".")[0] == "trainjobs":
            raise
        needed = f"pip install 'trainjobs[{args.extra}]'"
        _error(f"this command needs the '{args.extra}' extra (no module {error.name!r}): {needed}")
        return EXIT_USAGE
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, item['loc'])) or 'spec'}: {item['msg']}" for item in error.errors())
        _error(f"invalid spec: {problems}")
        return EXIT_USAGE
    except ApiError as error:
        _error(f"{error.detail} (HTTP {error.status})")
        return EXIT_API_DOWN if error.status >= 500 else EXIT_USAGE
    except (httpx.HTTPError, Unreachable) as error:
        _error(f"cannot reach {api_url(args)}: {error}")
        return EXIT_API_DOWN
    except UsageError as error:
        _error(str(error))
        return EXIT_USAGE
    except (OSError, ValueError) as error:
        _error(str(error))
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


def _error(message: str) -> None:
    from trainjobs.cli.output import printable

    print(f"error: {printable(message)}", file=sys.stderr)


def _enable_completion(parser: argparse.ArgumentParser) -> None:
    """Shell completion: `eval "$(register-python-argcomplete trainjobs)"` (docs/cli.md). A no-op
    unless the shell asks for completions."""
    try:
        import argcomplete
    except ModuleNotFoundError:  # pragma: no cover - a base dependency, but completion is optional
        return
    argcomplete.autocomplete(parser)


def _version() -> str:
    try:
        return metadata.version("trainjobs")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"
