"""requirements.txt read into the two install steps; every line this worker will not install
refused naming it; the environment named by everything it is built from."""

import pytest

from trainjobs.worker.install_plan import RequirementRefused, environment_key, plan_of


def _plan(tmp_path, requirements: str, files: dict[str, str] | None = None):
    for name, content in (files or {}).items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(content)
    (tmp_path / "requirements.txt").write_text(requirements)
    return plan_of(tmp_path / "requirements.txt", tmp_path)


def test_index_requirements_and_the_archive_s_wheels_go_to_the_binary_step_and_its_trees_to_the_build(tmp_path):
    pyproject = (
        '[build-system]\nrequires = ["hatchling>=1.20"]\n[project]\nname = "mine"\ndependencies = ["numpy>=1.26"]\n'
    )
    plan = _plan(
        tmp_path,
        "# tools\nscipy>=1.10  # a comment\nrich \\\n  >=13\n./wheels/x-1.0-py3-none-any.whl\n./mine\n.\n",
        {"mine/pyproject.toml": pyproject},
    )
    assert plan.binaries == ["scipy>=1.10", "rich>=13", "./wheels/x-1.0-py3-none-any.whl", "numpy>=1.26"]
    assert plan.sources == ["./mine", "."]
    assert plan.build_requires == ["hatchling>=1.20", "setuptools>=40.8.0", "wheel"]  # "." has no pyproject.toml


def test_dynamic_dependencies_are_left_to_the_build(tmp_path):
    pyproject = '[project]\nname = "mine"\ndynamic = ["dependencies"]\ndependencies = ["never-read"]\n'
    plan = _plan(tmp_path, "./mine\n", {"mine/pyproject.toml": pyproject})
    assert plan.binaries == []


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("--index-url https://evil.example/simple", "pip options are not accepted"),
        ("-e .", "pip options are not accepted"),
        ("-r other.txt", "pip options are not accepted"),
        ("evil @ https://169.254.169.254/latest/meta-data", "direct URLs are not accepted"),
        ("./../../archives/other-owner/wheels/x.whl", "the path leaves the archive"),
        ("numpy >= = 1", "not a requirement"),
        ("numpy --hash=sha256:00", "not a requirement"),
    ],
)
def test_a_line_this_worker_will_not_install_is_refused_naming_it(tmp_path, line, reason):
    with pytest.raises(RequirementRefused, match=rf"requirements.txt line 2 .*: {reason}"):
        _plan(tmp_path, f"numpy\n{line}\n")


def test_a_tree_s_bad_dependency_is_refused_naming_its_line_and_field(tmp_path):
    pyproject = '[project]\nname = "mine"\ndependencies = ["x @ file:///etc/shadow"]\n'
    with pytest.raises(RequirementRefused, match=r"line 1 .*project.dependencies: direct URLs"):
        _plan(tmp_path, "./mine\n", {"mine/pyproject.toml": pyproject})


def test_the_environment_key_follows_the_named_files_bytes_and_nothing_else(tmp_path):
    files = {"wheels/x.whl": "first build", "model.py": "x = 1"}
    plan = _plan(tmp_path, "./wheels/x.whl\nnumpy\n", files)
    first = environment_key(tmp_path / "requirements.txt", tmp_path, plan)
    (tmp_path / "model.py").write_text("x = 2")  # the model changes, the requirements do not
    assert environment_key(tmp_path / "requirements.txt", tmp_path, plan) == first
    (tmp_path / "wheels/x.whl").write_text("rebuilt, same version")
    assert environment_key(tmp_path / "requirements.txt", tmp_path, plan) != first
