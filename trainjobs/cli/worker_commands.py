"""The commands of a GPU host (the `worker` extra): the worker, a local run of a spec without the
service, and packing a WAV folder into HDF5."""

from __future__ import annotations

import argparse
from pathlib import Path

from trainjobs.cli.registry import Commands, UsageError
from trainjobs.cli.server_commands import server_settings
from trainjobs.cli.spec_files import read_spec


def register(commands: Commands) -> None:
    worker = commands.add("worker", run_worker, "run one worker pinned to the given devices", extra="worker")
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
        "train", train_here, "run a spec here, without the service, printing each epoch's metrics", extra="worker"
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
    pack.set_defaults(handler=pack_wav_folder, extra="worker")


def run_worker(args: argparse.Namespace) -> None:
    from trainjobs.worker.celery_app import run_worker
    from trainjobs.worker.devices import DevicePool

    if args.gpus:
        pool = DevicePool("cuda", [int(part) for part in args.gpus.split(",") if part.strip()])
    else:
        if args.cpu_slots < 1:
            raise UsageError("--cpu-slots must be at least 1")
        pool = DevicePool("cpu", list(range(args.cpu_slots)))
    run_worker(server_settings(), pool, args.hostname, args.address)


def train_here(args: argparse.Namespace) -> int:
    from trainjobs.contract.spec import JobSpec
    from trainjobs.worker.local_run import local_request, train_locally

    spec = JobSpec.model_validate(read_spec(args.spec))
    request = local_request(spec, args.workdir.resolve(), server_settings().data_root_path, resume_path=args.resume)
    print(
        f"{request.job_id}: {spec.world_size} {spec.device} rank(s); checkpoints in {request.checkpoint_dir}",
        flush=True,
    )
    outcome = train_locally(request)
    print(f"{outcome.state} ({outcome.stop_reason})" + (f": {outcome.error}" if outcome.error else ""))
    return 0 if outcome.state == "succeeded" else 1


def pack_wav_folder(args: argparse.Namespace) -> None:
    from trainjobs.worker.trainer.data.hdf5 import pack_wav_folder

    clips = pack_wav_folder(args.wav_folder, args.output, args.length, args.mu)
    print(f"wrote {clips} clips of {args.length + 1} mu-law codes (mu={args.mu}) to {args.output}")
