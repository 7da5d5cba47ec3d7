# PYTHON_ARGCOMPLETE_OK
"""The `trainjobs` command: run the service's parts, and talk to a running one over HTTP.

Exit codes: 0 ok; 1 the job failed or was cancelled (`--watch`, `watch`), or the command failed;
2 a usage or input error (bad arguments, an unreadable or invalid spec, a 4xx answer); 3 the API
was unreachable or answered 5xx; 130 interrupted.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import unicodedata
from importlib import metadata
from pathlib import Path
from typing import Any

import httpx
from pydantic import ValidationError

from trainjobs.client import ApiError, TrainJobsClient, Unreachable

EXIT_FAILED = 1  # the job failed or was cancelled; or the command could not do its work
EXIT_USAGE = 2  # bad arguments or input (argparse exits 2 too), or the API refused the request (4xx)
EXIT_API_DOWN = 3  # the API did not answer, or answered 5xx
EXIT_INTERRUPTED = 130
DEFAULT_URL = "http://127.0.0.1:8000"


def main(argv: list[str] | None = None) -> None:
    parser = _parser()
    _enable_completion(parser)
    args = parser.parse_args(argv)
    if not hasattr(args, "handler"):
        parser.print_help()
        sys.exit(2)
    try:
        sys.exit(args.handler(args) or 0)
    except ModuleNotFoundError as error:
        if args.extra is None or (error.name or "trainjobs").partition(".")[0] == "trainjobs":
            raise
        print(
            f"error: this command needs the '{args.extra}' extra (no module {error.name!r}): "
            f"pip install 'trainjobs[{args.extra}]'",
            file=sys.stderr,
        )
        sys.exit(2)
    except ValidationError as error:
        problems = "; ".join(f"{'.'.join(map(str, item['loc'])) or 'spec'}: {item['msg']}" for item in error.errors())
        print(f"error: invalid spec: {problems}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    except ApiError as error:
        print(f"error: {error.detail} (HTTP {error.status})", file=sys.stderr)
        sys.exit(EXIT_API_DOWN if error.status >= 500 else EXIT_USAGE)
    except (httpx.HTTPError, Unreachable) as error:
        print(f"error: cannot reach {_url(args)}: {error}", file=sys.stderr)
        sys.exit(EXIT_API_DOWN)
    except UsageError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    except (OSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(EXIT_INTERRUPTED)
    sys.exit(EXIT_FAILED)


class UsageError(ValueError):
    """The command line or its input is wrong (exit code 2)."""


def _enable_completion(parser: argparse.ArgumentParser) -> None:
    """Shell completion: `eval "$(register-python-argcomplete trainjobs)"` (README). A no-op unless
    the shell asks for completions."""
    try:
        import argcomplete
    except ModuleNotFoundError:  # pragma: no cover - a base dependency, but completion is optional
        return
    argcomplete.autocomplete(parser)


class _Commands:
    """The sub-commands, added one kind at a time. `extra`: what `pip install trainjobs[EXTRA]` a
    command needs beyond the bare client install."""

    def __init__(self, parser: argparse.ArgumentParser):
        self.commands = parser.add_subparsers(title="commands", metavar="COMMAND")

    def add(self, name: str, handler, help_: str, client: bool = False, extra: str | None = None):
        sub = self.commands.add_parser(name, help=help_, description=help_)
        sub.set_defaults(handler=handler, extra=extra)
        if client:
            # Also accepted before the command (`trainjobs --url U jobs`); given here, they win.
            _add_connection_options(sub, default=argparse.SUPPRESS)
            sub.add_argument(
                "--give-up-after",
                type=float,
                default=300.0,
                metavar="SECONDS",
                help="while following a job, stop (exit code 3) after the API has not answered this long [300]",
            )
        return sub

    def group(self, name: str, help_: str):
        return self.commands.add_parser(name, help=help_).add_subparsers(metavar="ACTION")


def _add_connection_options(parser: argparse.ArgumentParser, default: Any) -> None:
    parser.add_argument("--url", default=default, help=f"API address [$TRAINJOBS_URL or {DEFAULT_URL}]")
    parser.add_argument("--token", default=default, help="bearer token [$TRAINJOBS_TOKEN]")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trainjobs", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--version", action="version", version=f"trainjobs {_version()}")
    _add_connection_options(parser, default=None)
    commands = _Commands(parser)
    _service_commands(commands)
    _worker_commands(commands)
    _client_commands(commands)
    return parser


def _service_commands(commands: _Commands) -> None:
    up = commands.add("up", _up, "migrate, then run the API and one local worker in the foreground", extra="all")
    up.add_argument("--host", default="127.0.0.1")
    up.add_argument("--port", type=int, default=8000)
    up.add_argument("--cpu-slots", type=int, default=2, help="cpu ranks the local worker may run at once")

    commands.add("migrate", _migrate, "apply the database migrations (alembic upgrade head)", extra="server")

    api = commands.add("api", _api, "run the HTTP API alone", extra="server")
    api.add_argument("--host", default="127.0.0.1")
    api.add_argument("--port", type=int, default=8000)
    api.add_argument("--workers", type=int, help="API processes [TRAINJOBS_API_WORKERS, by default the host's cores]")

    token = commands.group("token", "manage API tokens (on the server)")
    create = token.add_parser("create", help="create a token; prints it as the last line")
    create.add_argument("--owner", required=True)
    create.add_argument("--admin", action="store_true", help="may see every owner's jobs")
    create.set_defaults(handler=_token_create, extra="server")
    listing = token.add_parser("list", help="list tokens (never the tokens themselves)")
    listing.set_defaults(handler=_token_list, extra="server")
    revoke = token.add_parser("revoke", help="revoke a token by its id (from `token list`)")
    revoke.add_argument("token_id")
    revoke.set_defaults(handler=_token_revoke, extra="server")


def _worker_commands(commands: _Commands) -> None:
    worker = commands.add("worker", _worker, "run one worker pinned to the given devices", extra="worker")
    devices = worker.add_mutually_exclusive_group(required=True)
    devices.add_argument("--gpus", help="comma-separated cuda device ids this worker owns, e.g. 0,1")
    devices.add_argument("--cpu-slots", type=int, help="number of cpu ranks this worker may run at once")
    worker.add_argument("--hostname", help="name shown for this worker [the host name]")
    worker.add_argument(
        "--address",
        help="the address other hosts reach this worker's ranks at (multi-node jobs) "
        "[this host's address on its route to Redis]",
    )

    train = commands.add(
        "train", _train, "run a spec here, without the service, printing each epoch's metrics", extra="worker"
    )
    train.add_argument("spec", type=Path)
    train.add_argument(
        "--workdir",
        type=Path,
        default=Path(".trainjobs/local"),
        help="checkpoints and rank files go here [.trainjobs/local]",
    )
    train.add_argument("--resume", help="a checkpoint file under WORKDIR/checkpoints to continue from")

    pack = commands.group("data", "prepare data sets").add_parser(
        "pack", help="turn a folder of WAV files into mu-law HDF5 once, so epochs decode nothing"
    )
    pack.add_argument("wav_folder", type=Path)
    pack.add_argument("output", type=Path, help="the .h5 file to write (put it under TRAINJOBS_DATA_ROOT)")
    pack.add_argument("--length", type=int, default=1024, help="samples per clip [1024]")
    pack.add_argument("--mu", type=int, default=256, help="mu-law levels [256]")
    pack.set_defaults(handler=_data_pack, extra="worker")


def _version() -> str:
    try:
        return metadata.version("trainjobs")
    except metadata.PackageNotFoundError:
        return "unknown (not installed)"


def _add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the API's JSON instead of a table, for scripts")


def _client_commands(commands: _Commands) -> None:
    submit = commands.add("submit", _submit, "submit a job spec (JSON or YAML); prints the job id", client=True)
    submit.add_argument("spec", type=Path)
    submit.add_argument(
        "--watch", action="store_true", help="follow the job until it ends; exit 0 only if it succeeded"
    )
    submit.add_argument("--idempotency-key")
    _add_json(submit)

    jobs = commands.add("jobs", _jobs, "list jobs, newest first (the first 50 unless --all)", client=True)
    jobs.add_argument("--state", help="one state or several, comma-separated: queued,running")
    jobs.add_argument(
        "--label", action="append", metavar="K=V", help="jobs labelled K=V (or K alone: any value); repeat for AND"
    )
    jobs.add_argument("--name", help="a case-insensitive substring of the job's name")
    jobs.add_argument("--owner", help="one owner's jobs (admins only)")
    jobs.add_argument("--all", action="store_true", help="follow the pages to the end")
    jobs.add_argument("--limit", type=int, default=50, help="jobs per page (1-500) [50]")
    _add_json(jobs)

    for name, handler, help_, with_json in (
        ("status", _status, "print a job as JSON", True),
        ("watch", _watch, "follow a job with a progress bar until it ends; exit 0 only if it succeeded", False),
        ("cancel", _cancel, "cancel a job (a running one has its ranks ended)", False),
        ("metrics", _metrics, "print a job's per-epoch metrics", True),
        ("delete", _delete, "delete an ended job with its metrics, logs and checkpoint files", False),
    ):
        command = commands.add(name, handler, help_, client=True)
        command.add_argument("job_id")
        if with_json:
            _add_json(command)
    logs = commands.add("logs", _logs, "print every rank's output, lines prefixed [rank N]", client=True)
    logs.add_argument("job_id")
    logs.add_argument("--tail", type=int, help="the last N lines of each rank")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until the job ends")


# ---- server-side commands ---------------------------------------------------------------------


UP_OWNER = "admin"


def _settings():
    from trainjobs.settings import load_settings

    # What the service writes (databases, run logs, checkpoints) is not for other users of the host.
    os.umask(0o027)
    settings = load_settings()
    settings.home.mkdir(parents=True, exist_ok=True)
    return settings


def _migrate(_args) -> None:
    from trainjobs.service.migrate import upgrade_to_head

    upgrade_to_head(_settings().sql_url)
    print("database is at the latest schema")


def _api(args) -> None:
    import uvicorn

    from trainjobs.service.api.serving import serve, serve_in_processes

    settings = _settings()
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


def _worker(args) -> None:
    from trainjobs.worker.celery_app import run_worker
    from trainjobs.worker.devices import DevicePool

    if args.gpus:
        pool = DevicePool("cuda", [int(part) for part in args.gpus.split(",") if part.strip()])
    else:
        if args.cpu_slots < 1:
            raise ValueError("--cpu-slots must be at least 1")
        pool = DevicePool("cpu", list(range(args.cpu_slots)))
    run_worker(_settings(), pool, args.hostname, args.address)


def _train(args) -> int:
    from trainjobs.contract.spec import JobSpec
    from trainjobs.worker.local_run import local_request, train_locally

    spec = JobSpec.model_validate(_read_spec(args.spec))
    request = local_request(spec, args.workdir.resolve(), _settings().data_root_path, resume_path=args.resume)
    print(
        f"{request.job_id}: {spec.world_size} {spec.device} rank(s); checkpoints in {request.checkpoint_dir}",
        flush=True,
    )
    outcome = train_locally(request)
    print(f"{outcome.state} ({outcome.stop_reason})" + (f": {outcome.error}" if outcome.error else ""))
    return 0 if outcome.state == "succeeded" else 1


def _data_pack(args) -> None:
    from trainjobs.worker.trainer.data.hdf5 import pack_wav_folder

    clips = pack_wav_folder(args.wav_folder, args.output, args.length, args.mu)
    print(f"wrote {clips} clips of {args.length + 1} mu-law codes (mu={args.mu}) to {args.output}")


def _token_create(args) -> None:
    from trainjobs.jobs.db import make_engine, make_session_factory, transaction
    from trainjobs.service.auth import create_token

    with transaction(make_session_factory(make_engine(_settings().sql_url), job_cache=None)) as session:
        token = create_token(session, args.owner, args.admin)
    print(f"token for {args.owner}{' (admin)' if args.admin else ''}:")
    print(token)


def _token_list(_args) -> None:
    from trainjobs.jobs.db import make_engine, make_session_factory, transaction
    from trainjobs.jobs.repositories import api_tokens

    with transaction(make_session_factory(make_engine(_settings().sql_url), job_cache=None)) as session:
        rows = api_tokens.list_all(session)
        print(f"{'ID':<18} {'OWNER':<20} {'ADMIN':<6} {'CREATED':<26} REVOKED")
        for row in rows:
            revoked = row.revoked_at.isoformat(timespec="seconds") if row.revoked_at else ""
            print(
                f"{row.id:<18} {row.owner:<20} {'yes' if row.is_admin else 'no':<6} "
                f"{row.created_at.isoformat(timespec='seconds'):<26} {revoked}"
            )


def _token_revoke(args) -> None:
    from trainjobs.jobs.db import make_engine, make_session_factory, transaction
    from trainjobs.jobs.repositories import api_tokens

    with transaction(make_session_factory(make_engine(_settings().sql_url), job_cache=None)) as session:
        if not api_tokens.revoke(session, args.token_id):
            raise ValueError(f"no active token with id {args.token_id}")
    print(f"revoked {args.token_id}")


def _up(args) -> None:
    from trainjobs.jobs.db import make_engine, make_session_factory, transaction
    from trainjobs.jobs.repositories import api_tokens
    from trainjobs.service.auth import create_token

    _migrate(args)
    settings = _settings()
    with transaction(make_session_factory(make_engine(settings.sql_url), job_cache=None)) as session:
        # `up` owns the owner name "admin": the token an earlier start printed stops working.
        api_tokens.revoke_all_of(session, UP_OWNER)
        token = create_token(session, UP_OWNER, is_admin=True)
    worker = subprocess.Popen([sys.executable, "-m", "trainjobs.cli", "worker", "--cpu-slots", str(args.cpu_slots)])
    print(f"trainjobs API on http://{args.host}:{args.port}", flush=True)
    print(f"token: {token}", flush=True)
    try:
        _api(args)
    finally:
        worker.terminate()
        worker.wait(timeout=30)


# ---- client commands --------------------------------------------------------------------------


def _url(args) -> str:
    return getattr(args, "url", None) or os.environ.get("TRAINJOBS_URL") or DEFAULT_URL


def _client(args) -> TrainJobsClient:
    token = getattr(args, "token", None) or os.environ.get("TRAINJOBS_TOKEN")
    if not token:
        raise UsageError("no token: pass --token or set TRAINJOBS_TOKEN")
    return TrainJobsClient(_url(args), token, give_up_after=args.give_up_after)


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


def _read_spec(path: Path) -> dict:
    try:
        text = path.read_text()
        if path.suffix in (".yaml", ".yml"):
            return yaml_spec(text)
        return json.loads(text)
    except (OSError, ValueError) as error:  # json's errors are ValueErrors; yaml_spec turns yaml's into one
        raise UsageError(f"cannot read the spec {path}: {error}") from None


def yaml_spec(text: str) -> dict:
    """YAML as 1.2 reads numbers: `lr: 3e-4` is a float (PyYAML follows YAML 1.1, where a float
    needs a dot, and would hand the API the string "3e-4")."""
    import re

    import yaml

    class Yaml12Loader(yaml.SafeLoader):
        pass

    float_12 = re.compile(r"^[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$|^[-+]?\.(?:inf|Inf|INF)$|^\.(?:nan|NaN|NAN)$")
    Yaml12Loader.yaml_implicit_resolvers = {
        key: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:float"]
        for key, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    Yaml12Loader.add_implicit_resolver("tag:yaml.org,2002:float", float_12, list("-+0123456789."))
    # Integers keep their own resolver, which SafeLoader checks first for plain digits.
    for first in "-+0123456789":
        resolvers = Yaml12Loader.yaml_implicit_resolvers.setdefault(first, [])
        resolvers.sort(key=lambda item: item[0] != "tag:yaml.org,2002:int")
    try:
        loaded = yaml.load(text, Loader=Yaml12Loader)
    except yaml.YAMLError as error:  # one line: where, and what
        mark = getattr(error, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ValueError(f"not YAML{where}: {getattr(error, 'problem', None) or error}") from None
    if not isinstance(loaded, dict):
        raise ValueError("a spec file holds one mapping of fields")
    return loaded


def _submit(args) -> int:
    spec = _read_spec(args.spec)
    with _client(args) as client:
        job = client.submit(spec, args.idempotency_key)
        if args.json:
            if args.watch:
                job = client.wait(job.id)
            _print_json(job.model_dump(mode="json"))
            return 0 if job.state == "succeeded" or not args.watch else EXIT_FAILED
        print(job.id, flush=True)
        return _follow(client, job.id) if args.watch else 0


def _jobs(args) -> None:
    filters = {"state": args.state, "label": args.label, "name": args.name, "owner": args.owner}
    with _client(args) as client:
        if args.all:
            jobs, next_cursor = list(client.iter_jobs(**filters, page_size=args.limit)), None
        else:
            page = client.jobs(**filters, limit=args.limit)
            jobs, next_cursor = page.items, page.next_cursor
    if args.json:
        _print_json({"items": [job.model_dump(mode="json") for job in jobs], "next_cursor": next_cursor})
        return
    print(f"{'ID':<18} {'STATE':<10} {'EPOCH':>9} {'MODEL':<10} {'NAME':<24} LABELS")
    for job in jobs:
        epochs = f"{job.epoch}/{job.spec['epochs']}"
        name = printable(job.name or "")
        labels = printable(",".join(f"{key}={value}" for key, value in job.spec.get("labels", {}).items()))
        print(f"{job.id:<18} {job.state:<10} {epochs:>9} {job.spec['model']['name']:<10} {name:<24} {labels}")
    if next_cursor:
        print("(more jobs: --all lists every one)", file=sys.stderr)


def printable(text: str) -> str:
    """Text from the API as a terminal may show it: control and bidirectional characters (which
    the API refuses in new names, but an older job may hold) escaped, never sent raw."""
    return "".join(
        char.encode("unicode_escape").decode() if unicodedata.category(char) in ("Cc", "Cf") else char for char in text
    )


def _status(args) -> None:
    with _client(args) as client:
        _print_json(client.job(args.job_id).model_dump(mode="json"))


def _watch(args) -> int:
    with _client(args) as client:
        return _follow(client, args.job_id)


def _cancel(args) -> None:
    with _client(args) as client:
        job = client.cancel(args.job_id)
    print(f"{job.id} {job.state}")


def _delete(args) -> None:
    with _client(args) as client:
        client.delete(args.job_id)
    print(f"deleted {args.job_id}")


def _logs(args) -> None:
    with _client(args) as client:
        _print_logs(client, args)


def _print_logs(client: TrainJobsClient, args) -> None:
    if not args.follow:
        sys.stdout.write(client.logs(args.job_id, args.tail))
        return
    for line in client.follow_logs(args.job_id, args.tail):
        print(line, flush=True)


def _metrics(args) -> None:
    with _client(args) as client:
        rows = [row.model_dump(mode="json") for row in client.metrics(args.job_id)]
    if args.json:
        _print_json({"items": rows})
        return
    print(
        f"{'EPOCH':>5} {'TRAIN_LOSS':>11} {'VAL_LOSS':>10} {'VAL_ACC':>8} {'LR':>10} {'SECONDS':>8} {'SAMPLES/S':>10}"
    )
    for row in rows:
        accuracy = f"{row['val_accuracy']:.4f}" if row.get("val_accuracy") is not None else "-"
        print(
            f"{row['epoch']:>5} {row['train_loss']:>11.4f} {row['val_loss']:>10.4f} {accuracy:>8} "
            f"{row['lr']:>10.3g} {row['epoch_seconds']:>8.2f} {row['samples_per_second']:>10.1f}"
        )


def _follow(client: TrainJobsClient, job_id: str) -> int:
    """Follow the job's event stream with a progress line; exit status 0 only for success."""
    progress = Progress(sys.stdout.isatty())
    job = client.job(job_id).model_dump(mode="json")
    progress.show(job)
    for event in client.events(job_id):
        if event.kind == "state":
            job = event.data
        elif event.kind == "metrics":
            job = {**job, "epoch": max(job["epoch"], event.data["epoch"]), "metrics": event.data}
        elif event.kind == "progress":
            job = {**job, "progress": event.data}
        progress.show(job)
    progress.close()
    if job["error"]:
        print(f"error: {job['error']}", file=sys.stderr)
    return 0 if job["state"] == "succeeded" else 1


