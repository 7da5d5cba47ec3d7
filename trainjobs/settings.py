"""One typed settings object for every process (API, worker, CLI), read from `TRAINJOBS_*`.

Bad values fail at start-up, not in the middle of a job.
"""

from __future__ import annotations

import os
from functools import cached_property
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from trainjobs.contract.redis_keys import RedisKeys


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="TRAINJOBS_", extra="ignore")

    home: Path = Field(Path.home() / ".trainjobs", description="data dir for the defaults below")
    database_url: str | None = Field(None, description="SQLAlchemy URL; SQLite under home if unset")
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_timeout_seconds: float = Field(10.0, gt=0.0, description="Redis connect and read timeout")
    sql_timeout_seconds: float = Field(
        30.0,
        gt=0.0,
        le=3600.0,
        description="how long SQL may take: SQLite's wait for its write lock, PostgreSQL's connect and statement "
        "timeouts",
    )
    namespace: str = Field(
        "trainjobs",
        pattern=r"^[A-Za-z0-9_.-]{1,64}$",
        description="prefix of Redis keys and Celery queues, so stacks can share a Redis",
    )
    data_root: Path | None = Field(None, description="datasets read files only under it [home/data]")
    checkpoint_dir: str | None = Field(
        None,
        description="checkpoint store: a local path, or a URL such as s3://bucket/prefix [home/checkpoints]",
    )
    run_dir: Path | None = Field(None, description="per-run scratch: rank logs, results [home/runs]")

    # Dispatch, leases and recovery.
    lease_seconds: float = Field(30.0, gt=1.0, description="a claimed job's lease; renewed every third of it")
    sweep_interval_seconds: float = Field(
        5.0,
        gt=0.0,
        description="how often the API's leader requeues lost workers' jobs, re-sends stuck dispatches "
        "and explains waiting jobs (each sweep costs a few SQL queries on the cores jobs train on)",
    )
    outbox_grace_seconds: float = Field(
        5.0, ge=0.0, description="the sweeper leaves younger intents to the request that made them"
    )
    broker_visibility_timeout: int = Field(3600, ge=1)
    process_group_timeout_seconds: float = Field(
        120.0, gt=0.0, description="a stalled collective fails the job after this"
    )
    max_attempts: int = Field(3, ge=1, description="attempts of a job whose worker is lost, before it fails")
    # Sharing the fleet (the contract's "Sharing the fleet").
    preemption: bool = Field(True, description="false: nothing is ever preempted (the order and the caps still hold)")
    preempt_min_runtime_seconds: float = Field(
        600.0, ge=0.0, description="a running job is preempted only after running this long"
    )
    preempt_grace_seconds: float = Field(
        120.0, gt=0.0, description="a preempted job's checkpoint is awaited this long, then its processes are ended"
    )
    collector_max_failures: int = Field(
        3, ge=1, le=100, description="tries of a stream entry whose transaction fails, before it is dead-lettered"
    )
    log_lines_per_job: int = Field(
        50_000,
        ge=100,
        le=10_000_000,
        description="rank output lines the service keeps per job; past it, one notice and the rest stays on the worker",
    )
    progress_seconds: float = Field(
        10.0, gt=0.0, le=3600.0, description="how often rank 0 reports progress inside an epoch"
    )
    node_gather_seconds: float = Field(
        60.0, gt=0.0, description="how long a worker holds a node of a multi-node job waiting for the others"
    )
    warm_launchers: int = Field(
        1,
        ge=0,
        le=64,
        description="launchers a worker keeps started ahead of their job, torch and the trainer loaded (0: each "
        "job starts its own, cold)",
    )
    heartbeat_seconds: float = Field(5.0, gt=0.0, description="how often a worker reports itself")
    worker_lost_seconds: float = Field(30.0, gt=0.0, description="a worker silent this long is shown as lost")
    run_folders_keep_days: float = Field(
        7.0, gt=0.0, description="a worker removes attempt folders (their logs) untouched this long"
    )
    forget_workers_after_seconds: float = Field(
        86400.0, gt=0.0, description="a worker silent this long is dropped from GET /v1/workers [a day]"
    )

    # Jobs with their own code, and the sandbox.
    code_max_bytes: int = Field(100 * 2**20, ge=1024, description="a code archive as uploaded (POST /v1/code)")
    code_max_unpacked_bytes: int = Field(2**30, ge=1024, description="a code archive's files together")
    code_cache_bytes: int = Field(
        10 * 2**30, ge=2**20, description="a worker's cache of unpacked archives and their environments"
    )
    job_disk_bytes: int = Field(
        10 * 2**30, ge=2**20, description="what a job's ranks may write in their folder; past it the job fails"
    )
    sandbox: Literal["auto", "required", "off"] = Field(
        "auto",
        description="auto: every job's ranks run in the sandbox where this host has bubblewrap and the worker is "
        "root, else jobs with their own code wait; required: a worker that cannot sandbox does not start; off",
    )
    sandbox_max_processes: int = Field(
        512, ge=16, le=1_000_000, description="processes and threads a job's ranks may have together"
    )
    device_root: Path = Field(
        Path("/dev"), description="where a GPU host's NVIDIA device nodes are (nvidia<id>, nvidiactl, ...)"
    )
    nvidia_driver_proc: Path = Field(
        Path("/proc/driver/nvidia"), description="the NVIDIA driver's state (its gpus/ folder lists the GPUs)"
    )

    # API.
    max_request_bytes: int = Field(1024 * 1024, ge=1024)
    api_threads: int = Field(
        8,
        ge=1,
        le=256,
        description=(
            "threads that run the API's (sync) request handlers. Few beat many: handlers are short and "
            "hold the GIL, and on 2 cores 40 threads (anyio's default) served half the requests per "
            "second of 2 to 8 under 50 clients, with p99 three times longer (BENCHMARKS.md)"
        ),
    )
    api_workers: int = Field(
        default_factory=lambda: os.cpu_count() or 1,
        ge=1,
        le=64,
        description="API processes serving requests [the host's cores]; one of them at a time runs the "
        "collector and the sweeps (a lock in Redis)",
    )
    token_cache_seconds: float = Field(
        5.0,
        ge=0.0,
        le=300.0,
        description="how long an API process trusts a token it has checked: a revoked token stops working "
        "within this time (0: check SQL on every request)",
    )
    streams_per_process: int = Field(
        1000, ge=1, le=100_000, description="open /events and /logs?follow=true streams an API process serves"
    )
    streams_per_owner: int = Field(
        50, ge=1, le=100_000, description="open streams one owner may hold in an API process; past it, 429"
    )
    api_docs: bool = Field(False, description="serve Swagger's /docs page (its scripts come from a CDN)")
    cors_origins: str = Field("", description="comma-separated origins a dashboard may call the API from [none]")
    run_background: bool = Field(True, description="run the collector and sweeper inside the API process")
    retention_days: float | None = Field(
        None,
        gt=0.0,
        description="delete ended jobs (with their metrics, logs and checkpoint files) this many days after "
        "they finished, in the background sweep [off]",
    )

    @field_validator("database_url")
    @classmethod
    def _known_database(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("sqlite", "postgresql")):
            raise ValueError("TRAINJOBS_DATABASE_URL must be a sqlite:// or postgresql:// URL")
        return url

    @cached_property
    def sql_url(self) -> str:
        return self.database_url or f"sqlite:///{self.home / 'trainjobs.db'}"

    @cached_property
    def data_root_path(self) -> Path:
        return (self.data_root or self.home / "data").resolve()

    @cached_property
    def checkpoint_store(self) -> str:
        """The store's location as workers and the API open it: a URL as given, or an absolute path."""
        location = self.checkpoint_dir
        if location and "://" in location:
            return location.rstrip("/")
        return str((Path(location) if location else self.home / "checkpoints").resolve())

    @cached_property
    def run_path(self) -> Path:
        return (self.run_dir or self.home / "runs").resolve()

    @property
    def cors_origin_list(self) -> list[str]:
        return [origin.strip() for origin in self.cors_origins.split(",") if origin.strip()]

    @cached_property
    def keys(self) -> RedisKeys:
        return RedisKeys(self.namespace)


def load_settings() -> Settings:
    return Settings()
