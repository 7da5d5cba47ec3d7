"""The file-backed datasets, on files the tests write under a data root."""

import math
import wave

import numpy as np
import pytest
import torch
from PIL import Image

from trainjobs.contract.spec import JobSpec
from trainjobs.worker.trainer.catalog import build_datasets, build_model
from trainjobs.worker.trainer.data.hdf5 import pack_wav_folder
from trainjobs.worker.trainer.data.mulaw import mulaw_decode, mulaw_encode


def write_wav(path, seconds=0.5, rate=8000, frequency=440.0):
    t = np.arange(int(seconds * rate)) / rate
    samples = (0.5 * np.sin(2 * math.pi * frequency * t) * 32767).astype("<i2")
    with wave.open(str(path), "wb") as file:
        file.setnchannels(1)
        file.setsampwidth(2)
        file.setframerate(rate)
        file.writeframes(samples.tobytes())


def spec_params(data: dict, model: dict) -> JobSpec:
    return JobSpec.model_validate(
        {
            "model": model,
            "data": data,
            "device": "cpu",
            "epochs": 1,
            "batch_size": 2,
            "optimizer": {"name": "sgd", "lr": 0.1},
        }
    )


def test_mu_law_round_trips_within_one_quantisation_step():
    audio = torch.linspace(-1, 1, 1001)
    codes = mulaw_encode(audio, 256)
    assert codes.min() == 0 and codes.max() == 255
    assert (mulaw_decode(codes, 256) - audio).abs().max() < 0.03


def test_an_image_folder_gives_one_class_per_sub_folder_and_sizes_the_model(tmp_path):
    for label, colour in (("cats", (255, 0, 0)), ("dogs", (0, 0, 255))):
        (tmp_path / "pets" / label).mkdir(parents=True)
        for index in range(3):
            Image.new("RGB", (20, 10), colour).save(tmp_path / "pets" / label / f"{index}.png")
    spec = spec_params(
        {"name": "image-folder", "params": {"root": "pets", "image_size": 8, "val_fraction": 0.3}}, {"name": "mlp"}
    )
    assert spec.model.params["num_classes"] is None  # the API cannot know; the worker fills it
    full, train, val = build_datasets(spec.data.name, spec.data.params, tmp_path)
    assert (len(full), len(train), len(val), full.num_classes) == (6, 4, 2, 2)
    image, label = full[0]
    assert image.shape == (3, 8, 8) and label == 0 and image[0].mean() == 1.0
    model = build_model(spec.model.name, spec.model.params, full)
    assert model(image[None]).shape == (1, 2)


def test_a_wav_folder_is_cut_into_mu_law_clips_and_packs_to_the_same_hdf5(tmp_path):
    (tmp_path / "speech").mkdir()
    for index in range(2):
        write_wav(tmp_path / "speech" / f"{index}.wav", frequency=300 + 100 * index)
    data = {"root": "speech", "length": 99, "mu": 64}
    spec = spec_params({"name": "wav-folder", "params": data}, {"name": "wavenet", "params": {"n_residue": 4}})
    full, _, _ = build_datasets("wav-folder", spec.data.params, tmp_path)
    assert len(full) == 2 * (4000 // 100)
    inputs, targets = full[0]
    assert inputs.shape == targets.shape == (99,) and torch.equal(inputs[1:], targets[:-1])

    clips = pack_wav_folder(tmp_path / "speech", tmp_path / "packed" / "speech.h5", length=99, mu=64)
    assert clips == len(full)
    packed_spec = spec_params({"name": "hdf5", "params": {"path": "packed/speech.h5"}}, {"name": "wavenet"})
    packed, _, _ = build_datasets("hdf5", packed_spec.data.params, tmp_path)
    assert packed.mu == 64 and len(packed) == len(full)
    assert all(torch.equal(packed[index][0], full[index][0]) for index in range(len(full)))
    assert build_model("wavenet", packed_spec.model.params, packed).mu == 64


@pytest.mark.parametrize("root", ["../outside", "/etc", "a/../../outside"])
def test_a_path_outside_the_data_root_is_refused_at_submit(root):
    with pytest.raises(ValueError, match="data.params.root: .*inside TRAINJOBS_DATA_ROOT"):
        spec_params({"name": "image-folder", "params": {"root": root}}, {"name": "mlp"})


def test_a_symlink_out_of_the_data_root_is_refused_by_the_worker(tmp_path):
    outside = tmp_path / "outside"
    (outside / "a").mkdir(parents=True)
    root = tmp_path / "root"
    root.mkdir()
    (root / "escape").symlink_to(outside)
    spec = spec_params({"name": "image-folder", "params": {"root": "escape"}}, {"name": "mlp"})
    with pytest.raises(PermissionError, match="outside TRAINJOBS_DATA_ROOT"):
        build_datasets(spec.data.name, spec.data.params, root)


@pytest.mark.parametrize("link", ["file", "class-folder"])
def test_a_symlink_inside_an_image_folder_that_leads_out_of_the_data_root_is_refused(tmp_path, link):
    outside = tmp_path / "outside"
    outside.mkdir()
    Image.new("RGB", (4, 4)).save(outside / "secret.png")
    root = tmp_path / "root"
    for label in ("cats", "dogs"):
        (root / "pets" / label).mkdir(parents=True)
        Image.new("RGB", (4, 4)).save(root / "pets" / label / "0.png")
    if link == "file":
        (root / "pets" / "cats" / "1.png").symlink_to(outside / "secret.png")
    else:
        (root / "pets" / "owls").symlink_to(outside)
    spec = spec_params({"name": "image-folder", "params": {"root": "pets", "image_size": 4}}, {"name": "mlp"})
    with pytest.raises(PermissionError, match="outside TRAINJOBS_DATA_ROOT"):
        build_datasets(spec.data.name, spec.data.params, root)


def test_a_symlinked_wav_inside_a_wav_folder_that_leads_out_of_the_data_root_is_refused(tmp_path):
    outside, root = tmp_path / "outside", tmp_path / "root"
    outside.mkdir()
    (root / "speech").mkdir(parents=True)
    write_wav(root / "speech" / "0.wav")
    write_wav(outside / "secret.wav")
    (root / "speech" / "1.wav").symlink_to(outside / "secret.wav")
    spec = spec_params({"name": "wav-folder", "params": {"root": "speech", "length": 99}}, {"name": "wavenet"})
    with pytest.raises(PermissionError, match="outside TRAINJOBS_DATA_ROOT"):
        build_datasets(spec.data.name, spec.data.params, root)
