"""What the launcher tells the service about a failed rank, the heap settings its fork server
(so every rank) starts with, and how it sleeps on its worker while the ranks train."""

import json
import multiprocessing.connection
import os
import subprocess
import sys
import time

from tests.worker.local_training import mlp_spec
from trainjobs.contract.run import RunRequest
from trainjobs.contract.spec import JobSpec
from trainjobs.worker.launcher import RANK_MALLOC_ENV, ParentWatch
from trainjobs.worker.rank_files import without_server_paths


def test_a_job_s_error_names_files_without_the_server_s_absolute_paths():
    request = RunRequest(
        job_id="j1",
        attempt=1,
        spec=JobSpec.model_validate(mlp_spec()),
        run_dir="/srv/tj/runs/j1/attempt1",
        checkpoint_dir="/srv/tj/checkpoints",
        data_root="/srv/tj/data",
    )
    traceback = (
        'File "/opt/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", line 1, in _call_impl\n'
        "FileNotFoundError: /srv/tj/data/speech/0.wav; see /srv/tj/runs/j1/attempt1/rank0.log"
    )
    cleaned = without_server_paths(traceback, request)
    assert "/srv/" not in cleaned and "/opt/" not in cleaned
    assert 'File "module.py", line 1' in cleaned and "<data>/speech/0.wav" in cleaned and "<run>/rank0.log" in cleaned


FORK_SERVER_MALLOC = """
import json, os, time
from pathlib import Path
from trainjobs.worker.launcher import warm_up
warm_up()
deadline = time.monotonic() + 30  # the fork server's cmdline is ours until its exec (a busy host)
while time.monotonic() < deadline:
    for child in Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read_text().split():
        if b"multiprocessing.forkserver" in Path(f"/proc/{child}/cmdline").read_bytes():
            entries = Path(f"/proc/{child}/environ").read_bytes().split(b"\\0")
            pairs = [e.decode().split("=", 1) for e in entries if b"MALLOC" in e]
            print(json.dumps(dict(pairs)))
            raise SystemExit
    time.sleep(0.05)
"""


