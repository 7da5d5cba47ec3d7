"""This host's address as the other hosts of a multi-node job reach it, and its interface."""

from __future__ import annotations

import fcntl
import logging
import socket
import struct
import time
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

SIOCGIFADDR = 0x8915  # Linux: an interface's IPv4 address


def address_towards(url: str) -> str:
    """The local address of this host's route to the server at `url` (Redis, which every host
    of the fleet reaches): what other hosts can reach this one at. No packet is sent."""
    parts = urlsplit(url)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((parts.hostname or "127.0.0.1", parts.port or 6379))
        return str(probe.getsockname()[0])


def wait_for_route(url: str, longest_pause: float = 10.0) -> str:
    """`address_towards(url)` once this host has a route there: a worker started while its
    network is down (a link cut, an interface not up yet at boot) waits for it, as it waits for
    Redis and SQL, rather than exiting."""
    pause = 0.5
    while True:
        try:
            return address_towards(url)
        except OSError as error:
            log.warning("no route to %s yet (%s); trying again in %.1f s", urlsplit(url).hostname, error, pause)
            time.sleep(pause)
            pause = min(pause * 2, longest_pause)


def interface_of(address: str) -> str | None:
    """The name of the interface that holds `address` (for GLOO_SOCKET_IFNAME and
    NCCL_SOCKET_IFNAME: gloo would otherwise pick the interface of the host name, which may be
    loopback); None when none does."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _index, name in socket.if_nameindex():
            try:
                answer = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, struct.pack("256s", name.encode()[:15]))
            except OSError:
                continue  # no IPv4 address on it
            if socket.inet_ntoa(answer[20:24]) == address:
                return name
    return None
