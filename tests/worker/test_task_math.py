"""A model's own loss and figures (worker/trainer/task.py) through the real trainer and DDP ranks:
accumulation k equals a batch k times bigger and 2 ranks of b equal 1 rank of 2b, for a mean loss
and a token-weighted (sum, count) one; the objective on a custom figure; torchmetrics synced over
the ranks; a resume inside an epoch that stays bit-identical; and the loss's errors, each named."""

import pytest
import torch
import torch.nn.functional as F
from torchmetrics.functional.classification import multiclass_f1_score

from tests.worker.local_training import assert_same_weights, preempt_in_process, run_locally
from tests.worker.test_training_math import checkpoint_events, stop_epoch

pytestmark = pytest.mark.usefixtures("plugin_installed", "own_task_installed")

REGRESSION = {
    "model": {"name": "regressor", "params": {"dims": 4, "hidden": 8}},
    "data": {"name": "linear-targets", "params": {"num_samples": 80, "dims": 4, "val_fraction": 0.2}},
}
# Sequences of 2 to 12 real tokens: each micro-batch counts a different number of them.
SEQUENCES = {
    "model": {"name": "token-model", "params": {"vocabulary": 8, "width": 16}},
    "data": {
        "name": "masked-sequences",
        "params": {"num_samples": 80, "max_length": 12, "vocabulary": 8, "val_fraction": 0.2},
    },
}
TASKS = {"mse-with-mae": (REGRESSION, "mae"), "tokens-sum-count": (SEQUENCES, "token_accuracy")}


def task_spec(task: dict, **overrides) -> dict:
    spec = {
        **task,
        "device": "cpu",
        "gpus": 1,
        "epochs": 2,
        "batch_size": 8,
        "optimizer": {"name": "sgd", "lr": 0.05, "momentum": 0.9},
        "lr_scaling": "none",
    }
    return {**spec, **overrides}


def figures(run, metric: str) -> list[list[float]]:
    names = ("train_loss", f"train_{metric}", "val_loss", f"val_{metric}")
    return [[row[name] for name in names] for row in run.metrics]


def assert_same_figures(first, second, metric: str) -> None:
    torch.testing.assert_close(
        torch.tensor(figures(first, metric), dtype=torch.float64),
        torch.tensor(figures(second, metric), dtype=torch.float64),
        rtol=1e-6,
        atol=0,
    )


@pytest.mark.parametrize("task", TASKS, ids=list(TASKS))
def test_accumulating_2_micro_batches_equals_one_batch_twice_as_big_for_an_own_loss(tmp_path, task):
    spec, metric = TASKS[task]
    accumulated = run_locally(tmp_path, "accumulated", task_spec(spec, batch_size=4, accumulation_steps=2))
    large = run_locally(tmp_path, "large", task_spec(spec, batch_size=8))
    assert accumulated.outcome.state == large.outcome.state == "succeeded", accumulated.outcome.error
    assert_same_weights(accumulated.checkpoint(2)["model"], large.checkpoint(2)["model"], rtol=1e-6)
    assert_same_figures(accumulated, large, metric)
    assert figures(large, metric)[1][0] < figures(large, metric)[0][0]  # it learned: the comparison says something


@pytest.mark.parametrize("task", TASKS, ids=list(TASKS))
def test_two_ranks_of_batch_b_equal_one_rank_of_batch_2b_for_an_own_loss(tmp_path, task):
    spec, metric = TASKS[task]
    two = run_locally(tmp_path, "two-ranks", task_spec(spec, gpus=2, batch_size=4))
    one = run_locally(tmp_path, "one-rank", task_spec(spec, batch_size=8))
    assert two.outcome.state == one.outcome.state == "succeeded", two.outcome.error
    assert_same_weights(two.checkpoint(2)["model"], one.checkpoint(2)["model"], rtol=1e-6)
    assert_same_figures(two, one, metric)


def test_a_token_weighted_loss_is_not_the_mean_of_its_micro_batches_means(tmp_path):
    """What the (sum, count) pair is for: the same run with the loss a plain per-batch mean (each
    batch weighted by its samples, not its tokens) reports another figure."""
    run = run_locally(tmp_path, "tokens", task_spec(SEQUENCES, epochs=1))
    assert run.outcome.state == "succeeded", run.outcome.error
    from owntask.sequences import MaskedSequences, TokenModel

    from trainjobs.worker.trainer.data.split import split_train_val

    _train, val = split_train_val(
        MaskedSequences({"num_samples": 80, "max_length": 12, "vocabulary": 8, "seed": 0}), 0.2, 0
    )
    model = TokenModel(8, 16)
    model.load_state_dict(run.checkpoint(1)["model"])
    tokens = torch.stack([val[i][0] for i in range(len(val))])
    targets = torch.stack([val[i][1][0] for i in range(len(val))])
    mask = torch.stack([val[i][1][1] for i in range(len(val))]).float()
    with torch.no_grad():
        per_token = F.cross_entropy(model(tokens).flatten(0, 1), targets.flatten(), reduction="none").reshape(
            mask.shape
        )
    token_weighted = ((per_token * mask).sum() / mask.sum()).item()
    sample_weighted = ((per_token * mask).sum(dim=1) / mask.sum(dim=1)).mean().item()
    assert run.metrics[0]["val_loss"] == pytest.approx(token_weighted, rel=1e-5)
    assert abs(token_weighted - sample_weighted) > 1e-3