def run_fork_server(**env: str) -> dict[str, str]:
    base = {key: value for key, value in os.environ.items() if not key.startswith("MALLOC_")}
    result = subprocess.run(
        [sys.executable, "-c", FORK_SERVER_MALLOC], env={**base, **env}, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_ranks_are_forked_from_a_server_whose_heap_is_kept_and_an_operator_s_setting_wins():
    assert run_fork_server() == RANK_MALLOC_ENV
    assert run_fork_server(MALLOC_TRIM_THRESHOLD_="1234") == {**RANK_MALLOC_ENV, "MALLOC_TRIM_THRESHOLD_": "1234"}


def test_the_launcher_s_watch_on_its_worker_wakes_when_the_worker_exits_and_not_before():
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    watch = ParentWatch(worker.pid)
    try:
        assert watch.fds and watch.poll_seconds is None  # a pidfd to sleep on, no timer
        assert multiprocessing.connection.wait(watch.fds, timeout=0.2) == []
        worker.kill()
        assert multiprocessing.connection.wait(watch.fds, timeout=10) == watch.fds
    finally:
        watch.close()
        worker.kill()
        worker.wait()
    assert ParentWatch(None).fds == [] and not ParentWatch(None).gone()


def test_a_stop_signal_sent_while_a_launcher_still_imports_waits_for_its_handler(tmp_path):
    """A preemption that came while a fresh launcher was importing ended it (SIGUSR1's default
    action): the job failed with "launcher exited with code -10"."""
    from trainjobs.worker.supervision import LauncherPool, ask_to_stop

    pool = LauncherPool(tmp_path / "launchers.log", ready=1)
    pool.replenish()
    launcher = pool._waiting[0]
    ask_to_stop(launcher)  # at once: it has not imported torch yet
    time.sleep(8)  # past its imports and its handler
    try:
        assert launcher.poll() is None, (tmp_path / "launchers.log").read_text()
    finally:
        launcher.kill()
        launcher.wait()


RANK_DIES_IN_THE_FORK_SERVER = """
import json, sys
from pathlib import Path
import torch.multiprocessing as mp
from trainjobs.contract.run import RunRequest
from trainjobs.worker.launcher import warm_up
from trainjobs.worker.rank_outcome import failure_or_late_success
import shutil
warm_up()
extra = Path(sys.argv[1]) / "gone"
extra.mkdir()
(extra / "only_in_the_launcher.py").write_text("def train(local_rank):\\n    pass\\n")
sys.path.insert(0, str(extra))
import only_in_the_launcher
shutil.rmtree(extra)  # the rank, forked from the fork server, cannot import its target
context = mp.start_processes(only_in_the_launcher.train, nprocs=1, join=False, start_method="forkserver")
context.processes[0].join(60)
code = context.processes[0].exitcode
request = RunRequest.model_validate_json(sys.argv[2])
print(json.dumps({"code": code, "error": failure_or_late_success(request, 0, code).error}))
"""


def run_in_a_launcher_of_its_own(script: str, tmp_path) -> dict:
    """Run `script` (a launcher's steps, up to the error it would report) in a fresh Python for
    a one-rank job whose folder is `tmp_path`; what it printed last, as JSON."""
    request = RunRequest(
        job_id="j1",
        attempt=1,
        spec=JobSpec.model_validate(mlp_spec()),
        run_dir=str(tmp_path),
        checkpoint_dir=str(tmp_path / "store"),
        data_root=str(tmp_path / "data"),
    )
    done = subprocess.run(
        [sys.executable, "-P", "-c", script, str(tmp_path), request.model_dump_json()],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def test_a_rank_that_dies_in_the_fork_server_fails_its_job_with_the_reason(tmp_path):
    found = run_in_a_launcher_of_its_own(RANK_DIES_IN_THE_FORK_SERVER, tmp_path)
    assert found["code"] == 1
    error = found["error"]
    assert error.startswith("rank 0 failed (exit code 1) before its training started:"), error
    assert "No module named 'only_in_the_launcher'" in error.splitlines()[-1], error
    assert "No module named 'only_in_the_launcher'" in (tmp_path / "rank0.log").read_text()  # the job's logs


RANK_KILLED_IN_TRAINING_AFTER_A_NOISY_WARM_UP = """
import json, os, signal, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])  # before the fork server starts: it takes the import path then
Path(sys.argv[1], "sleeper.py").write_text("import time\\ndef train(local_rank):\\n    time.sleep(60)\\n")
import torch.multiprocessing as mp
import sleeper
from trainjobs.contract.run import RunRequest
from trainjobs.worker.fork_server_output import fork_server_log, fork_server_written
from trainjobs.worker.launcher import warm_up
from trainjobs.worker.rank_outcome import failure_or_late_success
warm_up()
with open(fork_server_log(), "a") as log:  # what a fork server may say as it imports
    log.write("UserWarning: a library's warning at import\\n")
before = fork_server_written()
context = mp.start_processes(sleeper.train, nprocs=1, join=False, start_method="forkserver")
os.kill(context.processes[0].pid, signal.SIGKILL)
context.processes[0].join(60)
code = context.processes[0].exitcode
request = RunRequest.model_validate_json(sys.argv[2])
print(json.dumps({"code": code, "error": failure_or_late_success(request, 0, code, before).error}))
"""


def test_a_rank_killed_in_training_is_not_blamed_on_what_its_fork_server_said_at_warm_up(tmp_path):
    found = run_in_a_launcher_of_its_own(RANK_KILLED_IN_TRAINING_AFTER_A_NOISY_WARM_UP, tmp_path)
    assert found == {"code": -9, "error": "rank 0 failed (signal SIGKILL)"}, found
