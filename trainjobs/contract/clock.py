"""Time as the contract writes it: UTC, with its offset."""

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)
