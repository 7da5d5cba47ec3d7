"""The GPU host's process loads the job core (trainjobs.jobs), never the API host (trainjobs.service)."""

from __future__ import annotations

import json
import subprocess
import sys

WORKER_ENTRY_POINTS = [
    "trainjobs.cli",  # `trainjobs worker` starts here
    "trainjobs.worker.celery_app",  # run_worker: the worker process
    "trainjobs.worker.launcher",  # each job attempt's launcher
    "trainjobs.worker.rank",  # the spawn target
]


def loaded_modules(*modules: str) -> list[str]:
    """The trainjobs modules a fresh interpreter holds after importing `modules`."""
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}: importlib.import_module(name)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('trainjobs'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


def test_the_worker_s_entry_points_load_no_module_of_the_api_host():
    loaded = loaded_modules(*WORKER_ENTRY_POINTS)
    assert "trainjobs.jobs.worker_gateway" in loaded  # the core is what it uses instead
    assert [name for name in loaded if name.startswith("trainjobs.service")] == []


def test_the_check_sees_an_api_host_module_when_one_is_loaded():
    # The search above must be able to fail.
    assert "trainjobs.service.collector" in loaded_modules("trainjobs.service.collector")


def test_a_launcher_and_its_unsandboxed_ranks_do_not_inherit_the_worker_s_settings(monkeypatch):
    """The database URL was in every rank's environment where no sandbox built it anew."""
    from trainjobs.worker.supervision import launcher_environment

    monkeypatch.setenv("TRAINJOBS_DATABASE_URL", "postgresql+psycopg://worker:secret@db/trainjobs")
    monkeypatch.setenv("TRAINJOBS_REDIS_URL", "redis://:secret@redis:6379/0")
    monkeypatch.setenv("PATH", "/usr/bin")
    environment = launcher_environment()
    assert not [name for name in environment if name.startswith("TRAINJOBS_")]
    assert environment["PATH"] == "/usr/bin"
