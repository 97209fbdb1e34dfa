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


# What Jupyter and Colab show of a MyST-only construct once CommonMark has rendered it: a role leaves
# `{name}` before its code span, a directive becomes a code block whose language is `{name}`, a label target
# `(name)=` and a colon fence stay as text.
SPHINX_ONLY = {
    "a role such as {glue:text} or {cite:p}": r"\{[a-z][\w:-]*\}<code>",
    "a directive such as {admonition} or {literalinclude}": r'<code class="language-\{',
    "a label target (name)=": r"<p>\([\w-]+\)=",
    "a colon fence": r"<p>:::",
}


def commonmark_leftovers(markdown: str) -> list[str]:
    """What a plain CommonMark renderer (Jupyter's, Colab's) would show as Sphinx source in `markdown`."""
    from markdown_it import MarkdownIt

    html = MarkdownIt("commonmark").render(markdown)
    return [name for name, pattern in SPHINX_ONLY.items() if re.search(pattern, html)]


def notebook_markdown(path: Path) -> list[tuple[int, str]]:
    """(cell index, text) of every markdown cell and every Markdown output: both render in Jupyter and Colab."""
    found = []
    for index, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
        if cell["cell_type"] == "markdown":
            found.append((index, "".join(cell["source"])))
        for output in cell.get("outputs", []):
            if "text/markdown" in output.get("data", {}):
                found.append((index, "".join(output["data"]["text/markdown"])))
    return found


def test_notebooks_read_the_same_in_jupyter_and_colab_as_on_the_website():
    """No Sphinx-only markup in any notebook: Jupyter and Colab render plain CommonMark, not MyST."""
    leftovers = [(path.name, index, kinds) for path in sorted(BOOK.glob("*.ipynb"))
                 for index, text in notebook_markdown(path) if (kinds := commonmark_leftovers(text))]
    assert not leftovers, f"Sphinx-only markup that Jupyter/Colab show as source (notebook, cell, what): {leftovers}"


def test_the_commonmark_check_finds_each_sphinx_only_construct():
    samples = {
        "a role such as {glue:text} or {cite:p}": "The ratio is {glue:text}`ratio:.2f` {cite:p}`maas2011imdb`.",
        "a directive such as {admonition} or {literalinclude}": "```{admonition} Takeaway\n:class: tip\nText\n```",
        "a label target (name)=": "(my-label)=\n## A heading",
        "a colon fence": ":::{note}\nText\n:::",
    }
    for name, sample in samples.items():
        assert name in commonmark_leftovers(sample), name
    plain = "> **Takeaway.** Math $a^{2}$, `code {x}`, a [link](https://arxiv.org/abs/1).\n\n```python\nx = {1}\n```"
    assert commonmark_leftovers(plain) == []


def test_run_dependent_sentences_are_cell_outputs_that_hide_their_code():
    """A sentence computed by a cell shows its Markdown, not its code: hidden on the site, a form on Colab."""
    cells = [(path.name, index, cell) for path in sorted(BOOK.glob("*.ipynb"))
             for index, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"])
             if cell["cell_type"] == "code" and "Markdown(" in "".join(cell["source"])
             and "".join(cell["source"]).startswith("# @title")]
    assert len(cells) >= 10
    for name, index, cell in cells:
        assert "remove-input" in cell["metadata"].get("tags", []), (name, index)
        assert cell["metadata"].get("cellView") == "form", (name, index)
        assert any("text/markdown" in o.get("data", {}) for o in cell.get("outputs", [])), (name, index)


def test_chapter_seven_shows_each_config_file_exactly_as_the_repository_ships_it():
    """The files are written into the page (Colab has no repository to read them from); they must not drift."""
    page = "\n".join(text for _, text in notebook_markdown(BOOK / "07_scaling_out.ipynb"))
    configs = sorted((BOOK.parent / "configs").rglob("*.yaml")) + sorted((BOOK.parent / "configs").rglob("*.json"))
    assert len(configs) == 4
    for path in configs:
        language = "yaml" if path.suffix == ".yaml" else "json"
        assert f"```{language}\n{path.read_text(encoding='utf-8').rstrip()}\n```" in page, path.name


