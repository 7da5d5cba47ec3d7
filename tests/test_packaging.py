"""The package as users install it: one import name, and a bare install that is the client alone."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
import venv
from pathlib import Path

import pytest

from devstack import tiny_wavenet_spec

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
FOLDERS = PYPROJECT["tool"]["setuptools"]["package-dir"]  # import name -> folder


def test_every_package_folder_installs_under_the_trainjobs_name():
    found = set()
    for name, folder in FOLDERS.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / folder).parts
            if not any(part in ("build", "__pycache__") for part in parts):
                found.add(".".join((name, *parts)))
    assert set(PYPROJECT["tool"]["setuptools"]["packages"]) == found
    assert all(name == "trainjobs" or name.startswith("trainjobs.") for name in found)


@pytest.fixture(scope="module")
def bare_install(tmp_path_factory) -> Path:
    """`pip install .` without extras, into a new venv; its bin folder."""
    home = tmp_path_factory.mktemp("bare")
    venv.create(home / "venv", with_pip=True)
    bin_dir = home / "venv" / "bin"
    subprocess.run([bin_dir / "pip", "install", "--quiet", str(ROOT)], check=True, cwd=home, timeout=600)
    return bin_dir


def run_bare(bin_dir: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # From a folder outside the checkout, so only what was installed can be imported.
    return subprocess.run(
        [str(bin_dir / args[0]), *args[1:]],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=bin_dir,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.e2e
def test_the_bare_install_has_no_torch_sql_or_celery_and_no_top_level_service(bare_install):
    probe = (
        "import importlib.util, json; "
        "print(json.dumps({name: importlib.util.find_spec(name) is not None for name in "
        "['torch', 'sqlalchemy', 'celery', 'service', 'worker', 'migrations', 'trainjobs.client']}))"
    )
    found = json.loads(run_bare(bare_install, "python", "-c", probe).stdout)
    assert found == {
        "torch": False,
        "sqlalchemy": False,
        "celery": False,
        "service": False,
        "worker": False,
        "migrations": False,
        "trainjobs.client": True,
    }


@pytest.mark.e2e
def test_a_server_command_without_its_extra_names_the_extra_in_one_line(bare_install):
    worker = run_bare(bare_install, "trainjobs", "worker", "--cpu-slots", "1")
    assert worker.returncode == 2
    assert len(worker.stderr.strip().splitlines()) == 1 and "pip install 'trainjobs[worker]'" in worker.stderr
    migrate = run_bare(bare_install, "trainjobs", "migrate")
    assert migrate.returncode == 2 and "pip install 'trainjobs[server]'" in migrate.stderr


@pytest.mark.e2e
def test_the_bare_install_submits_and_lists_jobs_against_a_running_api(bare_install, stack_on, sqlite_url, tmp_path):
    stack = stack_on(sqlite_url)
    env = {"TRAINJOBS_URL": stack.url, "TRAINJOBS_TOKEN": stack.token("bare")}
    spec_file = tmp_path / "job.json"
    spec_file.write_text(json.dumps(tiny_wavenet_spec(epochs=1)))

    submitted = run_bare(bare_install, "trainjobs", "submit", str(spec_file), env=env)
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip().splitlines()[0]
    listed = run_bare(bare_install, "trainjobs", "jobs", env=env)
    assert listed.returncode == 0, listed.stderr
    assert job_id in listed.stdout
