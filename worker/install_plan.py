"""What a job's requirements.txt asks for, sorted by how it may be installed without running the
job's build code where there is a network:

- a requirement of the package index (`numpy>=1.26`) and a wheel inside the archive
  (`./wheels/x-1.0-py3-none-any.whl`) install as wheels only (`--only-binary=:all:`): no code of
  theirs runs, so the worker's pip may fetch them with the host's network;
- a source tree or sdist inside the archive (`.`, `./mypkg`) runs its build backend: it builds in
  a sandbox with no network at all, from what the first step fetched (its `[build-system]
  requires`, and its `[project] dependencies` where pyproject.toml lists them statically).

Nothing else is accepted: no pip options (an index of the file's own, `-e`, `-r`), no direct
URLs, no path outside the archive. Each refusal names the line. `environment_key` names the
environment by everything it is built from, so two archives share one only when both would
build the same bytes.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from trainjobs.contract.code import sha256_of_file

COMMENT = re.compile(r"(^|\s)#.*$")  # pip's rule: a # at the start or after whitespace
DEFAULT_BUILD_REQUIRES = ("setuptools>=40.8.0", "wheel")  # pip's own, for a tree without pyproject.toml


class RequirementRefused(ValueError):
    """A line of requirements.txt this worker will not install; the message names it."""


@dataclass
class InstallPlan:
    binaries: list[str] = field(default_factory=list)  # index requirements and the archive's wheels
    sources: list[str] = field(default_factory=list)  # the archive's source trees and sdists (./path)
    build_requires: list[str] = field(default_factory=list)  # what the sources' backends need

    @property
    def local_paths(self) -> list[str]:
        return [line for line in [*self.binaries, *self.sources] if _is_local(line)]


def plan_of(requirements: Path, archive: Path) -> InstallPlan:
    """The plan for `requirements` (at the root of the unpacked `archive`), or RequirementRefused."""
    plan = InstallPlan()
    for number, line in _logical_lines(requirements.read_text(errors="replace")):
        where = f"requirements.txt line {number} ({line[:80]!r})"
        if line.startswith("-"):
            raise RequirementRefused(
                f"{where}: pip options are not accepted; name packages of the index, or a wheel "
                "or a folder inside the archive as ./path"
            )
        if _is_local(line):
            path = _confined(line, where)
            (plan.binaries if path.endswith(".whl") else plan.sources).append(path)
            if not path.endswith(".whl"):
                _add_source_needs(plan, archive / path, where)
        else:
            plan.binaries.append(_index_requirement(line, where))
    return plan


def environment_key(requirements: Path, archive: Path, plan: InstallPlan) -> str:
    """sha256 of the requirements file and of every file the local lines name (their paths and
    bytes): a rebuilt wheel with the same version, or another owner's files under the same
    name, make another environment."""
    digest = hashlib.sha256(b"requirements.txt\0" + requirements.read_bytes())
    for local in sorted(set(plan.local_paths)):
        digest.update(b"\0local\0" + local.encode())
        for relative, path in _files_under(archive / local):
            digest.update(b"\0file\0" + relative.encode() + b"\0")
            digest.update(sha256_of_file(path).encode())
    return digest.hexdigest()


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """(first line number, the line) with comments dropped and `\\` continuations joined."""
    lines: list[tuple[int, str]] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = COMMENT.sub("", raw).strip()
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        whole = (pending + stripped).strip()
        pending = ""
        if whole:
            lines.append((start, whole))
    if pending.strip():
        lines.append((start, pending.strip()))
    return lines


def _is_local(line: str) -> bool:
    return line == "." or line.startswith("./")


def _confined(line: str, where: str) -> str:
    path = line.split("[", 1)[0].split(";", 1)[0].strip()
    normal = posixpath.normpath(path)
    if normal.startswith("..") or posixpath.isabs(normal):
        raise RequirementRefused(f"{where}: the path leaves the archive")
    return "." if normal == "." else f"./{normal}"


def _index_requirement(line: str, where: str) -> str:
    try:
        requirement = Requirement(line)
    except InvalidRequirement as error:
        raise RequirementRefused(f"{where}: not a requirement ({error})") from None
    if requirement.url:
        raise RequirementRefused(f"{where}: direct URLs are not accepted; the install reaches only the package index")
    return str(requirement)


def _add_source_needs(plan: InstallPlan, tree: Path, where: str) -> None:
    """A source tree's build requirements and static dependencies, read from its pyproject.toml
    (TOML only: none of its code runs)."""
    pyproject = tree / "pyproject.toml"
    table: dict = {}
    if tree.is_dir() and pyproject.is_file():
        try:
            table = tomllib.loads(pyproject.read_text(errors="replace"))
        except tomllib.TOMLDecodeError as error:
            raise RequirementRefused(f"{where}: its pyproject.toml does not parse ({error})") from None
    build_requires = table.get("build-system", {}).get("requires", list(DEFAULT_BUILD_REQUIRES))
    project = table.get("project", {})
    dependencies = [] if "dependencies" in project.get("dynamic", []) else project.get("dependencies", [])
    for requirement in build_requires:
        plan.build_requires.append(_index_requirement(str(requirement), f"{where}: build-system.requires"))
    for requirement in dependencies:
        plan.binaries.append(_index_requirement(str(requirement), f"{where}: project.dependencies"))


def _files_under(path: Path) -> list[tuple[str, Path]]:
    """Every file at or under `path`, sorted, with its path relative to `path` (archives hold
    no links: trainjobs.contract.archives refuses them)."""
    if path.is_file():
        return [("", path)]
    found = []
    for root, folders, files in os.walk(path):
        folders.sort()
        for name in sorted(files):
            full = Path(root) / name
            found.append((str(full.relative_to(path)), full))
    return found
