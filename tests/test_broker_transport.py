"""The broker connection's transport (trainjobs/broker_transport.py), without a worker."""

from __future__ import annotations

import ssl

import pytest
import redis

from devstack import REDIS_URL
from trainjobs.broker_transport import Transport
from trainjobs.connections import celery_app
from trainjobs.settings import Settings


def test_a_channel_of_a_collected_connection_raises_a_connection_error():
    """What kombu and Celery ignore after a lost connection; kombu's own raised AttributeError."""
    app = celery_app("test", Settings(redis_url=REDIS_URL))
    connection = app.connection_for_write()
    channel = connection.default_channel
    assert isinstance(connection.transport, Transport)
    connection.collect()
    with pytest.raises(redis.ConnectionError):
        channel.qos.restore_unacked()


def test_a_tls_broker_url_verifies_the_certificate():
    app = celery_app("test", Settings(redis_url="rediss://:secret@broker.example:6380/0"))
    connection = app.connection_for_write()
    assert connection.ssl == {"ssl_cert_reqs": ssl.CERT_REQUIRED}
    assert (connection.hostname, connection.port, connection.password) == ("broker.example", 6380, "secret")
