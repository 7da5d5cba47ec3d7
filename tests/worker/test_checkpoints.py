"""The checkpointer: what it writes, keeps, rotates out and reports, over the local storage."""

import torch

from trainjobs.contract.events import CheckpointRecord, CheckpointRemoved
from trainjobs.worker.trainer.checkpoints import Checkpointer, storage_at


def test_it_keeps_the_newest_n_and_the_best_and_reports_each_change(tmp_path):
    reported = []
    checkpointer = Checkpointer(storage_at(tmp_path), "j1", 1, keep_last=1, report=reported.append)
    for epoch, is_best in ((1, True), (2, False), (3, False)):
        checkpointer.save(epoch, {"epoch": epoch, "weights": torch.full((2,), float(epoch))}, is_best=is_best)

    assert sorted(path.name for path in (tmp_path / "j1" / "a1").iterdir()) == ["j1-e0001.pt", "j1-e0003.pt"]
    assert [type(event).__name__ for event in reported] == [
        "CheckpointRecord",
        "CheckpointRecord",
        "CheckpointRecord",
        "CheckpointRemoved",
    ]
    assert reported[-1] == CheckpointRemoved(id="j1-e0002")
    record = reported[2]
    assert isinstance(record, CheckpointRecord) and record.size_bytes == (tmp_path / record.path).stat().st_size
    state = torch.load(tmp_path / record.path, weights_only=True)
    assert state["format_version"] == 1 and state["epoch"] == 3


def test_a_resume_into_another_job_keeps_none_of_the_source_job_s_checkpoints(tmp_path):
    source = Checkpointer(storage_at(tmp_path), "source", 1, keep_last=2, report=lambda event: None)
    source.save(1, {}, is_best=True)
    source.save(2, {}, is_best=False)
    state = source.state_dict()

    same_job, new_job = (Checkpointer(storage_at(tmp_path), job, 1, 2, report=None) for job in ("source", "other"))
    same_job.load_state_dict(state)
    new_job.load_state_dict(state)
    assert ([r.id for r in same_job.kept], same_job.best_id) == (["source-e0001", "source-e0002"], "source-e0001")
    assert (new_job.kept, new_job.best_id) == ([], None)


def test_a_write_that_fails_leaves_no_object_and_reports_nothing(tmp_path, s3_server, monkeypatch):
    import secrets

    import pytest

    for key, value in s3_server.env.items():
        monkeypatch.setenv(key, value)
    prefix = secrets.token_hex(4)
    for location in (tmp_path / "store", f"s3://{s3_server.bucket}/{prefix}"):
        reported = []
        checkpointer = Checkpointer(storage_at(location), "j1", 1, keep_last=2, report=reported.append)
        with pytest.raises(Exception, match="pickle|Can't"):
            checkpointer.save(1, {"model": lambda: None}, is_best=True)  # torch.save fails part-way
        assert reported == [] and checkpointer.kept == []
    assert not list((tmp_path / "store").rglob("*.pt*"))
    assert s3_server.objects(prefix) == {}
