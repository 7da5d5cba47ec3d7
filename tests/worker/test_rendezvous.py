"""Where a job's ranks meet: a file in their folder for a one-node job (no socket at all), and for
several nodes node 0's TCPStore, listening on the worker's address only, never on every
interface; a joining node accepts the published rendezvous only at the address node 0's worker
recorded. Real stores, real sockets, real Redis."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest
import redis

from devstack import REDIS_URL, PrivateRedis, tiny_wavenet_spec
from trainjobs.contract.redis_keys import RedisKeys
from trainjobs.contract.run import RunRequest, StoreAddress
from trainjobs.contract.spec import JobSpec
from trainjobs.worker.rendezvous import Rendezvous, RendezvousRefused, rendezvous_store


def request(tmp_path: Path, namespace: str, nodes: int, node_rank: int = 0, **fields) -> RunRequest:
    return RunRequest(
        job_id="jrendezvous",
        attempt=1,
        spec=JobSpec.model_validate(tiny_wavenet_spec(gpus=2, nodes=nodes)),
        run_dir=str(tmp_path),
        checkpoint_dir=str(tmp_path),
        data_root=str(tmp_path),
        nodes=nodes,
        node_rank=node_rank,
        rendezvous_key=RedisKeys(namespace).rendezvous("jrendezvous", 1) if nodes > 1 else None,
        **fields,
    )


def listening_addresses(port: int) -> set[str]:
    """The local addresses this host listens on at `port` (IPv4 and IPv6), from /proc."""
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port:  # LISTEN
                raw = bytes.fromhex(address)
                if width == 8:
                    found.add(socket.inet_ntop(socket.AF_INET, raw[::-1]))
                else:
                    words = b"".join(raw[i : i + 4][::-1] for i in range(0, 16, 4))
                    found.add(socket.inet_ntop(socket.AF_INET6, words))
    return found


def test_a_one_node_job_s_ranks_meet_in_a_file_of_their_folder_with_no_socket(tmp_path, namespace):
    rendezvous = Rendezvous(request(tmp_path, namespace, nodes=1), client=None)
    assert rendezvous.store is None  # nothing listens
    assert rendezvous.address == StoreAddress(file=str(tmp_path / "rendezvous.store"))


def test_a_store_the_launcher_serves_listens_on_the_address_it_is_given_only():
    served = rendezvous_store(2, timeout_seconds=10, host="127.0.0.1")
    assert listening_addresses(served.port) == {"127.0.0.1"}  # torch's own store: every interface


def test_node_0_s_store_listens_on_its_worker_s_address_only_and_publishes_it(tmp_path, namespace):
    client = redis.Redis.from_url(REDIS_URL)
    rendezvous = Rendezvous(request(tmp_path, namespace, nodes=2, address="127.0.0.1"), client)
    assert listening_addresses(rendezvous.address.port) == {"127.0.0.1"}
    published = client.get(RedisKeys(namespace).rendezvous("jrendezvous", 1)).decode()
    assert published == f"127.0.0.1:{rendezvous.address.port}"


def test_a_joining_node_accepts_only_the_address_node_0_s_worker_recorded(tmp_path, namespace):
    client = redis.Redis.from_url(REDIS_URL)
    key = RedisKeys(namespace).rendezvous("jrendezvous", 1)
    joining = request(tmp_path, namespace, nodes=2, node_rank=1, rendezvous_host="10.0.0.11")
    client.set(key, "10.66.6.6:29500")  # written by whoever can write to Redis
    with pytest.raises(RendezvousRefused, match="10.0.0.11"):
        Rendezvous(joining, client)
    client.set(key, "10.0.0.11:29500")  # node 0's own
    assert Rendezvous(joining, client).address == StoreAddress(host="10.0.0.11", port=29500)


def test_a_joining_node_waits_through_a_redis_restart_for_node_0_s_address(tmp_path, namespace):
    """A 2-node job starting while Redis restarts: the joining launcher failed on the first
    connection refused (the chaos run saw a job fail so); it now waits, within the timeout."""
    server = PrivateRedis(tmp_path / "redis")
    (tmp_path / "redis").mkdir()
    server.start()
    client = redis.Redis.from_url(server.url, socket_connect_timeout=1)
    joining = request(tmp_path, namespace, nodes=2, node_rank=1, rendezvous_host="10.0.0.11")
    server.stop()

    def node_0_publishes_once_redis_is_back() -> None:
        time.sleep(1.5)
        server.start()
        client.set(RedisKeys(namespace).rendezvous("jrendezvous", 1), "10.0.0.11:29500")

    publisher = threading.Thread(target=node_0_publishes_once_redis_is_back)
    publisher.start()
    try:
        assert Rendezvous(joining, client).address == StoreAddress(host="10.0.0.11", port=29500)
    finally:
        publisher.join()
        server.stop()
