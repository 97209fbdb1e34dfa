"""A chapter's own cells, run in a test: its setup and the definitions it shows (as the page has them, or edited),
then the cell that produces its result, at tiny sizes (tests/test_edit_the_cell.py)."""

from __future__ import annotations

import json
from pathlib import Path

BOOK = Path(__file__).resolve().parents[1] / "book"


def code_cells(notebook: str) -> list[str]:
    """A notebook's code cells as Python: IPython magics and shell escapes become blank lines."""
    cells = json.loads((BOOK / notebook).read_text(encoding="utf-8"))["cells"]
    return ["\n".join("" if line.lstrip().startswith(("%", "!")) else line
                      for line in "".join(cell["source"]).splitlines())
            for cell in cells if cell["cell_type"] == "code"]


def cell_with(cells: list[str], text: str) -> str:
    """The one code cell that contains `text`."""
    found = [cell for cell in cells if text in cell]
    assert len(found) == 1, f"{len(found)} code cells contain {text!r}"
    return found[0]


def edited(source: str, old: str, new: str) -> str:
    """The cell with one piece replaced, as a reader would edit it; the piece must be there exactly once."""
    assert source.count(old) == 1, f"{old!r} is not in the cell exactly once"
    return source.replace(old, new)


def run_cells(sources: list[str], namespace: dict) -> dict:
    """Execute cells one after another in one namespace, as a kernel would; the namespace."""
    for source in sources:
        exec(compile(source, "<cell>", "exec"), namespace)
    return namespace


def definitions_only(source: str) -> str:
    """A cell's imports, functions and classes without the statements that run them (a cell that defines a helper
    and then uses it)."""
    import ast

    kept = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)
    return "\n\n".join(ast.unparse(node) for node in ast.parse(source).body if isinstance(node, kept))
