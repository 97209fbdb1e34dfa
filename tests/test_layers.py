"""The package's shape: layers as folders, imports only downward (function-level ones counted), no circles."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "bertmem"

# Bottom to top. A module may import its own layer and the layers below it, never one above. `book` is the
# book's layer: nothing in the library imports it, only the command line (which prints the bench's GPU time).
LAYERS = ("core", "data", "model", "loop", "memory", "experiments", "profiles", "book", "cli")
LAYER_OF = {"__main__": "cli", "cli": "cli", "profiles": "profiles"}


def module_name(path: Path) -> str:
    """`bertmem.loop.combined` for src/bertmem/loop/combined.py; `bertmem.loop` for its __init__.py."""
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> str:
    """The layer of a dotted bertmem module name."""
    first = module.split(".")[1] if "." in module else ""
    return LAYER_OF.get(first, first)


def imports(path: Path) -> set[str]:
    """Every bertmem module a file imports, at module level or inside a function or a TYPE_CHECKING block."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.level:  # relative imports are resolved against the file's package
                base = module_name(path).split(".")
                base = base[:len(base) - node.level + (path.name == "__init__.py")]
                found.add(".".join(base + [node.module]))
            elif node.module.startswith("bertmem"):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("bertmem"))
    return {m for m in found if m != "bertmem"}


def graph() -> dict[str, set[str]]:
    """Module -> the bertmem modules it imports; an import of a subpackage counts as its __init__."""
    return {module_name(p): imports(p) for p in PACKAGE.rglob("*.py")}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle, as the path that closes it."""
    found, state = [], {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for start in sorted(edges):
        if start not in state:
            visit(start, [start])
    return found


def upward(edges: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Every import that runs from a lower layer up to a higher one."""
    return sorted((a, b) for a, targets in edges.items() for b in targets
                  if LAYERS.index(layer(b)) > LAYERS.index(layer(a)))


def test_the_cycle_finder_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_layer_rule_catches_an_import_that_runs_up(tmp_path):
    assert upward({"bertmem.loop.combined": {"bertmem.book.chapters"}}) == [
        ("bertmem.loop.combined", "bertmem.book.chapters")]
    assert upward({"bertmem.book.chapters": {"bertmem.loop.combined"}}) == []
    source = tmp_path / "bertmem" / "loop" / "x.py"
    source.parent.mkdir(parents=True)
    source.write_text("def f():\n    from bertmem.book.plots import as_table\n")
    assert "bertmem.book.plots" in imports_under(source, tmp_path / "bertmem")


def imports_under(path: Path, package: Path) -> set[str]:
    """`imports` for a file of another package folder (the rule's own test)."""
    global PACKAGE
    saved, PACKAGE = PACKAGE, package
    try:
        return imports(path)
    finally:
        PACKAGE = saved


def test_every_module_is_in_a_layer():
    unknown = sorted(m for m in graph() if m != "bertmem" and layer(m) not in LAYERS)
    assert unknown == [], f"put these in one of the layer folders {LAYERS}: {unknown}"


def test_no_import_circles_counting_function_level_imports():
    assert cycles(graph()) == []


def test_imports_only_point_down():
    assert upward(graph()) == []


def test_nothing_but_the_command_line_imports_the_book_layer():
    users = sorted(a for a, targets in graph().items() for b in targets
                   if layer(b) == "book" and layer(a) not in ("book", "cli"))
    assert users == []


def test_the_package_has_few_top_level_entries():
    entries = [p for p in PACKAGE.iterdir() if p.name not in ("__pycache__",) and not p.name.endswith(".egg-info")]
    assert len(entries) <= 12, sorted(p.name for p in entries)


@pytest.mark.slow
def test_importing_the_package_modules_has_no_side_effects():
    # no output, no torch threads changed, no environment written: importing is free
    code = ("import os, io, contextlib, torch; before = (dict(os.environ), torch.get_num_threads()); "
            "out = io.StringIO()\nwith contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):\n"
            "    import bertmem.cli, bertmem.loop, bertmem.experiments, bertmem.data, bertmem.core, bertmem.book\n"
            "assert out.getvalue() == '', out.getvalue()\n"
            "assert (dict(os.environ), torch.get_num_threads()) == before")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
