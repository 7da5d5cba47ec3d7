import torch
from torch import nn

from trainjobs.worker.trainer.models.wavenet import WaveNet


def make() -> WaveNet:
    torch.manual_seed(0)
    return WaveNet(mu=16, n_residue=4, n_skip=8, dilation_depth=3, n_repeat=2)


def test_dilated_layers_are_registered_in_module_lists():
    model = make()
    assert isinstance(model.dilated_convs, nn.ModuleList) and len(model.dilated_convs) == 6
    assert [conv.dilation[0] for conv in model.dilated_convs] == [1, 2, 4, 1, 2, 4]
    names = {name for name, _ in model.named_parameters()}
    assert "dilated_convs.5.weight" in names and "skip_convs.5.weight" in names
    assert model.receptive_field == 1 + 2 * (1 + 2 + 4)


def test_output_at_time_t_depends_on_no_later_input():
    model = make().eval()
    codes = torch.randint(16, (1, 40))
    changed = codes.clone()
    changed[0, 25:] = (changed[0, 25:] + 1) % 16
    with torch.no_grad():
        before, after = model(codes), model(changed)
    assert before.shape == (1, 16, 40)
    assert torch.equal(before[..., :25], after[..., :25])
    assert not torch.equal(before[..., 25:], after[..., 25:])


def test_every_parameter_gets_a_gradient():
    model = make()
    codes = torch.randint(16, (2, 32))
    nn.functional.cross_entropy(model(codes[:, :-1]), codes[:, 1:]).backward()
    assert all(parameter.grad is not None for parameter in model.parameters())
