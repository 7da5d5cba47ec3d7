"""This host's address towards Redis (worker/network.py), in a network namespace of the test's own
whose loopback is down at first: a worker started while its network is down waits for a route
(the chaos run saw workers restarted during a link cut exit at once, again and again)."""

from __future__ import annotations

import secrets
import subprocess
import sys
import time

import pytest

WAITS = "from trainjobs.worker.network import wait_for_route; print(wait_for_route('redis://127.0.0.1:6379/0'))"


@pytest.fixture
def namespace_without_network():
    name = f"tjtest-route-{secrets.token_hex(3)}"
    if subprocess.run(["ip", "netns", "add", name], capture_output=True).returncode:
        pytest.skip("network namespaces need root")
    yield name
    subprocess.run(["ip", "netns", "delete", name], capture_output=True)


def test_the_worker_s_address_waits_for_a_route_to_redis(namespace_without_network):
    started = subprocess.Popen(
        ["ip", "netns", "exec", namespace_without_network, sys.executable, "-c", WAITS],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.5)
    assert started.poll() is None, started.communicate()  # no route yet: it waits
    subprocess.run(["ip", "netns", "exec", namespace_without_network, "ip", "link", "set", "lo", "up"], check=True)
    out, err = started.communicate(timeout=10)
    assert (started.returncode, out.strip()) == (0, "127.0.0.1"), err
    assert "no route to 127.0.0.1 yet" in err
