"""The commands that talk to a running API over HTTP (the bare install's): submit, list, follow,
cancel, delete, and read a job's metrics and logs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainjobs.cli.code_commands import add_max_bytes, pushed
from trainjobs.cli.output import print_json, print_table, printable
from trainjobs.cli.progress import Progress
from trainjobs.cli.registry import EXIT_FAILED, Commands, add_json, client_for
from trainjobs.cli.spec_files import read_spec
from trainjobs.client import TrainJobsClient


def register(commands: Commands) -> None:
    submit = commands.add("submit", submit_spec, "submit a job spec (JSON or YAML); prints the job id", client=True)
    submit.add_argument("spec", type=Path)
    submit.add_argument(
        "--watch", action="store_true", help="follow the job until it ends; exit 0 only if it succeeded"
    )
    submit.add_argument("--idempotency-key")
    submit.add_argument("--code", type=Path, metavar="DIR", help="pack DIR, upload it unless the API has it, run it")
    add_max_bytes(submit)
    add_json(submit)

    jobs = commands.add("jobs", list_jobs, "list jobs, newest first (the first 50 unless --all)", client=True)
    jobs.add_argument("--state", help="one state or several, comma-separated: queued,running")
    jobs.add_argument(
        "--label", action="append", metavar="K=V", help="jobs labelled K=V (or K alone: any value); repeat for AND"
    )
    jobs.add_argument("--name", help="a case-insensitive substring of the job's name")
    jobs.add_argument("--owner", help="one owner's jobs (admins only)")
    jobs.add_argument("--all", action="store_true", help="follow the pages to the end")
    jobs.add_argument("--limit", type=int, default=50, help="jobs per page (1-500) [50]")
    add_json(jobs)

    for name, handler, help_, with_json in (
        ("status", show_status, "print a job as JSON", True),
        ("watch", watch, "follow a job with a progress bar until it ends; exit 0 only if it succeeded", False),
        ("cancel", cancel, "cancel a job (a running one has its ranks ended)", False),
        ("delete", delete, "delete an ended job with its metrics, logs and checkpoint files", False),
    ):
        command = commands.add(name, handler, help_, client=True)
        command.add_argument("job_id")
        if with_json:
            add_json(command)
    logs = commands.add("logs", show_logs, "print every rank's output, lines prefixed [rank N]", client=True)
    logs.add_argument("job_id")
    logs.add_argument("--tail", type=int, help="the last N lines of each rank")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines until the job ends")


def submit_spec(args: argparse.Namespace) -> int:
    spec = read_spec(args.spec)
    with client_for(args) as client:
        if args.code is not None:
            spec["code"] = pushed(client, args.code, args.max_bytes)
        job = client.submit(spec, args.idempotency_key)
        if args.json:
            if args.watch:
                job = client.wait(job.id)
            print_json(job.model_dump(mode="json"))
            return 0 if job.state == "succeeded" or not args.watch else EXIT_FAILED
        print(job.id, flush=True)
        return follow(client, job.id) if args.watch else 0


def list_jobs(args: argparse.Namespace) -> None:
    filters = {"state": args.state, "label": args.label, "name": args.name, "owner": args.owner}
    with client_for(args) as client:
        if args.all:
            jobs, next_cursor = list(client.iter_jobs(**filters, page_size=args.limit)), None
        else:
            page = client.jobs(**filters, limit=args.limit)
            jobs, next_cursor = page.items, page.next_cursor
    if args.json:
        print_json({"items": [job.model_dump(mode="json") for job in jobs], "next_cursor": next_cursor})
        return
    print_table(
        ("ID", "STATE", "EPOCH", "MODEL", "NAME", "LABELS"),
        (
            (
                job.id,
                job.state,
                f"{job.epoch}/{job.spec['epochs']}",
                job.spec["model"]["name"],
                job.name or "",
                ",".join(f"{key}={value}" for key, value in job.spec.get("labels", {}).items()),
            )
            for job in jobs
        ),
        right=("EPOCH",),
    )
    if next_cursor:
        print("(more jobs: --all lists every one)", file=sys.stderr)


def show_status(args: argparse.Namespace) -> None:
    with client_for(args) as client:
        print_json(client.job(args.job_id).model_dump(mode="json"))


def watch(args: argparse.Namespace) -> int:
    with client_for(args) as client:
        return follow(client, args.job_id)


def cancel(args: argparse.Namespace) -> None:
    with client_for(args) as client:
        job = client.cancel(args.job_id)
    print(f"{job.id} {job.state}")


def delete(args: argparse.Namespace) -> None:
    with client_for(args) as client:
        client.delete(args.job_id)
    print(f"deleted {args.job_id}")


def show_logs(args: argparse.Namespace) -> None:
    with client_for(args) as client:
        if not args.follow:
            sys.stdout.write(printable_lines(client.logs(args.job_id, args.tail)))
            return
        for line in client.follow_logs(args.job_id, args.tail):
            print(printable(line), flush=True)


def printable_lines(text: str) -> str:
    """A rank's output as a terminal may show it: each line escaped (an escape sequence a rank
    printed is shown, not obeyed), the line breaks kept."""
    return "".join(printable(line) + "\n" for line in text.splitlines())


def follow(client: TrainJobsClient, job_id: str) -> int:
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
        sys.stderr.write("error: " + printable_lines(job["error"]))
    return 0 if job["state"] == "succeeded" else EXIT_FAILED
