"""The launcher's part in a preemption: the worker asks it to stop (SIGUSR1), and it asks each of
its ranks in turn, again every `RESEND_SECONDS` until they have stopped (a rank still starting
ignores the signal, as its fork server does: trainjobs.worker.warm_imports). The ranks agree on
the step, rank 0 checkpoints it, and they exit (trainjobs.worker.trainer.preemption)."""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence

from trainjobs.worker.trainer.preemption import STOP_SIGNAL

RESEND_SECONDS = 1.0


class StopRelay:
    def __init__(self) -> None:
        self.asked = False
        self.ranks: Sequence = ()  # the attempt's rank processes (by host pid), once started

    def install(self) -> StopRelay:
        """From now on, the worker's stop signal is noted here (it would end the launcher else).
        The worker starts a launcher with the signal blocked; one sent before now is delivered
        as it is unblocked."""
        signal.signal(STOP_SIGNAL, self._on_signal)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {STOP_SIGNAL})
        return self

    def close(self) -> None:
        """The attempt is over: from now on the stop signal is ignored. Ignored, not blocked: a
        mask is per thread, and interpreter shutdown puts the default action (the process
        ends) back in place of a Python handler, but leaves SIG_IGN alone."""
        signal.signal(STOP_SIGNAL, signal.SIG_IGN)

    def ranks_started(self, ranks: Sequence) -> None:
        self.ranks = ranks
        self.forward()  # asked before they started

    def _on_signal(self, _signum: int, _frame: object) -> None:
        self.asked = True
        self.forward()  # at once: the launcher's own wait would only wake at its next timeout

    def forward(self) -> None:
        """Ask every rank still running to stop."""
        if not self.asked:
            return
        for process in self.ranks:
            try:
                if process.exitcode is None:
                    os.kill(process.pid, STOP_SIGNAL)
            except (ProcessLookupError, ValueError):
                pass
