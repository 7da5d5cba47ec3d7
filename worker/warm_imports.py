"""What every rank needs, imported once by a launcher's fork server before any job arrives
(trainjobs.worker.launcher.warm_up), so a rank forked from it starts with it all loaded: torch,
the trainer, the built-in models and datasets, and the modules that constructing
DistributedDataParallel would import on first use (torch._dynamo and what it pulls in: about a
second and a half on a 2-core host). Nothing here runs job code, touches CUDA or starts a thread.
"""

import signal

import torch
import torch._dynamo
import torch.distributed
import torch.nn.parallel  # noqa: F401

import trainjobs.worker.rank
import trainjobs.worker.reporter
import trainjobs.worker.trainer.builder
import trainjobs.worker.trainer.checkpoints
import trainjobs.worker.trainer.telemetry
import trainjobs.worker.trainer.trainer  # noqa: F401

# A rank asked to stop (a preemption) before it has set its own handler must not die of the
# signal: forked from here, it ignores the signal until it is ready (trainjobs.worker.rank).
signal.signal(signal.SIGUSR1, signal.SIG_IGN)
