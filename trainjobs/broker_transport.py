"""kombu's Redis transport, mended where a lost broker connection ended the whole worker.

kombu 5.7 with Celery 5.7: when the broker connection is lost, Celery's consumer first
`collect()`s the connection, which drops the transport's connection parameters, and then closes
it. Whatever a channel of that connection still does then (closing restores the messages fetched
and not yet acknowledged; a task ending acknowledges its message) needs those parameters and raises
AttributeError ('NoneType' object has no attribute 'hostname', or 'client'). kombu and Celery
ignore connection errors there, not AttributeError: Celery ended the worker as an "Unrecoverable
error", and a worker so ended consumes nothing more, waits for its running jobs and exits. The
chaos run (python -m bench chaos) saw that at about one Redis restart in eight.

Here such a channel raises a connection error, which those paths expect: the consumer connects
again. The messages it could not restore or acknowledge stay in Redis's index of unacknowledged
messages and come back after the visibility timeout; a job's SQL lease, not its message, decides
who runs it, so a message that comes back for a job already claimed is dropped.
"""

from __future__ import annotations

from typing import Any

import redis
from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    def _connparams(self, asynchronous: bool = False) -> dict[str, Any]:
        if self.connection is None or self.connection.client is None:
            raise redis.ConnectionError("this channel's broker connection was closed")
        params: dict[str, Any] = super()._connparams(asynchronous=asynchronous)
        return params


class Transport(kombu_redis.Transport):
    Channel = Channel


TRANSPORT = f"{Transport.__module__}:{Transport.__qualname__}"
