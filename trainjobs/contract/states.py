"""A job's states and stop reasons, spelled here and nowhere else: the service, the worker, the
client and the dashboard (which the API serves them to, as /ui/contract.js) all take them from
this module.

    queued ──> running ──> succeeded | failed | cancelled
       │         │  │  └──> cancelling ──> cancelled
       │         │  └──(worker lost)──> queued
       │         └──> preempting ──(its checkpoint recorded, or the grace ran out)──> queued
       └──> cancelled
"""

from __future__ import annotations

from typing import Literal, get_args

JobState = Literal["queued", "running", "preempting", "cancelling", "succeeded", "failed", "cancelled"]
StopReason = Literal["completed", "early_stopping", "cancelled", "error", "timeout"]

JOB_STATES: tuple[str, ...] = get_args(JobState)
# A worker holds the job's devices and renews its lease.
ACTIVE_STATES: frozenset[str] = frozenset({"running", "preempting", "cancelling"})
# The job is over; nothing changes it any more but a delete.
TERMINAL_STATES: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})
