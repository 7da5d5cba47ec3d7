"""This host's address as the other hosts of a multi-node job reach it, and its interface."""

from __future__ import annotations

import fcntl
import socket
import struct
from urllib.parse import urlsplit

SIOCGIFADDR = 0x8915  # Linux: an interface's IPv4 address


def address_towards(url: str) -> str:
    """The local address of this host's route to the server at `url` (Redis, which every host
    of the fleet reaches): what other hosts can reach this one at. No packet is sent."""
    parts = urlsplit(url)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((parts.hostname or "127.0.0.1", parts.port or 6379))
        return str(probe.getsockname()[0])


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
