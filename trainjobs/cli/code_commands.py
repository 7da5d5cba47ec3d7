"""Jobs with their own code, from the command line: `code push DIR` (and `submit SPEC --code
DIR`, which calls the same packing and upload)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainjobs.cli.registry import Commands, UsageError, add_action, client_for
from trainjobs.client import TrainJobsClient
from trainjobs.client.packing import PackingRefused, pack, too_large
from trainjobs.contract.code import MAX_BYTES


def register(commands: Commands) -> None:
    code = commands.group("code", "your own code: pack a project folder and upload it")
    push = add_action(
        code, "push", push_folder, "pack DIR and upload it unless the API has it; prints its id", client=True
    )
    push.add_argument("folder", type=Path, metavar="DIR")
    add_max_bytes(push)


def add_max_bytes(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-bytes",
        type=int,
        default=MAX_BYTES,
        help=f"refuse to upload an archive over this size (the API's TRAINJOBS_CODE_MAX_BYTES) [{MAX_BYTES}]",
    )


def push_folder(args: argparse.Namespace) -> None:
    with client_for(args) as client:
        print(pushed(client, args.folder, args.max_bytes))


def pushed(client: TrainJobsClient, folder: Path, max_bytes: int) -> str:
    """Pack `folder`, say what it holds (on stderr: stdout is for the id, or the job's JSON),
    upload it unless the API has it already; its id."""
    try:
        packed = pack(folder)
    except PackingRefused as cannot:
        raise UsageError(f"cannot pack {folder}: {cannot}") from None
    try:
        print(f"packed {folder}: {packed.files} files, {packed.size_bytes:,} bytes ({packed.code})", file=sys.stderr)
        refused = too_large(packed, max_bytes)
        if refused:
            raise UsageError(f"nothing uploaded: {refused}")
        archive, uploaded = client.push_code(packed)
    finally:
        packed.path.unlink(missing_ok=True)
    print("uploaded" if uploaded else "the API has it already: nothing uploaded", file=sys.stderr)
    return archive.id
