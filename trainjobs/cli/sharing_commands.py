"""Sharing the fleet, from the command line: `queue` (the start order, each job's reason and each
owner's share), `owners` and (admins) `owner set`."""

from __future__ import annotations

import argparse

from trainjobs.cli.output import print_json, print_table
from trainjobs.cli.registry import Commands, UsageError, add_action, add_json, client_for
from trainjobs.contract.sharing import MaxDevices, OwnerSettingsDocument, OwnerSettingsUpdate


def register(commands: Commands) -> None:
    queue = commands.add("queue", show_queue, "the queue in start order, each job's reason, each owner's share", True)
    queue.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="which device type's queue [cuda]")
    add_json(queue)
    owners = commands.add("owners", show_owners, "owners' sharing settings (yours, unless you are an admin)", True)
    add_json(owners)
    owner = commands.group("owner", "change an owner's sharing settings (admins)")
    put = add_action(owner, "set", set_owner, "set an owner's settings; what is not given keeps its value", True)
    put.add_argument("owner", metavar="NAME")
    put.add_argument("--weight", type=float, help="its weight in the fair share [1.0]")
    put.add_argument("--max-devices", metavar="cuda=N,cpu=N", help="caps per device type; 'none' lifts one")
    put.add_argument("--max-priority", type=int, help="the highest priority it may submit (0-100) [50]")
    allow = put.add_mutually_exclusive_group()
    allow.add_argument("--allow-non-preemptible", action="store_true", default=None, help="may submit them")
    allow.add_argument("--deny-non-preemptible", dest="allow_non_preemptible", action="store_false")


def show_queue(args: argparse.Namespace) -> None:
    with client_for(args) as client:
        view = client.queue(args.device)
    if args.json:
        print_json(view.model_dump(mode="json"))
        return
    print_table(
        ("#", "JOB", "OWNER", "PRIORITY", "DEVICES", "REASON"),
        (
            (place, item.job or "(another owner's)", item.owner, item.priority, item.devices, item.reason or "starting")
            for place, item in enumerate(view.items, start=1)
        ),
        right=("#", "PRIORITY", "DEVICES"),
    )
    print()
    print_table(
        ("OWNER", "WEIGHT", "SHARE", "IN USE", "MAX"),
        (
            (o.owner, f"{o.weight:g}", f"{o.share:.1f}", o.in_use, "-" if o.max_devices is None else o.max_devices)
            for o in view.owners
        ),
        right=("WEIGHT", "SHARE", "IN USE", "MAX"),
    )


def show_owners(args: argparse.Namespace) -> None:
    with client_for(args) as client:
        owners = client.owners()
    if args.json:
        print_json({"items": [owner.model_dump(mode="json") for owner in owners]})
        return
    print_table(
        ("OWNER", "WEIGHT", "MAX CUDA", "MAX CPU", "MAX PRIORITY", "NON-PREEMPTIBLE"),
        (
            (
                owner.owner,
                f"{owner.weight:g}",
                _cap(owner.max_devices.cuda),
                _cap(owner.max_devices.cpu),
                owner.max_priority,
                "allowed" if owner.allow_non_preemptible else "-",
            )
            for owner in owners
        ),
    )


def set_owner(args: argparse.Namespace) -> None:
    with client_for(args) as client:
        current = next((owner for owner in client.owners() if owner.owner == args.owner), None)
        changed = client.put_owner(args.owner, _updated(current or OwnerSettingsDocument(owner=args.owner), args))
    print_json(changed.model_dump(mode="json"))


def _updated(current: OwnerSettingsDocument, args: argparse.Namespace) -> OwnerSettingsUpdate:
    caps = current.max_devices.model_dump()
    if args.max_devices:
        caps.update(_caps(args.max_devices))
    return OwnerSettingsUpdate(
        weight=current.weight if args.weight is None else args.weight,
        max_devices=MaxDevices(**caps),
        max_priority=current.max_priority if args.max_priority is None else args.max_priority,
        allow_non_preemptible=(
            current.allow_non_preemptible if args.allow_non_preemptible is None else args.allow_non_preemptible
        ),
    )


def _caps(text: str) -> dict[str, int | None]:
    caps: dict[str, int | None] = {}
    for part in text.split(","):
        device, _, count = part.partition("=")
        if device.strip() not in ("cuda", "cpu") or not count.strip():
            raise UsageError(f"--max-devices: {part!r} is not cuda=N or cpu=N")
        value = count.strip().lower()
        if value == "none":
            caps[device.strip()] = None
        elif value.isdigit():
            caps[device.strip()] = int(value)
        else:
            raise UsageError(f"--max-devices: {count!r} is not a whole number or 'none'")
    return caps


def _cap(value: int | None) -> str:
    return "-" if value is None else str(value)
