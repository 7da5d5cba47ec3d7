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

    def install(self) -> StopRelay:
        """From now on, the worker's stop signal is noted here (it would end the launcher else)."""
        signal.signal(STOP_SIGNAL, self._on_signal)
        return self

    def _on_signal(self, _signum: int, _frame: object) -> None:
        self.asked = True

    def forward(self, ranks: Sequence) -> None:
        """Ask every rank still running (`ranks`: their processes, by host pid) to stop."""
        if not self.asked:
            return
        for process in ranks:
            try:
                if process.exitcode is None:
                    os.kill(process.pid, STOP_SIGNAL)
            except (ProcessLookupError, ValueError):
                pass
