"""Metrics ingestion: events per second the collector persists from the Redis stream into SQL,
and the lag from a report (XADD) to its committed row."""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import redis

from bench.support.load import seed_jobs
from devstack import REDIS_URL, clear_namespace, sql_database
from trainjobs.contract.events import EpochMetrics, JobEvent
from trainjobs.contract.redis_keys import RedisKeys
from trainjobs.jobs.db import make_engine, make_session_factory, transaction
from trainjobs.jobs.job_cache import JobCacheWriter
from trainjobs.jobs.repositories import epoch_metrics
from trainjobs.service.collector import EventCollector


def metrics_event(job_id: str, epoch: int) -> dict:
    payload = EpochMetrics(
        epoch=epoch,
        train_loss=1.0,
        val_loss=1.0,
        lr=0.1,
        epoch_seconds=1.0,
        samples_per_second=1.0,
        sent_at=time.time(),
    )
    return JobEvent.of(job_id, 1, payload).to_stream_fields()


def run(databases=("sqlite", "postgresql"), jobs: int = 50, epochs: int = 40) -> dict:
    rows = []
    for database in databases:
        with tempfile.TemporaryDirectory() as scratch, sql_database(database, Path(scratch)) as url:
            namespace = "bench-ingest"
            client = redis.Redis.from_url(REDIS_URL)
            keys = RedisKeys(namespace)
            engine = make_engine(url)
            sessions = make_session_factory(engine, JobCacheWriter(client, keys))
            job_ids = [seed_jobs(url, 1, "bench") for _ in range(jobs)]
            collector = EventCollector(client, sessions, keys, consumer="bench")
            seconds = _drain_backlog(client, keys, collector, job_ids, epochs)
            lags = _lags(client, keys, collector, sessions, job_ids[0], first_epoch=epochs + 1)
            total = jobs * epochs
            result = {
                "database": database,
                "events": total,
                "events_per_s": round(total / seconds, 1),
                "lag_ms_p50": round(statistics.median(lags) * 1000, 1),
                "lag_ms_max": round(max(lags) * 1000, 1),
            }
            print(
                f"ingest    {database:<10} {result['events_per_s']} events/s persisted ({total} events); "
                f"report->row lag p50 {result['lag_ms_p50']} ms, max {result['lag_ms_max']} ms",
                flush=True,
            )
            rows.append(result)
            engine.dispose()
            clear_namespace(REDIS_URL, namespace)
            client.close()
    return {"ingest": rows}


def _drain_backlog(client, keys: RedisKeys, collector: EventCollector, job_ids: list[str], epochs: int) -> float:
    """Seconds one collector takes to persist a backlog of jobs x epochs events."""
    pipe = client.pipeline()
    for epoch in range(1, epochs + 1):
        for job_id in job_ids:
            pipe.xadd(keys.events, metrics_event(job_id, epoch))
    pipe.execute()
    start = time.perf_counter()
    while collector.poll(block_ms=50, count=200):
        pass
    return time.perf_counter() - start


def _lags(client, keys: RedisKeys, collector: EventCollector, sessions, job_id: str, first_epoch: int) -> list[float]:
    """Report-to-row lag of 30 events sent one at a time while the collector waits on the stream."""
    lags = []
    for epoch in range(first_epoch, first_epoch + 30):
        client.xadd(keys.events, metrics_event(job_id, epoch))
        collector.poll(block_ms=1000)
        with transaction(sessions) as session:
            row = epoch_metrics.for_job(session, job_id)[-1]
            lags.append(row.created_at.timestamp() - row.data["sent_at"])
    return lags
