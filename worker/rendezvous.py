"""Where a job's ranks meet: a TCPStore, as torch ships it (torchrun's agent serves the same),
served by the launcher of node 0 on a socket it binds itself, never on every interface."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass
from datetime import timedelta

import redis
import torch.distributed as dist

from trainjobs.contract.run import RunRequest, StoreAddress


@dataclass(frozen=True)
class ServedStore:
    """A TCPStore and the listening socket it serves on (which must live as long as it does)."""

    store: dist.TCPStore
    listener: socket.socket

    @property
    def port(self) -> int:
        return int(self.store.port)


def rendezvous_store(world_size: int, timeout_seconds: float, host: str = "127.0.0.1") -> ServedStore:
    """The ranks' rendezvous, served by the launcher as torchrun's agent serves it, listening on
    `host` alone (loopback for a one-node job, the worker's address for several nodes).

    The listening socket is bound here, on a port the kernel picks, and handed to the store:
    torch's store would otherwise listen on every interface of the host. Probing for a free port
    and handing its number to rank 0 to bind later would race with every other socket on the host
    (a client's outgoing connection can take that port in between) and fail the job."""
    listener = socket.create_server((host, 0), family=_family_of(host), backlog=1024)
    store = dist.TCPStore(
        host,
        listener.getsockname()[1],
        world_size,
        is_master=True,
        wait_for_workers=False,
        timeout=timedelta(seconds=timeout_seconds),
        master_listen_fd=listener.fileno(),
    )
    return ServedStore(store, listener)


def _family_of(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


class Rendezvous:
    """Where this node's ranks meet the others. One node: a FileStore in the ranks' own folder,
    which needs no socket (and works inside a sandbox's own network namespace). Several: a
    TCPStore, as torch ships it: node 0's launcher serves it at its worker's address and publishes
    "address:port" in Redis under the attempt's key; the other nodes' launchers read the port
    there, and accept it only at the address node 0's worker recorded in SQL for this attempt
    (`request.rendezvous_host`): whoever can write to Redis cannot point ranks elsewhere."""

    def __init__(self, request: RunRequest, client: redis.Redis | None):
        timeout = request.process_group_timeout_seconds
        self.store: ServedStore | None = None
        if request.nodes == 1:
            store_file = request.rank_path / STORE_FILE
            store_file.unlink(missing_ok=True)
            self.address = StoreAddress(file=str(store_file))
        elif request.node_rank == 0:
            assert client is not None and request.rendezvous_key is not None
            self.store = rendezvous_store(request.spec.world_size, timeout, host=request.address)
            self.address = StoreAddress(host=request.address, port=self.store.port)
            _publish(client, request.rendezvous_key, f"{request.address}:{self.store.port}", timeout)
        else:
            assert client is not None and request.rendezvous_key is not None
            host, port = _published(client, request.rendezvous_key, timeout)
            if host != request.rendezvous_host:
                raise RendezvousRefused(
                    f"the rendezvous published for node 0 is at {host}, not at {request.rendezvous_host}, "
                    "the address its worker recorded"
                )
            self.address = StoreAddress(host=host, port=port)


STORE_FILE = "rendezvous.store"


class RendezvousRefused(Exception):
    """The published rendezvous is not node 0's."""


RENDEZVOUS_KEY_SECONDS = 24 * 3600


# A Redis restarting (seconds) is waited for: a job starting then would fail on it otherwise.
REDIS_AWAY = (redis.ConnectionError, redis.TimeoutError)


def _publish(client: redis.Redis, key: str, address: str, timeout_seconds: float) -> None:
    deadline = time.monotonic() + timeout_seconds
    while True:
        try:
            client.set(key, address, ex=RENDEZVOUS_KEY_SECONDS)
            return
        except REDIS_AWAY:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _published(client: redis.Redis, key: str, timeout_seconds: float) -> tuple[str, int]:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        try:
            value = client.get(key)
        except REDIS_AWAY:
            value = None
        if value:
            host, _, port = (value.decode() if isinstance(value, bytes) else str(value)).rpartition(":")
            return host, int(port)
        time.sleep(0.2)
    raise TimeoutError(f"node 0 did not publish its rendezvous within {timeout_seconds:.0f} s")
