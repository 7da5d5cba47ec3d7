"""A worker's old attempt folders go; recent ones, and what is not an attempt's, stay."""

from __future__ import annotations

import os
import time

from trainjobs.worker.run_folders import remove_old

DAY = 86400


def attempt_folder(run_path, job: str, attempt: int, age_days: float):
    folder = run_path / job / f"attempt{attempt}"
    folder.mkdir(parents=True)
    log = folder / "launcher.log"
    log.write_text("done\n")
    then = time.time() - age_days * DAY
    for path in (log, folder):
        os.utime(path, (then, then))
    return folder


def test_attempt_folders_untouched_for_the_keep_time_are_removed_and_the_rest_kept(tmp_path):
    old = attempt_folder(tmp_path, "jold", 1, age_days=10)
    recent = attempt_folder(tmp_path, "jnew", 1, age_days=1)
    older_attempt = attempt_folder(tmp_path, "jboth", 1, age_days=10)
    running = attempt_folder(tmp_path, "jboth", 2, age_days=10)
    (running / "rank0.log").write_text("still writing\n")  # written just now
    (tmp_path / "slots" / "jx-a1").mkdir(parents=True)  # not an attempt folder

    assert remove_old(tmp_path, keep_seconds=7 * DAY) == 2
    assert not old.exists() and not (tmp_path / "jold").exists()
    assert recent.exists() and running.exists() and not older_attempt.exists()
    assert (tmp_path / "slots" / "jx-a1").exists()
