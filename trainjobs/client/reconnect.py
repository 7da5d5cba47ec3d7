"""How often a client following a stream tries again while the API is away: exponential back-off
capped at `RECONNECT_CAP_SECONDS`, half of each step for sure and half at random (tenacity's
wait strategies), so many clients of one API that comes back do not reconnect in step.

The loop that uses it is the client's own (`TrainJobsClient.events`): it starts the back-off
over after every event received and gives up on the time since the last answer, where
tenacity's stop conditions count from the first try."""

from __future__ import annotations

from tenacity import RetryCallState, wait_exponential, wait_random_exponential

RECONNECT_BASE_SECONDS = 0.25
RECONNECT_CAP_SECONDS = 10.0

_WAIT = wait_exponential(
    multiplier=RECONNECT_BASE_SECONDS / 2, max=RECONNECT_CAP_SECONDS / 2
) + wait_random_exponential(multiplier=RECONNECT_BASE_SECONDS / 2, max=RECONNECT_CAP_SECONDS / 2)


def reconnect_delay(failures: int) -> float:
    """Seconds to wait after `failures` failed tries in a row (1 for the first)."""
    state = RetryCallState(retry_object=None, fn=None, args=(), kwargs={})  # type: ignore[arg-type]
    state.attempt_number = failures
    return float(_WAIT(state))
