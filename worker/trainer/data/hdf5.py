"""Preprocessed audio: mu-law clips packed into HDF5 once (`trainjobs data pack`), so an epoch
reads integers and decodes nothing."""

from __future__ import annotations

from pathlib import Path

import torch

from trainjobs.worker.trainer.data.folders import CodeClips, wav_clips
from trainjobs.worker.trainer.data.paths import inside_data_root


def pack_wav_folder(root: Path, output: Path, length: int, mu: int) -> int:
    """Write every clip of the folder to `output` (dataset "codes", attribute "mu"); return the count."""
    import h5py

    codes = wav_clips(root, length, mu)
    output.parent.mkdir(parents=True, exist_ok=True)
    temporary = output.with_suffix(".tmp")
    with h5py.File(temporary, "w") as file:
        dtype = "uint8" if mu <= 256 else "uint16"
        file.create_dataset("codes", data=codes.numpy().astype(dtype), compression="gzip")
        file.attrs["mu"] = mu
        file.attrs["length"] = length
    temporary.replace(output)
    return codes.shape[0]


def build(params: dict, data_root: Path) -> CodeClips:
    import h5py

    with h5py.File(inside_data_root(data_root, params["path"]), "r") as file:
        mu = int(file.attrs["mu"])
        if params["mu"] is not None and params["mu"] != mu:
            raise ValueError(f"data.params.mu is {params['mu']} but the file was packed with mu={mu}")
        codes = torch.from_numpy(file["codes"][:].astype("int64"))
    return CodeClips(codes, mu)
