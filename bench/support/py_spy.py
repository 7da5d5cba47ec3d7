"""Where py-spy is: on PATH, or beside this interpreter (`make bench` installs it into the venv,
whose bin directory a plain `.venv/bin/python -m bench` does not put on PATH)."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path


def py_spy() -> str | None:
    beside = Path(sys.executable).with_name("py-spy")
    return shutil.which("py-spy") or (str(beside) if beside.exists() else None)
