"""The package's shape: modules import each other without circles, stay small, and have no side effects."""

import pytest
import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "bertmem"


def imports(path: Path, top_level_only: bool) -> set[str]:
    """The bertmem modules a module imports (relative imports), at module level or anywhere."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    found = set()
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            found.add(node.module.split(".")[0])
    return found


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import circle, as the path that closes it."""
    found, state = [], {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    return found


def graph(top_level_only: bool) -> dict[str, set[str]]:
    return {p.stem: imports(p, top_level_only) for p in PACKAGE.glob("*.py")}


def test_the_cycle_finder_finds_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_module_level_imports_have_no_circles():
    assert cycles(graph(top_level_only=True)) == []


def test_train_and_accumulation_do_not_import_each_other():
    full = graph(top_level_only=False)
    assert not ({"train"} & full["accumulation"]) and "train" not in full["baseline"]


def test_modules_stay_small():
    sizes = {p.name: len(p.read_text(encoding="utf-8").splitlines()) for p in PACKAGE.glob("*.py")}
    assert max(sizes.values()) <= 320, sorted(sizes.items(), key=lambda kv: -kv[1])[:3]


@pytest.mark.slow
def test_importing_the_package_modules_has_no_side_effects():
    # no output, no torch threads changed, no environment written: importing is free
    code = ("import os, io, contextlib, torch; before = (dict(os.environ), torch.get_num_threads()); "
            "out = io.StringIO()\nwith contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):\n"
            "    import bertmem.cli, bertmem.train, bertmem.bench, bertmem.loaders, bertmem.flags\n"
            "assert out.getvalue() == '', out.getvalue()\n"
            "assert (dict(os.environ), torch.get_num_threads()) == before")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
