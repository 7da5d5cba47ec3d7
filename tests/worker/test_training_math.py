"""The trainer's techniques, each checked against the math it must equal, on real DDP ranks."""

import json
import math

import pytest
import torch

from tests.worker.local_training import assert_same_weights, mlp_spec, run_locally


def test_two_ranks_of_batch_b_end_with_the_weights_of_one_rank_of_batch_2b(tmp_path):
    two = run_locally(tmp_path, "two-ranks", mlp_spec(gpus=2, batch_size=4))
    one = run_locally(tmp_path, "one-rank", mlp_spec(gpus=1, batch_size=8))
    assert two.outcome.state == one.outcome.state == "succeeded"
    before = run_locally(tmp_path, "no-steps", mlp_spec(optimizer={"name": "sgd", "lr": 1e-12, "momentum": 0.0}))
    assert_same_weights(two.checkpoint(1)["model"], one.checkpoint(1)["model"])
    # ... and training moved them (8 SGD steps), so the comparison says something.
    moved = two.checkpoint(1)["model"]["layers.1.weight"] - before.checkpoint(1)["model"]["layers.1.weight"]
    assert moved.abs().max() > 1e-3


@pytest.mark.parametrize("steps, optimizer_steps", [(4, 4), (3, 6)], ids=["4-even", "3-trailing-partial"])
def test_accumulating_k_micro_batches_of_b_equals_one_batch_of_kb(tmp_path, steps, optimizer_steps):
    # 64 samples in 16 micro-batches of 4. With k=4: four groups of 4, as four batches of 16.
    # With k=3: groups 3,3,3,3,3,1, as five batches of 12 and one of 4 (the trailing partial group).
    accumulated = run_locally(tmp_path, "accumulated", mlp_spec(batch_size=4, accumulation_steps=steps))
    large = run_locally(tmp_path, "large", mlp_spec(batch_size=4 * steps))
    assert accumulated.outcome.state == large.outcome.state == "succeeded"
    assert_same_weights(accumulated.checkpoint(1)["model"], large.checkpoint(1)["model"])
    assert (
        accumulated.checkpoint(1)["scheduler"]["last_epoch"]
        == large.checkpoint(1)["scheduler"]["last_epoch"]
        == optimizer_steps
    )


def test_four_epochs_equal_two_then_a_resume_for_two_more(tmp_path):
    spec = mlp_spec(
        gpus=2,
        batch_size=4,
        epochs=4,
        optimizer={"name": "adamw", "lr": 0.01},
        scheduler={"name": "cosine", "warmup_epochs": 1},
    )
    straight = run_locally(tmp_path, "straight", spec)
    # A second run of the same spec stands for one interrupted after epoch 2: its epoch-2
    # checkpoint is what the interrupted run would have left (the cosine spans all 4 epochs).
    first_half = run_locally(tmp_path, "first-half", spec)
    assert straight.outcome.state == "succeeded" and first_half.outcome.state == "succeeded"
    resumed = run_locally(tmp_path, "first-half", spec, resume_path="first-half/a1/first-half-e0002.pt")
    assert resumed.outcome.state == "succeeded"
    assert_same_weights(straight.checkpoint(4)["model"], resumed.checkpoint(4)["model"], rtol=0)
    straight_losses = [(row["epoch"], row["train_loss"], row["val_loss"]) for row in straight.metrics]
    # metrics.jsonl of "first-half" holds its 4 epochs, then the resumed epochs 3 and 4.
    resumed_losses = [(row["epoch"], row["train_loss"], row["val_loss"]) for row in resumed.metrics]
    assert resumed_losses[4:] == straight_losses[2:]
    assert resumed_losses[:4] == straight_losses  # the same spec and seed: the same losses
    lrs = [row["lr"] for row in straight.metrics]
    assert lrs[0] == pytest.approx(0.01)  # warm-up over epoch 1 reaches the peak
    assert lrs[-1] == pytest.approx(0.0, abs=1e-12)  # cosine ends at 0


def test_early_stopping_stops_after_patience_epochs_without_improvement(tmp_path):
    # With min_delta 100 no epoch after the first counts as an improvement.
    run = run_locally(tmp_path, "early", mlp_spec(epochs=10, early_stopping={"patience": 2, "min_delta": 100.0}))
    assert (run.outcome.state, run.outcome.stop_reason) == ("succeeded", "early_stopping")
    assert [row["epoch"] for row in run.metrics] == [1, 2, 3]
    # The best (epoch 1) is kept, and the last is written on stopping.
    assert run.checkpoint_files() == ["early-e0001.pt", "early-e0002.pt", "early-e0003.pt"]


def test_a_diverging_fp32_loss_fails_naming_the_epoch_and_step(tmp_path):
    run = run_locally(tmp_path, "diverge", mlp_spec(optimizer={"name": "sgd", "lr": 1e30, "momentum": 0.0}))
    assert (run.outcome.state, run.outcome.stop_reason) == ("failed", "error")
    assert "loss is not finite at epoch 1, step" in run.outcome.error