PLOTTING = re.compile(r"plt\.(?:subplots|figure|show)\(|\bplot_\w+\(")


def code_cells():
    """(notebook, index, cell) for every code cell of every chapter."""
    for path in sorted(BOOK.glob("*.ipynb")):
        for index, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
            if cell["cell_type"] == "code":
                yield path.name, index, cell


def test_run_all_finishes_no_cell_raises_or_is_allowed_to():
    # Colab's Run all stops at the first cell that raises: an intended error is caught and printed instead
    tagged = [(nb, i) for nb, i, cell in code_cells() if "raises-exception" in cell["metadata"].get("tags", [])]
    errors = [(nb, i) for nb, i, cell in code_cells()
              if any(o["output_type"] == "error" for o in cell.get("outputs", []))]
    assert tagged == [] and errors == []


def test_every_plotting_cell_keeps_its_figure():
    plotting = [(nb, i, cell) for nb, i, cell in code_cells() if PLOTTING.search("".join(cell["source"]))]
    assert len(plotting) >= 10
    missing = [(nb, i) for nb, i, cell in plotting
               if not any("image/png" in o.get("data", {}) for o in cell.get("outputs", []))]
    assert missing == [], f"plotting cells without a figure (executed under MPLBACKEND=Agg?): {missing}"


def test_the_plotting_check_recognises_plots():
    assert PLOTTING.search("fig, ax = plt.subplots(1, 2)") and PLOTTING.search("plot_token_lengths(x)")
    assert not PLOTTING.search("print(plotted)")


def audit_verdicts(text: str) -> tuple[list[str], dict[int, str], dict[str, list[int]]]:
    """A2's legend, each claim's verdict, and the tally table's claims per verdict."""
    legend = re.findall(r"\*\*([a-z ]+)\*\*", text.split("\n\n", 2)[1])
    rows = {int(n): v.strip() for n, v in re.findall(r"^\| (\d+) \|[^\n]*?\| ([a-z ]+) \| ", text, re.M)}
    tally = {v: [int(n) for n in re.findall(r"\d+", ids)]
             for v, count, ids in re.findall(r"^\| ([a-z ]+) \| (\d+) \(#([\d, ]+)\) \|$", text, re.M)
             if int(count) == len(re.findall(r"\d+", ids))}  # a miscounted line is left out, so the test fails
    return legend, rows, tally


def test_the_audit_tally_counts_each_claim_under_its_own_verdict():
    legend, rows, tally = audit_verdicts((BOOK / "A2_post_audit.md").read_text(encoding="utf-8"))
    assert len(rows) >= 20 and set(rows.values()) <= set(legend)  # every verdict is one the legend defines
    assert {v: sorted(n for n, w in rows.items() if w == v) for v in set(rows.values())} == \
        {v: sorted(ids) for v, ids in tally.items()}


def test_the_tally_check_sees_a_claim_counted_under_another_verdict():
    text = ("# A2\n\n**Goal:** Verdicts: **holds**, **wrong**.\n\n| 1 | x | holds | y |\n| 2 | x | wrong | y |\n\n"
            "| holds | 2 (#1, 2) |\n| wrong | 2 (#2) |\n")
    legend, rows, tally = audit_verdicts(text)
    assert legend == ["holds", "wrong"] and rows == {1: "holds", 2: "wrong"} and tally == {"holds": [1, 2]}


