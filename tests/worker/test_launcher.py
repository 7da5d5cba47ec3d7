"""What the launcher tells the service about a failed rank."""

from tests.worker.local_training import mlp_spec
from trainjobs.contract.run import RunRequest
from trainjobs.contract.spec import JobSpec
from trainjobs.worker.launcher import without_server_paths


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
