"""What a reader of the website sees: no project-internal vocabulary on any page (markdown and printed outputs)."""

import json
import re
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parents[1] / "book"
INTERNAL = {  # how the project is run is not the reader's business
    "issue tracker": r"issue[- ]tracker",
    "the repository's issues": r"repository'?s issues",
    "an issue number": r"\bissues?\s*#\d+|#\d+ of the",
    "a target this book set": r"targets? (?:that )?(?:this|the) book (?:set|sets|has set)",
    "a pass/fail targets table": r"\|\s*targets?\s*\||\btargets?\s+(?:met|missed)\b|\b(?:met|missed)\s*\|",
    "a make target for maintainers": r"make (?:notebooks-gpu-profile|site-check|unit)\b",
}


def page_texts() -> dict[str, str]:
    """Each page's markdown and every printed output of its code cells (code itself is not prose)."""
    pages = {path.name: path.read_text(encoding="utf-8") for path in BOOK.glob("*.md")}
    for path in BOOK.glob("*.ipynb"):
        parts = []
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "markdown":
                parts.append("".join(cell["source"]))
            for output in cell.get("outputs", []):
                parts.append("".join(output.get("text", "")))
                for kind in ("text/plain", "text/markdown", "text/html"):
                    parts.append("".join(output.get("data", {}).get(kind, "")))
        pages[path.name] = "\n".join(parts)
    return pages


@pytest.mark.parametrize("name, pattern", INTERNAL.items())
def test_no_page_shows_internal_project_vocabulary(name, pattern):
    found = [(page, m.group(0)) for page, text in page_texts().items()
             for m in re.finditer(pattern, text, flags=re.IGNORECASE)]
    assert not found, f"{name} on the website: {found[:5]}"


def test_the_check_finds_what_it_looks_for():
    samples = {"issue tracker": "see #9 of the issue tracker", "the repository's issues": "the repository's issues",
               "an issue number": "fixed in issue #12", "a target this book set": "the 0.15 target this book set",
               "a pass/fail targets table": "| check | measured | target | met |\n| time | 0.4 | 0.5 | yes |",
               "a make target for maintainers": "run make site-check"}
    for name, pattern in INTERNAL.items():
        assert re.search(pattern, samples[name], flags=re.IGNORECASE), name


def test_nbval_markers_are_cell_tags_not_comments_readers_see():
    tagged = 0
    for path in BOOK.glob("*.ipynb"):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            assert "NBVAL_" not in "".join(cell["source"]), f"{path.name}: use the nbval-check-output tag"
            tagged += "nbval-check-output" in cell.get("metadata", {}).get("tags", [])
    assert tagged >= 10  # the outputs CI compares byte for byte


ANSI = re.compile(r"\x1b\[[0-9;]*m")  # a traceback's colours


def cell_outputs():
    """(notebook, cell index, printed text) for every code cell with output, tracebacks of intended errors too."""
    for path in sorted(BOOK.glob("*.ipynb")):
        for index, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
            outputs = cell.get("outputs", [])
            text = "".join("".join(o.get("text", "")) + "".join(o.get("data", {}).get("text/plain", ""))
                           for o in outputs if o.get("output_type") != "display_data"
                           or "image/png" not in o.get("data", {}))
            text += "".join(ANSI.sub("", "\n".join(o["traceback"])) for o in outputs if o.get("output_type") == "error")
            if text:
                yield path.name, index, text


def test_no_cell_prints_more_than_forty_lines():
    # a carriage return starts a line too: a web page shows every redraw of a progress bar
    long = [(name, index, n) for name, index, text in cell_outputs()
            if (n := len([line for line in re.split(r"[\r\n]", text) if line.strip()])) > 40]
    assert not long, f"cells printing more than 40 lines (notebook, cell, lines): {long}"


MACHINE_PATHS = r"/work/|/home/\w+|/tmp/|/root/|\.venv/|site-packages|_build/"


def test_no_output_shows_a_machine_path():
    found = [(name, index, m.group(0)) for name, index, text in cell_outputs()
             for m in re.finditer(MACHINE_PATHS, text)]
    assert not found, f"machine paths in committed outputs: {found[:5]}"
    assert re.search(MACHINE_PATHS, "/work/main/.venv/lib/python3.11/site-packages/tqdm/auto.py")


def test_the_colab_install_cell_is_in_every_notebook_but_not_on_the_website():
    for path in BOOK.glob("*.ipynb"):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        install = [c for c in cells if "google.colab" in "".join(c["source"]) and "pip" in "".join(c["source"])]
        assert len(install) == 1, path.name
        assert "remove-cell" in install[0].get("metadata", {}).get("tags", []), f"{path.name}: tag it remove-cell"


def test_notebook_code_fits_the_page():
    """88 columns: what a code block on the website shows without scrolling (the browser test checks that)."""
    wide = [(path.name, index, len(line)) for path in sorted(BOOK.glob("*.ipynb"))
            for index, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"])
            if cell["cell_type"] == "code" for line in "".join(cell["source"]).splitlines() if len(line) > 88]
    assert not wide, f"code lines wider than 88 columns (notebook, cell, width): {wide[:10]}"


def test_no_cell_shows_a_stray_value_of_its_last_expression():
    """An `Out[]` that is a bare number or glue's return value is noise on the page (glue returns None)."""
    stray = []
    for path in sorted(BOOK.glob("*.ipynb")):
        for index, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
            for output in cell.get("outputs", []):
                plain = "".join(output.get("data", {}).get("text/plain", ""))
                if output.get("output_type") == "execute_result" and re.fullmatch(r"[-+0-9.e]+", plain.strip()):
                    stray.append((path.name, index, plain.strip()))
    assert not stray, f"cells ending in an expression whose value is printed: {stray}"


def included_objects() -> list[tuple[str, str, str]]:
    """(page, source file, object) for every `literalinclude` with `:pyobject:` on a page."""
    found = []
    for path in sorted(BOOK.glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            text = "".join(cell["source"])
            for source, obj in re.findall(r"```\{literalinclude\} (\S+)\n(?::\w+: .*\n)*?:pyobject: (\w+)", text):
                found.append((path.name, source, obj))
    return found


def test_code_the_pages_include_fits_the_page():
    """Package code shown on a page (literalinclude) is 88 columns wide at most, like the notebooks' code."""
    import ast

    found = included_objects()
    assert ("00_baseline.ipynb", "../src/bertmem/baseline.py", "train_baseline") in found
    wide = []
    for page, source, obj in found:
        text = (BOOK / source).read_text(encoding="utf-8")
        node = next(n for n in ast.walk(ast.parse(text)) if getattr(n, "name", None) == obj)
        lines = text.splitlines()[node.lineno - 1 - len(node.decorator_list):node.end_lineno]
        wide += [(page, obj, len(line)) for line in lines if len(line) > 88]
    assert not wide, f"included code wider than 88 columns (page, object, width): {wide}"
