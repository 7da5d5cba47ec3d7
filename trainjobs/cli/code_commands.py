"""Jobs with their own code, from the command line: `code push DIR` (and `submit SPEC --code
DIR`, which calls the same packing and upload)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from trainjobs.cli.registry import Commands, UsageError, add_action, client_for
from trainjobs.client import TrainJobsClient
from trainjobs.client.errors import InvalidRequest, NotFound
from trainjobs.client.packing import Packed, PackingRefused, biggest_files, pack, too_large
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
        default=None,
        help="refuse to upload an archive over this size [the API's limit, TRAINJOBS_CODE_MAX_BYTES, as it answers]",
    )


def push_folder(args: argparse.Namespace) -> None:
    with client_for(args) as client:
        print(pushed(client, args.folder, args.max_bytes))


def pushed(client: TrainJobsClient, folder: Path, max_bytes: int | None) -> str:
    """Pack `folder`, say what it holds (on stderr: stdout is for the id, or the job's JSON),
    upload it unless the API has it already; its id. Over the API's limit (or `max_bytes`, if
    lower) nothing is uploaded and the biggest files are named."""
    try:
        packed = pack(folder)
    except PackingRefused as cannot:
        raise UsageError(f"cannot pack {folder}: {cannot}") from None
    try:
        print(f"packed {folder}: {packed.files} files, {packed.size_bytes:,} bytes ({packed.code})", file=sys.stderr)
        limit = api_limit(client) if max_bytes is None else min(api_limit(client), max_bytes)
        refused = too_large(packed, limit)
        if refused:
            raise UsageError(f"nothing uploaded: {refused}")
        archive, uploaded = _upload(client, packed)
    finally:
        packed.path.unlink(missing_ok=True)
    print("uploaded" if uploaded else "the API has it already: nothing uploaded", file=sys.stderr)
    return archive.id


def api_limit(client: TrainJobsClient) -> int:
    """The API's bound on an archive; an API from before `GET /v1/code/limits`: the default one."""
    try:
        return client.code_limits().max_bytes
    except NotFound:
        return MAX_BYTES


def _upload(client: TrainJobsClient, packed: Packed):
    try:
        return client.push_code(packed)
    except InvalidRequest as error:
        if error.status != 413:
            raise
        # The API's limit changed between our look and the upload: still name what to leave out.
        raise UsageError(
            f"nothing kept: the API refused the archive ({packed.size_bytes:,} bytes): {error.detail}; "
            f"the biggest files: {biggest_files(packed)}"
        ) from None
