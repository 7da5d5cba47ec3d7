"""The connections a server process (API or worker) holds, each built once from Settings and
passed to what needs it: one Redis client, and the Celery app that carries run messages.

A Redis client is a pool of connections and safe to share between threads; building one per
request (or per heartbeat) would open a connection each time.
"""

from __future__ import annotations

import ssl

import redis
import redis.asyncio
from celery import Celery

from trainjobs.broker_transport import TRANSPORT
from trainjobs.settings import Settings


def redis_client(settings: Settings) -> redis.Redis:
    timeout = settings.redis_timeout_seconds
    return redis.Redis.from_url(
        settings.redis_url, socket_timeout=timeout, socket_connect_timeout=timeout, health_check_interval=30
    )


def async_redis_client(settings: Settings) -> redis.asyncio.Redis:
    """For the API's event loop (its one per-request Redis read: a job's version)."""
    timeout = settings.redis_timeout_seconds
    return redis.asyncio.Redis.from_url(settings.redis_url, socket_timeout=timeout, socket_connect_timeout=timeout)


def celery_app(name: str, settings: Settings) -> Celery:
    app = Celery(name, broker=settings.redis_url)
    app.conf.broker_transport = TRANSPORT  # kombu's Redis transport, mended: see its module
    if settings.redis_url.startswith("rediss://"):
        # TLS verified as redis-py verifies it for the other clients (kombu would pick the
        # rediss scheme's insecure default from the URL, which the transport above replaces).
        app.conf.broker_use_ssl = {"ssl_cert_reqs": ssl.CERT_REQUIRED}
    visibility_timeout = settings.broker_visibility_timeout
    app.conf.update(
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=settings.redis_timeout_seconds,
        # Redis redelivers an unacknowledged message after this long. The job's SQL lease, not
        # the broker, decides who runs it, so a redelivery while a job runs claims nothing.
        # It sweeps for such messages every `unacked_restore_interval` s (kombu's default sweep,
        # 10 s x a throttle of 10, would leave a short timeout unchecked for minutes).
        broker_transport_options={
            "visibility_timeout": visibility_timeout,
            "unacked_restore_interval": max(1, min(10, visibility_timeout // 2)),
            "unacked_restore_throttle": 1,
        },
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        # Acknowledge after the task returns: a worker that dies before claiming the job leaves
        # the message to be redelivered; one that dies after is covered by the lease.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
    )
    return app
