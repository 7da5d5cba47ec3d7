"""Hosts of their own on one machine, for workers that must not share a network."""

from __future__ import annotations

import random
import secrets
import subprocess


class NetworkHosts:
    """Hosts of their own on one machine: network namespaces joined by veth pairs to a bridge in
    this namespace, on a private /24 chosen here. Traffic stays between them and this namespace.
    Needs root (`ip netns`); removed again by `remove`."""

    def __init__(self, count: int):
        self.tag = secrets.token_hex(2)
        self.subnet = f"10.{random.randint(64, 127)}.{random.randint(1, 254)}"
        self.bridge = f"tjbr{self.tag}"
        self.names = [f"tjns{self.tag}{index}" for index in range(count)]
        self.gateway = f"{self.subnet}.1"
        self.addresses = [f"{self.subnet}.{index + 2}" for index in range(count)]

    def create(self) -> NetworkHosts:
        self._ip("link", "add", self.bridge, "type", "bridge")
        self._ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        self._ip("link", "set", self.bridge, "up")
        for index, (name, address) in enumerate(zip(self.names, self.addresses, strict=True)):
            outside = f"tjv{self.tag}{index}"
            self._ip("netns", "add", name)
            self._ip("link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", name)
            self._ip("link", "set", outside, "master", self.bridge)
            self._ip("link", "set", outside, "up")
            self._ip("-n", name, "addr", "add", f"{address}/24", "dev", "eth0")
            self._ip("-n", name, "link", "set", "eth0", "up")
            self._ip("-n", name, "link", "set", "lo", "up")
        return self

    def prefix(self, index: int) -> list[str]:
        return ["ip", "netns", "exec", self.names[index]]

    def remove(self) -> None:
        for name in self.names:
            subprocess.run(["ip", "netns", "delete", name], capture_output=True)
        subprocess.run(["ip", "link", "delete", self.bridge], capture_output=True)

    @staticmethod
    def _ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True)
