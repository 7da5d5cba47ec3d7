"""Small job specs that train in seconds on 2 cpu ranks."""

from __future__ import annotations

# Data for the tiny wavenet that makes an epoch last about half a second on 2 cpu ranks here (the
# default data: about 0.05 s), for tests that must act while a job is between epochs.
HALF_SECOND_EPOCHS = {"name": "synthetic-audio", "params": {"num_samples": 1024, "length": 256, "mu": 32}}


def tiny_wavenet_spec(**overrides) -> dict:
    spec = {
        "name": "tiny-wavenet",
        "model": {"name": "wavenet", "params": {"n_residue": 8, "n_skip": 16, "dilation_depth": 4, "n_repeat": 1}},
        "data": {"name": "synthetic-audio", "params": {"num_samples": 64, "length": 128, "mu": 32}},
        "device": "cpu",
        "gpus": 2,
        "epochs": 3,
        "batch_size": 8,
        "optimizer": {"name": "adamw", "lr": 0.01},
        "lr_scaling": "none",
    }
    spec.update(overrides)
    return spec


def plugin_spec(**overrides) -> dict:
    """A job on the test plugin's model and dataset (tests/plugin_package; fixture plugin_installed)."""
    return {
        "model": {"name": "logistic"},
        "data": {"name": "blobs"},
        "device": "cpu",
        "gpus": 2,
        "epochs": 3,
        "batch_size": 16,
        "optimizer": {"name": "sgd", "lr": 0.1},
        **overrides,
    }
