import pytest

from trainjobs.contract.spec import SchedulerSpec
from trainjobs.worker.trainer.schedule import lr_factor


def test_warm_up_ramps_linearly_to_the_peak():
    spec = SchedulerSpec(name="cosine", warmup_epochs=2)
    assert [lr_factor(spec, 10, progress) for progress in (0, 0.5, 1, 1.5)] == [0, 0.25, 0.5, 0.75]
    assert lr_factor(spec, 10, 2) == pytest.approx(1.0)


def test_cosine_anneals_to_zero_at_the_last_epoch():
    spec = SchedulerSpec(name="cosine", warmup_epochs=0)
    assert lr_factor(spec, 10, 0) == 1.0
    assert lr_factor(spec, 10, 5) == pytest.approx(0.5)
    assert lr_factor(spec, 10, 10) == pytest.approx(0.0, abs=1e-12)


def test_step_decays_by_gamma_every_step_size_epochs_after_warm_up():
    spec = SchedulerSpec(name="step", warmup_epochs=1, step_size=2, gamma=0.5)
    assert [lr_factor(spec, 10, progress) for progress in (1, 2.9, 3, 5)] == [1.0, 1.0, 0.5, 0.25]


def test_no_scheduler_keeps_the_peak():
    assert lr_factor(SchedulerSpec(), 10, 7.3) == 1.0


def test_rotation_keeps_the_newest_n_and_the_best():
    from datetime import UTC, datetime

    from trainjobs.contract.events import CheckpointRecord
    from trainjobs.worker.trainer.checkpoints import to_remove

    def record(epoch: int) -> CheckpointRecord:
        return CheckpointRecord(
            id=f"j-e{epoch}",
            epoch=epoch,
            size_bytes=1,
            sha256="0" * 64,
            is_best=False,
            created_at=datetime.now(UTC),
            path=f"j/{epoch}.pt",
        )

    kept = [record(epoch) for epoch in range(1, 6)]
    assert [r.epoch for r in to_remove(kept, keep_last=2, best_id="j-e2")] == [1, 3]
    assert [r.epoch for r in to_remove(kept, keep_last=2, best_id="j-e5")] == [1, 2, 3]
    assert to_remove(kept, keep_last=5, best_id=None) == []
