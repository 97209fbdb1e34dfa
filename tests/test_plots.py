"""The book's tables render as tables on the page and compare as plain text (all chapters)."""

import json
from pathlib import Path

import pytest

from bertmem.book.plots import Table, as_table

BOOK = Path(__file__).resolve().parents[1] / "book"


def test_table_renders_markdown_and_aligned_plain_text():
    t = as_table([{"variant": "fp32", "GiB": 20.93}, {"variant": "full recipe", "GiB": 2.5}], floatfmt=".2f")
    assert isinstance(t, Table)
    assert t._repr_markdown_().splitlines() == ["| variant | GiB |", "|---|---|", "| fp32 | 20.93 |",
                                                "| full recipe | 2.50 |"]
    assert repr(t).splitlines() == ["variant      GiB", "-----------  -----", "fp32         20.93",
                                    "full recipe  2.50"]
    assert "|" not in repr(t)  # nbval and terminals never see markdown source


def test_table_keeps_every_column_in_first_seen_order():
    t = as_table([{"a": 1}, {"b": 2, "a": 3}])
    assert t.columns == ["a", "b"] and t.cells() == [["1", ""], ["3", "2"]]
    with pytest.raises(ValueError, match="no rows"):
        as_table([])


def test_no_notebook_prints_a_markdown_table():
    printed = []
    for notebook in sorted(BOOK.glob("*.ipynb")):
        for index, cell in enumerate(json.loads(notebook.read_text())["cells"]):
            source = "".join(cell["source"])
            uses = "print(markdown_table(" in source or "Markdown(markdown_table(" in source
            if cell["cell_type"] == "code" and uses:
                printed.append(f"{notebook.name} cell {index}")
    assert not printed, f"use display(as_table(rows)) instead: {printed}"


def test_glue_records_values_for_the_prose_and_returns_them(monkeypatch):
    import sys
    import types

    from bertmem.book.plots import glue

    recorded = {}
    fake = types.SimpleNamespace(glue=lambda name, value, display=True: recorded.update({name: (value, display)}))
    monkeypatch.setitem(sys.modules, "myst_nb", fake)
    assert glue("ratio", 0.25) is None and recorded["ratio"] == (0.25, False)  # None: no stray Out[] value
    import numpy as np

    glue("numpy", np.float64(0.5))
    assert type(recorded["numpy"][0]) is float  # myst-nb formats {glue:text}`numpy:.2f` from a Python float
    glue("verdict", "within *noise*", markdown=True)
    assert recorded["verdict"][0].data == "within *noise*"
    monkeypatch.setitem(sys.modules, "myst_nb", None)  # not installed (Colab): nothing recorded, value returned
    glue("other", 3)
    assert "other" not in recorded
