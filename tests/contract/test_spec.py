import subprocess
import sys

import pytest
from pydantic import ValidationError

from devstack import tiny_wavenet_spec
from trainjobs.contract.spec import JobSpec


def test_defaults_are_filled_and_model_params_follow_the_dataset():
    spec = JobSpec.model_validate(tiny_wavenet_spec())
    assert spec.model.params["mu"] == 32  # from synthetic-audio's mu
    assert spec.data.params["val_fraction"] == 0.1
    assert spec.strategy == "ddp" and spec.precision == "fp32" and spec.accumulation_steps == 1
    dumped = spec.model_dump(mode="json")
    assert dumped["scheduler"] == {"name": "none", "warmup_epochs": 0}
    assert dumped["checkpoint"] == {"every_epochs": 1, "keep_last": 3}
    assert dumped["objective"] == {"metric": "val_loss", "mode": "min"}
    assert JobSpec.model_validate(dumped) == spec  # a stored spec reads back unchanged


def test_mlp_takes_input_and_class_counts_from_the_dataset():
    spec = JobSpec.model_validate(tiny_wavenet_spec(model={"name": "mlp"}, data={"name": "digits"}))
    assert spec.model.params == {"hidden": [64], "in_features": 64, "num_classes": 10}


def test_effective_values_follow_the_scaling_rules():
    base = tiny_wavenet_spec(gpus=2, accumulation_steps=4, batch_size=8, optimizer={"name": "sgd", "lr": 0.1})
    assert JobSpec.model_validate({**base, "lr_scaling": "linear"}).effective_lr == pytest.approx(0.8)
    assert JobSpec.model_validate({**base, "lr_scaling": "sqrt"}).effective_lr == pytest.approx(0.1 * 8**0.5)
    assert JobSpec.model_validate({**base, "lr_scaling": "none"}).effective_lr == pytest.approx(0.1)
    assert JobSpec.model_validate(base).global_batch_size == 64


@pytest.mark.parametrize(
    "change, names",
    [
        ({"surprise": 1}, "surprise"),
        ({"model": {"name": "gpt9"}}, "model.name"),
        ({"model": {"name": "wavenet", "params": {"n_layers": 3}}}, "model.params.n_layers"),
        ({"model": {"name": "wavenet", "params": {"mu": 64}}}, "model.params.mu"),
        ({"data": {"name": "imagenet"}}, "data.name"),
        ({"gpus": 0}, "gpus"),
        ({"batch_size": -1}, "batch_size"),
        ({"precision": "fp8"}, "precision"),
        ({"epochs": "3"}, "epochs"),
        ({"precision": "fp16"}, "precision"),  # cpu has no fp16 path: refused at submit
        ({"strategy": "dp"}, "strategy"),  # DataParallel is cuda-only
        ({"model": {"name": "mlp"}}, "model.name"),  # mlp on audio data
        ({"objective": {"metric": "val_f1"}}, "objective.metric"),  # wavenet reports no val_f1
        ({"objective": {"metric": "f1"}}, "objective.metric"),  # neither val_ nor train_
        ({"objective": {"metric": "val_accuracy", "mode": "up"}}, "objective.mode"),
    ],
)
def test_bad_specs_are_refused_naming_the_field(change, names):
    with pytest.raises(ValidationError) as raised:
        JobSpec.model_validate({**tiny_wavenet_spec(), **change})
    assert names in str(raised.value)


def test_the_contract_and_the_api_import_no_torch():
    code = (
        "import sys, trainjobs.contract.spec, trainjobs.contract.events, trainjobs.service.api.app; "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_an_installed_model_with_its_own_loss_takes_an_objective_on_its_declared_figures(own_task_installed):
    regression = tiny_wavenet_spec(
        model={"name": "regressor"}, data={"name": "linear-targets"}, objective={"metric": "val_mae", "mode": "min"}
    )
    assert JobSpec.model_validate(regression).objective.metric == "val_mae"
    with pytest.raises(ValidationError) as refused:
        JobSpec.model_validate({**regression, "objective": {"metric": "val_accuracy"}})
    assert "objective.metric" in str(refused.value) and "train_mae" in str(refused.value)
