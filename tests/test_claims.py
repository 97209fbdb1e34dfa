"""Typed numbers agree with what the chapters measured (all chapters, A2).

A measured ratio or difference ("0.91×", "+2.8 points", "12.5 %") belongs in a cell's output, where a rerun
updates it. In text a reader sees as typed (markdown cells, the Markdown pages), such a number must either be
printed by the chapter's own cells, or sit in a paragraph that cites where it comes from (a link, a
`{cite}` role, "et al."). A Markdown page that links a chapter for a number must find it in that chapter's
outputs. Whole numbers and constants without a unit ("16 bytes", "α = 0.95") are not measurements and pass.
`book/CLAIMS.md` lists the causal claims with the cell or source behind each.
"""

import json
import re
from pathlib import Path

BOOK = Path(__file__).resolve().parents[1] / "book"
MEASURED = re.compile(r"(?<![\w.])[+−-]?(\d+\.\d+)\s?(?:×|x\b| points?\b| ?%)")
SOURCED = re.compile(r"\]\(https?://|\{cite|et al\.")
LINKED_CHAPTER = re.compile(r"\]\(((?:\d\d[a-z]?|A\d)_\w+\.ipynb)")


def outputs(notebook: dict) -> str:
    """Everything a notebook's cells printed or displayed."""
    parts = []
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []):
            parts.append("".join(output.get("text", "")))
            for kind in ("text/plain", "text/markdown", "text/html"):
                parts.append("".join(output.get("data", {}).get(kind, "")))
    return "\n".join(parts)


def unsupported_numbers(notebook: dict) -> list[str]:
    """Measured-looking numbers in markdown cells that no output prints and no citation covers."""
    printed, found = outputs(notebook), []
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "markdown":
            continue
        for paragraph in "".join(cell["source"]).split("\n\n"):
            if SOURCED.search(paragraph):
                continue
            found += [f"cell {index}: {m.group(0)!r}" for m in MEASURED.finditer(paragraph)
                      if m.group(1) not in printed]
    return found


def book_problems(check) -> list[str]:
    """What `check` finds in every chapter notebook, each finding led by the notebook's name."""
    problems = []
    for path in sorted(BOOK.glob("*.ipynb")):
        problems += [f"{path.name} {p}" for p in check(json.loads(path.read_text(encoding="utf-8")))]
    return problems


def test_typed_numbers_in_chapters_are_printed_by_their_cells_or_cited():
    problems = book_problems(unsupported_numbers)
    assert not problems, "typed, not measured: " + "; ".join(problems)


def test_pages_quote_only_numbers_the_linked_chapter_printed():
    printed = {p.name: outputs(json.loads(p.read_text(encoding="utf-8"))) for p in BOOK.glob("*.ipynb")}
    problems = []
    for page in sorted(BOOK.glob("*.md")):
        for line in page.read_text(encoding="utf-8").splitlines():
            chapters = LINKED_CHAPTER.findall(line)
            if not chapters or SOURCED.search(line):
                continue
            problems += [f"{page.name}: {m.group(0)!r} (not printed by {', '.join(chapters)})"
                         for m in MEASURED.finditer(line) if not any(m.group(1) in printed.get(c, "")
                                                                      for c in chapters)]
    assert not problems, "; ".join(problems)


def test_the_claim_check_catches_a_typed_number_and_passes_a_printed_or_cited_one():
    def notebook(prose: str, printed: str) -> dict:
        return {"cells": [{"cell_type": "markdown", "source": [prose]},
                          {"cell_type": "code", "source": [], "outputs": [{"text": [printed]}]}]}

    assert unsupported_numbers(notebook("Accumulation took 1.08× the time.", "ratio 0.91")) == [
        "cell 0: '1.08×'"]
    assert unsupported_numbers(notebook("Accumulation took 0.91× the time.", "ratio 0.91")) == []
    assert unsupported_numbers(notebook("[Sun et al.](https://x) gain 0.2 points.", "")) == []
    assert unsupported_numbers(notebook("16 bytes per parameter, α = 0.95.", "")) == []


