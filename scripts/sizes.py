"""No module over 400 lines and no function over 40 (Alembic's revisions aside): prints each
offender and exits 1 if there is one. Run by scripts/static-checks with the tests."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MODULE_LINES, FUNCTION_LINES = 400, 40
FOLDERS = ("trainjobs", "service", "worker", "migrations", "bench", "devstack", "tests", "scripts", "examples")
SKIPPED = ("migrations/versions/", "tests/plugin_package/build/")


def offenders(root: Path) -> list[str]:
    found = []
    for folder in FOLDERS:
        for path in sorted((root / folder).rglob("*.py")):
            relative = path.relative_to(root).as_posix()
            if relative.startswith(SKIPPED):
                continue
            text = path.read_text()
            lines = len(text.splitlines())
            if lines > MODULE_LINES:
                found.append(f"{relative}: {lines} lines (at most {MODULE_LINES})")
            for node in ast.walk(ast.parse(text)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > FUNCTION_LINES:
                        found.append(
                            f"{relative}:{node.lineno}: {node.name} is {length} lines (at most {FUNCTION_LINES})"
                        )
    return found


if __name__ == "__main__":
    problems = offenders(Path(__file__).resolve().parents[1])
    print("\n".join(problems) or f"no module over {MODULE_LINES} lines, no function over {FUNCTION_LINES}")
    sys.exit(1 if problems else 0)
