"""Reading a job spec file: JSON, or YAML as YAML 1.2 reads it (`lr: 3e-4` is a float, `on: yes`
two strings), with ruamel.yaml, whose default is 1.2 (PyYAML follows YAML 1.1, where a float
needs a dot, and would hand the API the string "3e-4")."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from trainjobs.cli.registry import UsageError


def read_spec(path: Path) -> dict[str, Any]:
    """The spec in `path` (JSON, or YAML for .yaml / .yml); a UsageError naming the file and the
    problem in one line when it cannot be read."""
    try:
        text = path.read_text()
        if path.suffix in (".yaml", ".yml"):
            return yaml_spec(text)
        loaded = json.loads(text)
    except (OSError, ValueError) as error:  # json's errors are ValueErrors; yaml_spec turns YAML's into one
        raise UsageError(f"cannot read the spec {path}: {error}") from None
    if not isinstance(loaded, dict):
        raise UsageError(f"cannot read the spec {path}: a spec file holds one object of fields")
    return loaded


def yaml_spec(text: str) -> dict[str, Any]:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import MarkedYAMLError, YAMLError

    try:
        loaded = YAML(typ="safe", pure=True).load(text)
    except MarkedYAMLError as error:  # one line: where, and what
        mark = error.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ValueError(f"not YAML{where}: {error.problem or error}") from None
    except YAMLError as error:
        raise ValueError(f"not YAML: {error}") from None
    if not isinstance(loaded, dict):
        raise ValueError("a spec file holds one mapping of fields")
    return loaded