class Progress:
    """One line per change; on a terminal, redrawn in place: a bar, epoch x of N, the last train
    and val loss, samples/s and an ETA from the epochs' pace."""

    def __init__(self, interactive: bool, width: int = 24):
        self.interactive = interactive
        self.width = width
        self.last: str | None = None

    def show(self, job: dict) -> None:
        line = self.line(job)
        if line == self.last:
            return
        if self.interactive:
            # Clipped to the terminal: a line that wraps cannot be redrawn in place.
            columns = shutil.get_terminal_size().columns
            sys.stdout.write("\r\033[K" + (line if len(line) < columns else line[: max(columns - 2, 1)] + "…"))
        else:
            sys.stdout.write(line + "\n")
        sys.stdout.flush()
        self.last = line

    def close(self) -> None:
        if self.interactive and self.last is not None:
            sys.stdout.write("\n")

    def line(self, job: dict) -> str:
        total, done = job["spec"]["epochs"], job["epoch"]
        filled = int(self.width * done / total) if total else self.width
        text = f"{job['id']} [{'#' * filled}{'.' * (self.width - filled)}] epoch {done}/{total} {job['state']}"
        metrics = job.get("metrics")
        if metrics:
            text += (
                f" | train {metrics['train_loss']:.4f} val {metrics['val_loss']:.4f}"
                f" | {metrics['samples_per_second']:.0f} samples/s"
            )
            if job["state"] == "running" and done < total:
                text += f" | ETA {_duration(metrics['epoch_seconds'] * (total - done))}"
        progress = job.get("progress")
        if progress and job["state"] == "running" and progress["step"] < progress["steps"]:
            text += f" | epoch {progress['epoch']} step {progress['step']}/{progress['steps']}"
            if progress.get("eta_seconds") is not None:
                text += f" ETA {_duration(progress['eta_seconds'])}"
        if job.get("waiting_reason") and job["state"] == "queued":
            text += f" | waiting: {job['waiting_reason']}"
        if job["stop_reason"]:
            text += f" ({job['stop_reason']})"
        return text


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{seconds:02d}s"


if __name__ == "__main__":
    main()
