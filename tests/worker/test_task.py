"""The task's pieces on their own (worker/trainer/task.py): batches of any nesting reach the
device, a batch's size, what a loss may return and how each value becomes a (sum, count) pair."""

import pytest
import torch
from torch import nn

from trainjobs.contract.catalog import ModelEntry, ModelParams
from trainjobs.worker.trainer.task import FigureSums, Task, TaskError, batch_size, means, to_device


def test_every_tensor_of_a_nested_batch_is_moved_and_only_4d_ones_take_the_memory_format():
    images, mask = torch.zeros(2, 3, 4, 5), torch.ones(2, 7, dtype=torch.bool)
    batch = {"inputs": [images, (mask, "a name")], "ids": torch.arange(2)}
    moved = to_device(batch, torch.device("cpu"), torch.channels_last)
    assert moved["inputs"][0].is_contiguous(memory_format=torch.channels_last)
    assert isinstance(moved["inputs"], list) and isinstance(moved["inputs"][1], tuple)
    assert moved["inputs"][1][1] == "a name" and torch.equal(moved["inputs"][1][0], mask)
    assert torch.equal(moved["ids"], torch.arange(2))


def test_a_batch_s_size_is_the_first_dimension_of_its_first_tensor():
    assert batch_size(({"text": ["a", "b", "c"], "tokens": torch.zeros(3, 9)}, torch.zeros(5))) == 3
    with pytest.raises(LookupError, match="without a tensor"):
        batch_size({"text": ["a"]})


def task(returned, metrics=("mae",)) -> Task:
    return Task(lambda model, batch: returned, "pkg.mod:loss", ("loss", *metrics), ("loss", *metrics))


def loss_with_grad(value: float = 2.0) -> torch.Tensor:
    return torch.tensor(value, requires_grad=True) * 1.0


BATCH = (torch.zeros(4, 2), torch.zeros(4))


def test_a_mean_counts_as_its_value_times_the_batch_size_and_a_pair_as_itself():
    result = task({"loss": loss_with_grad(2.0), "mae": (torch.tensor(6.0), 3)}).step(
        nn.Identity(), BATCH, training=True
    )
    assert result.loss_count is None and result.loss.item() == 2.0
    assert [value.item() for value in result.figures["loss"]] == [8.0, 4.0]
    assert [value.item() for value in result.figures["mae"]] == [6.0, 3.0]
    summed = task({"loss": (loss_with_grad(9.0), torch.tensor(3)), "mae": 0.5}).step(nn.Identity(), BATCH, True)
    assert summed.loss_count is not None and summed.loss_count.item() == 3.0
    assert [value.item() for value in summed.figures["mae"]] == [2.0, 4.0]


@pytest.mark.parametrize(
    ("returned", "message"),
    [
        ([1.0], "returned a list: return a tensor or a dict"),
        ({"mae": 1.0}, "a dict needs 'loss'"),
        ({"loss": loss_with_grad(), "mae": 1.0, "rmse": 2.0}, "returned ['rmse'], which its entry does not declare"),
        ({"loss": loss_with_grad()}, "declares ['mae'] but did not return them"),
        ({"loss": torch.zeros(3, requires_grad=True), "mae": 1.0}, "shape (3,)"),
        ({"loss": torch.tensor(1), "mae": 1.0}, "return a scalar float tensor"),
        ({"loss": torch.tensor(1.5), "mae": 1.0}, "has no grad"),
        ({"loss": loss_with_grad(), "mae": torch.zeros(2)}, "'mae' is a float32 tensor (shape (2,))"),
        ({"loss": loss_with_grad(), "mae": True}, "'mae' is a bool (True): return a number"),
        ({"loss": loss_with_grad(), "mae": (1.0, "many")}, "'mae' count is a str (many)"),
    ],
    ids=["list", "no-loss", "undeclared", "missing", "non-scalar", "integer", "no-grad", "vector", "bool", "count"],
)
def test_what_a_loss_may_not_return_fails_naming_the_function_and_the_value(returned, message):
    with pytest.raises(TaskError, match="pkg.mod:loss") as raised:
        task(returned).step(nn.Identity(), BATCH, training=True)
    assert message in str(raised.value)


def test_a_loss_without_grad_is_fine_in_evaluation():
    result = task({"loss": torch.tensor(1.5), "mae": 1.0}).step(nn.Identity(), BATCH, training=False)
    assert result.figures["loss"][0].item() == 6.0


def test_figure_sums_add_the_earlier_steps_and_a_figure_without_counts_is_nan():
    sums = FigureSums(("loss", "mae"), torch.device("cpu"), earlier={"loss": [1.0, 1.0]}, earlier_samples=1)
    sums.add({"loss": (torch.tensor(5.0), torch.tensor(3.0)), "mae": (torch.tensor(0.0), torch.tensor(0.0))}, 3)
    totals, samples = sums.over_ranks()
    assert (totals, samples) == ({"loss": [6.0, 4.0], "mae": [0.0, 0.0]}, 4)
    figures = means(totals)
    assert figures["loss"] == 1.5 and figures["mae"] != figures["mae"]  # NaN: the job fails naming it


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"metrics": ("mae",)}, "give loss= too"),
        ({"loss": "m:f", "metrics": ("Bad-Name",)}, "'Bad-Name'"),
        ({"loss": "m:f", "metrics": ("loss",)}, "and not 'loss'"),
        ({"loss": "m:f", "metrics": ("a", "a")}, "repeat a name"),
        ({"loss": "m:f", "metrics": tuple(f"m{index}" for index in range(17))}, "at most 16"),
        ({"loss": "m:f", "metrics": ["mae"]}, "a tuple"),
    ],
)
def test_a_model_entry_s_task_is_checked_when_the_entry_is_made(options, message):
    with pytest.raises(ValueError, match="") as raised:
        ModelEntry(ModelParams, "m:build", **options)
    assert message in str(raised.value)


def test_a_model_entry_with_its_own_loss_reports_train_and_val_of_each_name():
    entry = ModelEntry(ModelParams, "m:build", loss="m:loss", metrics=("mae",))
    assert entry.figures == ("train_loss", "train_mae", "val_loss", "val_mae")
    assert ModelEntry(ModelParams, "m:build").figures == ("train_loss", "val_loss", "val_accuracy")
