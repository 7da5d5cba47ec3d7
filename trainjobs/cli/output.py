"""What the client commands print: tables (rich, imported only by the commands that print one),
JSON for scripts, and text from the API made safe for a terminal."""

from __future__ import annotations

import json
import sys
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Any


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2))


def printable(text: str) -> str:
    """Text from the API as a terminal may show it: control and bidirectional characters (which
    the API refuses in new names, but an older job or a rank's output may hold) escaped, never
    sent raw."""
    return "".join(
        char.encode("unicode_escape").decode() if unicodedata.category(char) in ("Cc", "Cf") else char for char in text
    )


def print_table(columns: Sequence[str], rows: Iterable[Sequence[object]], right: Sequence[str] = ()) -> None:
    """A header line, then one line per row, columns aligned. Never wrapped in a pipe (scripts
    read it line by line); cells are plain text (no rich markup), escaped for the terminal."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column, no_wrap=True, justify="right" if column in right else "left")
    for row in rows:
        table.add_row(*(Text(printable(str(cell))) for cell in row))
    width = None if sys.stdout.isatty() else 100_000
    Console(width=width, highlight=False, soft_wrap=False).print(table)