def test_checkpoints_keep_the_last_n_and_the_best_and_open_with_weights_only(tmp_path):
    run = run_locally(
        tmp_path, "rotate", mlp_spec(epochs=4, checkpoint={"every_epochs": 1, "keep_last": 2}, precision="bf16")
    )
    assert run.outcome.state == "succeeded"
    files = run.checkpoint_files()
    best_epoch = min(run.metrics, key=lambda row: row["val_loss"])["epoch"]
    assert set(files) == {"rotate-e0003.pt", "rotate-e0004.pt", f"rotate-e{best_epoch:04d}.pt"}
    state = run.checkpoint(4)
    assert not any(key.startswith("module.") for key in state["model"])
    assert (
        state["epoch"] == 4 and state["scaler"] is None and state["best_checkpoint_id"] == f"rotate-e{best_epoch:04d}"
    )


def test_init_from_loads_matching_weights_and_reports_a_new_head(tmp_path):
    source = run_locally(tmp_path, "source", mlp_spec())
    # Same body, a head for 6 classes instead of 4.
    spec = mlp_spec(
        data={
            "name": "synthetic-images",
            "params": {"num_samples": 80, "image_size": 4, "num_classes": 6, "val_fraction": 0.2},
        },
        optimizer={"name": "sgd", "lr": 1e-12, "momentum": 0.0},
    )
    tuned = run_locally(tmp_path, "tuned", spec, init_path="source/a1/source-e0001.pt")
    assert tuned.outcome.state == "succeeded"
    body = "layers.1.weight"
    torch.testing.assert_close(tuned.checkpoint(1)["model"][body], source.checkpoint(1)["model"][body])
    assert tuned.checkpoint(1)["model"]["layers.3.weight"].shape == (6, 16)


def test_gradient_clipping_bounds_every_step(tmp_path):
    # Plain SGD: each step moves the weights by lr x (clipped) gradient, so with a clip of c the
    # whole model moves at most steps x lr x c; unclipped it moves much further.
    sgd = {"name": "sgd", "lr": 0.1, "momentum": 0.0}
    start = run_locally(tmp_path, "start", mlp_spec(optimizer={**sgd, "lr": 1e-12})).checkpoint(1)["model"]
    clipped = run_locally(tmp_path, "clipped", mlp_spec(optimizer=sgd, grad_clip_norm=0.01)).checkpoint(1)["model"]
    free = run_locally(tmp_path, "free", mlp_spec(optimizer=sgd)).checkpoint(1)["model"]

    def distance(weights):
        return math.sqrt(sum(float(((weights[key] - start[key]) ** 2).sum()) for key in start))

    assert distance(clipped) <= 8 * 0.1 * 0.01 * (1 + 1e-4)  # 8 steps of at most lr x 0.01
    assert distance(free) > 10 * distance(clipped)


def checkpoint_events(run) -> list[dict]:
    lines = (run.workdir / "runs" / run.job_id / "events.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    return [event["data"] for event in events if event["kind"] == "checkpoint"]


@pytest.mark.parametrize("metric, mode", [("val_accuracy", "max"), ("train_loss", "min")])
def test_the_objective_marks_the_best_epochs_and_each_checkpoint_carries_its_value(tmp_path, metric, mode):
    objective = {"metric": metric, "mode": mode}
    spec = mlp_spec(epochs=6, objective=objective, checkpoint={"every_epochs": 1, "keep_last": 9})
    run = run_locally(tmp_path, "objective", spec)
    assert (run.outcome.state, run.outcome.stop_reason) == ("succeeded", "completed"), run.outcome
    values = [row[metric] for row in run.metrics]
    better = (lambda a, b: a > b) if mode == "max" else (lambda a, b: a < b)
    expected_best = [epoch for epoch in range(1, 7) if all(better(values[epoch - 1], v) for v in values[: epoch - 1])]
    saved = checkpoint_events(run)
    assert [(c["epoch"], c["objective"]) for c in saved] == [(epoch, values[epoch - 1]) for epoch in range(1, 7)]
    assert [c["epoch"] for c in saved if c["is_best"]] == expected_best
    assert len(expected_best) >= 2  # the run improved more than once: the direction was tested


def stop_epoch(values: list[float], mode: str, patience: int, epochs: int) -> int:
    """The epoch the early-stopping rule ends a run at, replayed over its figures."""
    best, waited = None, 0
    for epoch, value in enumerate(values, start=1):
        if best is None or (value > best if mode == "max" else value < best):
            best, waited = value, 0
        else:
            waited += 1
        if waited >= patience and epoch < epochs:
            return epoch
    return epochs


def test_early_stopping_watches_the_objective_in_its_direction(tmp_path):
    spec = mlp_spec(epochs=8, objective={"metric": "val_accuracy", "mode": "max"}, early_stopping={"patience": 2})
    run = run_locally(tmp_path, "early-max", spec)
    accuracy = [row["val_accuracy"] for row in run.metrics]
    ran = len(accuracy)
    assert ran == stop_epoch(accuracy, "max", 2, 8)
    assert run.outcome.stop_reason == ("completed" if ran == 8 else "early_stopping")
    assert ran != stop_epoch(accuracy, "min", 2, 8)  # the run tells the two directions apart