def test_the_causal_claims_list_names_a_cell_or_source_for_each_claim():
    text = (BOOK / "CLAIMS.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| claim")
            and not set(line) <= set("|- ")]
    assert len(rows) >= 10
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 3 and all(cells), row
        support = cells[2]
        assert re.search(r"(?:\d\d[a-z]?|A\d)_\w+\.ipynb|https?://|hypothesis", support), row
        for notebook in re.findall(r"((?:\d\d[a-z]?|A\d)_\w+\.ipynb)", support):
            assert (BOOK / notebook).exists(), row


def cited_cells(text: str) -> list[tuple[str, int]]:
    """Every (notebook, cell index) a claim's support names: "05_x.ipynb cell 13 … and cell 21"."""
    found = []
    page = r"(?:\d\d[a-z]?|A\d)_\w+\.ipynb"
    for notebook, rest in re.findall(rf"({page})((?:[^|]*?)(?={page}|\||$))", text):
        found += [(notebook, int(k)) for k in re.findall(r"\bcells? (\d+)", rest)]
    return found


def test_every_cell_a_claim_cites_exists_and_a_cited_code_cell_has_outputs():
    """A cell number that moved when cells were added would send the reader to the wrong cell. A markdown cell
    may be cited for what it says (a hypothesis so labelled, a source cited there); a code cell for what it
    printed."""
    problems = []
    for line in (BOOK / "CLAIMS.md").read_text(encoding="utf-8").splitlines():
        for notebook, index in cited_cells(line):
            cells = json.loads((BOOK / notebook).read_text(encoding="utf-8"))["cells"]
            if index >= len(cells) or (cells[index]["cell_type"] == "code" and not cells[index].get("outputs")):
                problems.append(f"{notebook} cell {index}")
    assert not problems, "cited cells that do not exist or print nothing: " + ", ".join(problems)


def test_the_cited_cells_are_read_per_notebook():
    assert cited_cells("| x | 1 | 05_a.ipynb cell 13 (y) and cell 21 (z); 01_b.ipynb cell 2 |") == [
        ("05_a.ipynb", 13), ("05_a.ipynb", 21), ("01_b.ipynb", 2)]



def one_class_rows(notebook: dict) -> list[str]:
    """Rows of Markdown tables in a notebook's outputs whose macro-F1 column is at most 0.5 (two classes)."""
    found = []
    for cell in notebook["cells"]:
        for output in cell.get("outputs", []):
            lines = "".join(output.get("data", {}).get("text/markdown", "")).splitlines()
            header = []
            for line in lines:
                cells = [c.strip() for c in line.strip().strip("|").split("|")]
                if not line.startswith("|"):
                    header = []
                elif not header:
                    header = cells
                elif not set(line) <= set("|-: "):
                    for name, value in zip(header, cells):
                        number = re.match(r"[0-9.]+", value)
                        if name.startswith("macro-F1") and "std" not in name and number and \
                                float(number.group(0)) <= 0.5:
                            found.append(f"{cells[0]}: {name} {value}")
    return found


def test_no_committed_table_holds_a_one_class_predictor():
    """A two-class run at macro-F1 ≤ 0.5 predicts (nearly) one class: a collapsed run, not a result."""
    problems = book_problems(one_class_rows)
    assert not problems, "one-class rows: " + "; ".join(problems)


def test_the_one_class_check_reads_tables_and_can_fail():
    table = "| variant | accuracy | macro-F1 | macro-F1 std |\n|---|---|---|---|\n| a | 0.80 | 0.79 | 0.30 |\n"
    notebook = {"cells": [{"outputs": [{"data": {"text/markdown": table}}]}]}
    assert one_class_rows(notebook) == []
    collapsed = table + "| b | 0.51 | 0.36 | 0.01 |\n"
    notebook = {"cells": [{"outputs": [{"data": {"text/markdown": collapsed}}]}]}
    assert one_class_rows(notebook) == ["b: macro-F1 0.36"]