# One lesson per page: at most 30 cells; code cells of at most 40 lines (as `ruff format` at 88 columns writes them;
# the install cell aside), except each chapter's central technique cell, found by the definition it shows, which may
# run to 70.
MAX_CELLS, MAX_LINES, MAX_CENTRAL_LINES = 30, 40, 70
CENTRAL = {
    "00_baseline.ipynb": "def train_baseline(",
    "02_gradient_accumulation.ipynb": "def backward_window(",
    "03_mixed_precision.ipynb": "def mixed_precision_step(",
    "04_layerwise_lr_decay.ipynb": "def layerwise_param_groups(",
    "05_optimized_loop.ipynb": "def train(",
    "05b_runs_that_last.ipynb": "def backward_with_backoff(",
    "06_pitfalls.ipynb": "def scaled_run(",
    "07_scaling_out.ipynb": "def per_device_bytes(",
    "08_below_the_floor.ipynb": "def make_optimizer(",
    "A1_your_own_data.ipynb": "def prepare_frame(",
}
# Cells that generate a paragraph of prose and are still longer than 40 lines, by their first line, with the length
# each may not exceed; one that shrinks to 40 lines must leave this list.
LONG_GENERATED = {
    ("05_optimized_loop.ipynb", "# @title - **Memory.** Accumulation ×4 cuts the saved activations to …"): 50,
    ("05_optimized_loop.ipynb", "# @title - **fp32 baseline, 10.2 GB.** Chapter 1's estimate for bert-…"): 57,
    ("09b_what_long_inputs_cost.ipynb", "# @title Above the 512-token cost, at 8,192 tokens …"): 54,
    ("A3_measured_on_a_gpu.ipynb", "# @title What the rows say about the planner."): 51,
    ("A3_measured_on_a_gpu.ipynb", "# @title What the bench says."): 61,
    ("A3_measured_on_a_gpu.ipynb", "# @title What the benchmark says."): 56,
}


def page_problems(name: str, cells: list[dict]) -> list[str]:
    """What breaks the one-lesson rules on one page: too many cells, code cells too long, a central cell missing."""
    problems = [f"{name}: {len(cells)} cells"] if len(cells) > MAX_CELLS else []
    central = [i for i, c in enumerate(cells) if c["cell_type"] == "code" and CENTRAL.get(name, "\0") in
               "".join(c["source"])]
    if name in CENTRAL and len(central) != 1:
        problems.append(f"{name}: {len(central)} cells define {CENTRAL[name]!r}")
    for index, cell in enumerate(cells):
        source = "".join(cell["source"])
        if cell["cell_type"] != "code" or "remove-cell" in cell["metadata"].get("tags", []):
            continue  # the install cell: Colab only, a collapsed form there
        lines = len(source.splitlines())
        first = source.splitlines()[0] if source else ""
        limit = MAX_CENTRAL_LINES if index in central else LONG_GENERATED.get((name, first), MAX_LINES)
        if lines > limit:
            problems.append(f"{name} cell {index}: {lines} lines, at most {limit}")
        if (name, first) in LONG_GENERATED and lines <= MAX_LINES:
            problems.append(f"{name} cell {index}: {lines} lines now; take it out of LONG_GENERATED")
    return problems


def test_each_page_holds_one_lesson_in_short_cells():
    problems = [p for path in sorted(BOOK.glob("*.ipynb"))
                for p in page_problems(path.name, json.loads(path.read_text(encoding="utf-8"))["cells"])]
    assert not problems, "\n".join(problems)
    pages = {path.name for path in BOOK.glob("*.ipynb")}
    assert set(CENTRAL) <= pages and {name for name, _ in LONG_GENERATED} <= pages


def test_the_one_lesson_check_finds_a_long_page_and_a_long_cell():
    def code(lines: int) -> dict:
        return {"cell_type": "code", "metadata": {}, "source": [f"x{i} = {i}\n" for i in range(lines)]}

    short = [code(40)] * 30
    assert page_problems("x.ipynb", short) == []
    assert page_problems("x.ipynb", short + [code(1)]) == ["x.ipynb: 31 cells"]
    assert page_problems("x.ipynb", [code(41)]) == ["x.ipynb cell 0: 41 lines, at most 40"]
    central = [{**code(70), "source": ["def train_baseline(\n"] + code(69)["source"]}]
    assert page_problems("00_baseline.ipynb", central) == []
    assert page_problems("00_baseline.ipynb", [code(3)]) == ["00_baseline.ipynb: 0 cells define 'def train_baseline('"]
