"""The built-in wavenet with the trainer's own cross-entropy given as the entry's loss, so that
the only difference from "wavenet" is the path the loss takes (bench/own_loss.py)."""

from trainjobs.contract.builtins import MODELS
from trainjobs.contract.catalog import ModelEntry

WAVENET_HOOKED = ModelEntry(
    MODELS["wavenet"].params,
    MODELS["wavenet"].builder,
    "wavenet, its cross-entropy through the loss hook",
    loss="trainjobs_bench_hook.loss:cross_entropy",
)