@pytest.mark.parametrize(("metric", "mode"), [("val_mae", "min"), ("val_mae", "max")])
def test_the_objective_on_an_own_figure_marks_the_best_epochs_in_its_direction(tmp_path, metric, mode):
    spec = task_spec(REGRESSION, epochs=5, objective={"metric": metric, "mode": mode}, checkpoint={"keep_last": 9})
    run = run_locally(tmp_path, "objective", spec)
    assert run.outcome.state == "succeeded", run.outcome.error
    values = [row[metric] for row in run.metrics]
    better = (lambda a, b: a > b) if mode == "max" else (lambda a, b: a < b)
    expected_best = [epoch for epoch in range(1, 6) if all(better(values[epoch - 1], v) for v in values[: epoch - 1])]
    saved = checkpoint_events(run)
    assert [(c["epoch"], c["objective"]) for c in saved] == [(epoch, values[epoch - 1]) for epoch in range(1, 6)]
    assert [c["epoch"] for c in saved if c["is_best"]] == expected_best


def test_early_stopping_stops_on_an_own_figure_in_its_direction(tmp_path):
    spec = task_spec(
        REGRESSION, epochs=8, objective={"metric": "val_mae", "mode": "max"}, early_stopping={"patience": 2}
    )
    run = run_locally(tmp_path, "early", spec)
    mae = [row["val_mae"] for row in run.metrics]
    assert len(mae) == stop_epoch(mae, "max", 2, 8)
    assert len(mae) != stop_epoch(mae, "min", 2, 8)  # the run tells the two directions apart


def test_a_torchmetrics_f1_over_two_ranks_equals_the_f1_of_the_whole_validation_set(tmp_path):
    spec = task_spec(
        {
            "model": {"name": "f1-classifier", "params": {}},
            "data": {"name": "blobs", "params": {"num_samples": 203, "dims": 5, "classes": 3, "val_fraction": 0.3}},
        },
        gpus=2,
        epochs=1,
        batch_size=7,  # validation shards of 31 and 30: batches of uneven size on each rank
    )
    run = run_locally(tmp_path, "f1", spec)
    assert run.outcome.state == "succeeded", run.outcome.error
    from trainjobs_example_plugin.build import blobs

    from trainjobs.worker.trainer.data.split import split_train_val

    _train, val = split_train_val(blobs({"num_samples": 203, "dims": 5, "classes": 3, "seed": 0}, None), 0.3, 0)
    points = torch.stack([val[i][0] for i in range(len(val))])
    labels = torch.stack([val[i][1] for i in range(len(val))])
    model = torch.nn.Linear(5, 3)
    model.load_state_dict(run.checkpoint(1)["model"])
    with torch.no_grad():
        expected = multiclass_f1_score(model(points).argmax(dim=1), labels, num_classes=3, average="macro").item()
    assert run.metrics[0]["val_f1"] == pytest.approx(expected, rel=1e-6)
    assert "train_f1" not in run.metrics[0]  # a torchmetrics figure is the validation set's


@pytest.mark.parametrize("task", TASKS, ids=list(TASKS))
def test_an_own_loss_preempted_inside_an_epoch_resumes_bit_identical(tmp_path, task):
    spec, metric = TASKS[task]
    spec = task_spec(spec, batch_size=4, accumulation_steps=2, epochs=2)  # 8 optimizer steps an epoch
    straight = run_locally(tmp_path, "straight", spec)
    checkpoint = preempt_in_process(tmp_path, "victim", spec, steps=10)  # epoch 1 asks 7 times: 3 steps into epoch 2
    assert checkpoint.endswith("victim-e0001-s000003.pt")
    resumed = run_locally(tmp_path, "resumed", spec, resume_path=checkpoint)
    assert straight.outcome.state == resumed.outcome.state == "succeeded", resumed.outcome.error
    expected, weights = straight.checkpoint(2)["model"], resumed.checkpoint(2)["model"]
    assert all(torch.equal(expected[name], weights[name]) for name in expected)
    assert figures(resumed, metric) == figures(straight, metric)[1:]  # epoch 2, counted once


BROKEN = {
    "undeclared": "returned ['surprise'], which its entry does not declare",
    "missing": "declares ['declared'] but did not return them",
    "non_scalar": "loss is a float32 tensor (shape (8,)): return a scalar float tensor",
    "non_finite": "loss is not finite at epoch 1, step 1 of 8: trainjobs_example_plugin.tasks:broken_loss returned inf",
    "no_grad": "has no grad",
    "not_a_number": "'declared' is a str (high): return a number",
}


@pytest.mark.parametrize("mode", BROKEN, ids=list(BROKEN))
def test_a_loss_that_breaks_the_contract_fails_the_job_naming_the_function_and_the_value(tmp_path, mode):
    spec = task_spec(
        {
            "model": {"name": "broken-loss", "params": {"mode": mode}},
            "data": {"name": "blobs", "params": {"num_samples": 80, "dims": 5, "classes": 3, "val_fraction": 0.2}},
        },
        epochs=1,
    )
    run = run_locally(tmp_path, mode, spec)
    assert (run.outcome.state, run.outcome.stop_reason) == ("failed", "error")
    assert "trainjobs_example_plugin.tasks:broken_loss" in run.outcome.error
    assert BROKEN[mode] in run.outcome.error, run.outcome.error
