"""Shown code = tested code: a function or class a chapter defines is the package's, line for line (all chapters).

A chapter writes its technique out in a code cell and runs that definition. Where the package keeps the same
function for later chapters, the command line or the bench, the two must be the same source: their syntax trees
are compared (formatting aside: cells are 88 columns wide, the package 120). A cell tagged `page-only` defines
something for its page alone.
"""

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BOOK, PACKAGE = ROOT / "book", ROOT / "src" / "bertmem"
DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def cell_python(source: str) -> str:
    """A code cell's Python: IPython magics and shell escapes (`%`, `!`) become blank lines."""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())


def notebook_definitions() -> list[tuple[str, int, ast.AST]]:
    """(notebook, cell index, node) for every def/class in a code cell not tagged `page-only`.

    Definitions nested in `if`/`try`/`with` blocks count too; a cell that does not parse fails with its place.
    """
    found = []
    for path in sorted(BOOK.glob("*.ipynb")):
        for index, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
            if cell["cell_type"] != "code" or "page-only" in cell["metadata"].get("tags", []):
                continue
            try:
                tree = ast.parse(cell_python("".join(cell["source"])))
            except SyntaxError as err:
                raise AssertionError(f"{path.name} cell {index} does not parse as Python: {err}") from err
            found += [(path.name, index, node) for node in outer_definitions(tree)]
    return found


def outer_definitions(tree: ast.Module) -> list[ast.AST]:
    """Functions and classes a cell defines at its top level, also inside if/try/with/for blocks."""
    found, todo = [], list(tree.body)
    while todo:
        node = todo.pop(0)
        if isinstance(node, DEFINITIONS):
            found.append(node)
        elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
            todo += [child for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt)]
    return found


def package_definitions() -> dict[str, list[tuple[str, ast.AST]]]:
    """Top-level defs/classes of every package module, by name: name -> [(module, node)]."""
    found: dict[str, list[tuple[str, ast.AST]]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = ".".join(path.relative_to(PACKAGE).with_suffix("").parts)
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if isinstance(node, DEFINITIONS):
                found.setdefault(node.name, []).append((module, node))
    return found


def same_source(a: ast.AST, b: ast.AST) -> bool:
    """Equal syntax trees: the same code whatever the line breaks and quotes."""
    return ast.dump(a, include_attributes=False) == ast.dump(b, include_attributes=False)


def test_every_definition_a_chapter_shows_is_the_packages_own():
    package = package_definitions()
    shown = notebook_definitions()
    assert len(shown) >= 5
    problems = []
    for notebook, index, node in shown:
        homes = package.get(node.name, [])
        if not homes:
            problems.append(f"{notebook} cell {index}: {node.name} is not in bertmem (tag the cell page-only?)")
        elif len(homes) > 1:
            modules = ", ".join(f"bertmem.{module}" for module, _ in homes)
            problems.append(f"{notebook} cell {index}: {node.name} is defined in {modules}: keep one")
        elif not same_source(node, homes[0][1]):
            modules = ", ".join(f"bertmem.{module}" for module, _ in homes)
            problems.append(f"{notebook} cell {index}: {node.name} differs from {modules}.{node.name}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("notebook, name", [
    ("00_baseline.ipynb", "train_baseline"),
    ("03_mixed_precision.ipynb", "mixed_precision_step"),
    ("04_layerwise_lr_decay.ipynb", "layerwise_param_groups"),
    ("05_optimized_loop.ipynb", "train"),
    ("05b_runs_that_last.ipynb", "backward_with_backoff"),
])
def test_each_chapter_defines_the_technique_it_teaches(notebook, name):
    assert (notebook, name) in {(nb, node.name) for nb, _, node in notebook_definitions()}


def test_the_check_sees_definitions_inside_blocks_and_reports_cells_that_do_not_parse():
    tree = ast.parse("if True:\n    def shown():\n        pass\n"
                     "try:\n    class Hidden:\n        pass\nexcept E:\n    pass")
    assert [node.name for node in outer_definitions(tree)] == ["shown", "Hidden"]
    assert cell_python("%timeit f()\ndef f():\n    pass") == "\ndef f():\n    pass"


def test_the_drift_check_fails_when_one_line_changes_in_the_package_only():
    shown = {node.name: node for _, _, node in notebook_definitions()}
    package = package_definitions()
    node = shown["train_baseline"]
    home = next(h for _, h in package["train_baseline"] if same_source(node, h))
    edited = ast.parse(ast.unparse(home).replace("loss.backward()", "(2 * loss).backward()", 1)).body[0]
    assert ast.unparse(edited) != ast.unparse(home)
    assert not same_source(node, edited)


def page_only_cells() -> list[tuple[str, int, list[str], str]]:
    """(notebook, cell index, names defined, the cell's text with the markdown before it) per page-only cell."""
    found = []
    for path in sorted(BOOK.glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        for index, cell in enumerate(cells):
            if cell["cell_type"] == "code" and "page-only" in cell["metadata"].get("tags", []):
                names = [node.name for node in outer_definitions(ast.parse(cell_python("".join(cell["source"]))))]
                before = "".join(cells[index - 1]["source"]) if cells[index - 1]["cell_type"] == "markdown" else ""
                found.append((path.name, index, names, before + "".join(cell["source"])))
    return found


def test_at_most_two_definitions_are_page_only_and_each_page_says_so():
    cells = page_only_cells()
    names = [name for _, _, defined, _ in cells for name in defined]
    assert len(names) <= 2, f"page-only definitions: {names} (at most two: the runs use what a chapter shows)"
    for notebook, index, defined, text in cells:
        assert re.search(r"page only", text), f"{notebook} cell {index}: say on the page that {defined} is not run"
