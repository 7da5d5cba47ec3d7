"""Every name the service uses in Redis, built here and nowhere else. All start with the stack's
namespace (`TRAINJOBS_NAMESPACE`), so stacks can share one Redis."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RedisKeys:
    namespace: str

    @property
    def events(self) -> str:
        """The stream ranks and launchers append job events to; the collector reads it."""
        return f"{self.namespace}:events"

    @property
    def dead_letters(self) -> str:
        """Stream entries the collector set aside (malformed, or failing to apply)."""
        return f"{self.events}:dead"

    @property
    def workers(self) -> str:
        """The hash of worker heartbeats, one field per host name."""
        return f"{self.namespace}:workers"

    @property
    def job_state_channel(self) -> str:
        """The pub/sub channel of job-state notices (trainjobs.contract.notices)."""
        return f"{self.namespace}:job-state"

    @property
    def background_leader(self) -> str:
        """The lock that the API process running the collector and the sweeps holds."""
        return f"{self.namespace}:background-leader"

    @property
    def job_cache_prefix(self) -> str:
        return f"{self.namespace}:job:"

    def job(self, job_id: str) -> str:
        """A job's cached version and document (trainjobs.jobs.job_cache)."""
        return self.job_cache_prefix + job_id

    def rendezvous(self, job_id: str, attempt: int) -> str:
        """Where node 0 of a multi-node job publishes the port of its rendezvous store."""
        return f"{self.namespace}:rendezvous:{job_id}:{attempt}"

    def run_queue(self, device: str) -> str:
        """The Celery queue of run messages for one device type (a list in Redis)."""
        return f"{self.namespace}.{device}"
