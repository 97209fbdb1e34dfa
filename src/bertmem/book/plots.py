"""The recurring figures of the book; no training logic here (all chapters)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np


def plot_token_lengths(lengths: Sequence[int], limits: Sequence[int] = (512,), ax=None, bins: int = 60):
    """Histogram of tokens per example with a vertical line at each truncation limit (chapter 0)."""
    import matplotlib.pyplot as plt

    lengths = np.asarray(lengths)
    if lengths.size == 0:
        raise ValueError("no lengths to plot")
    ax = ax or plt.subplots(figsize=(7, 3.5))[1]
    ax.hist(lengths, bins=bins, color="tab:blue", alpha=0.75)
    for limit, color in zip(limits, ("tab:red", "tab:orange", "tab:green")):
        share = float((lengths > limit).mean())
        ax.axvline(limit, color=color, linestyle="--", label=f"{limit} tokens: {share:.1%} of examples truncated")
    ax.set_xlabel("tokens per example (WordPiece, with [CLS] and [SEP])")
    ax.set_ylabel("examples")
    ax.legend()
    ax.grid(alpha=0.3)
    return ax


def markdown_table(rows: Sequence[dict], columns: Sequence[str] | None = None, floatfmt: str = ".3f") -> str:
    """Rows of dicts as a GitHub-flavoured markdown table (chapters 0 and 5)."""
    if not rows:
        raise ValueError("no rows to format")
    columns = list(columns or dict.fromkeys(key for row in rows for key in row))  # every key, first-seen order

    def cell(value) -> str:
        return format(value, floatfmt) if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(row.get(c, "")) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


class Table:
    """A table that renders as a table on the page and compares as aligned plain text (all chapters).

    Jupyter shows `text/markdown` (a real table on the website); nbval and terminals see `text/plain`.
    """

    def __init__(self, rows: Sequence[dict], columns: Sequence[str] | None = None, floatfmt: str = ".3f"):
        if not rows:
            raise ValueError("no rows to format")
        self.rows = [dict(row) for row in rows]
        self.columns = list(columns or dict.fromkeys(key for row in rows for key in row))
        self.floatfmt = floatfmt

    def cells(self) -> list[list[str]]:
        """Every row as formatted strings, in column order."""
        def cell(value) -> str:
            return format(value, self.floatfmt) if isinstance(value, float) else str(value)

        return [[cell(row.get(column, "")) for column in self.columns] for row in self.rows]

    def _repr_markdown_(self) -> str:
        return markdown_table(self.rows, self.columns, self.floatfmt)

    def __repr__(self) -> str:
        body = self.cells()
        widths = [max(len(c) for c in column) for column in zip(self.columns, *body)]
        lines = [self.columns, ["-" * w for w in widths], *body]
        return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines)


def as_table(rows: Sequence[dict], columns: Sequence[str] | None = None, floatfmt: str = ".3f") -> Table:
    """Rows of dicts as a displayable `Table`: `display(as_table(rows))` in a notebook (all chapters)."""
    return Table(rows, columns, floatfmt)


BREAKDOWN = (("parameters", "weights"), ("gradients", "gradients"), ("optimizer_state", "Adam state"),
             ("activations", "activations (saved for backward)"))


def plot_memory_breakdown(reports: dict, ax=None, unit: float = 1024**3, unit_name: str = "GiB", title: str = ""):
    """Stacked bars of weights / gradients / optimizer state / activations, one bar per report (chapter 1)."""
    import matplotlib.pyplot as plt

    if not reports:
        raise ValueError("no reports to plot")
    ax = ax or plt.subplots(figsize=(8, 4))[1]
    labels = list(reports)
    bottom = np.zeros(len(labels))
    for field, name in BREAKDOWN:
        values = np.array([getattr(reports[k], field) / unit for k in labels])
        ax.bar(labels, values, bottom=bottom, label=name)
        bottom += values
    for x, total in enumerate(bottom):
        ax.text(x, total, f"{total:.2f}", ha="center", va="bottom", fontsize=9)
    ax.set_ylabel(f"memory ({unit_name})")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    ax.tick_params(axis="x", labelrotation=20)
    return ax


TIMELINE_COLOURS = {"weights": "tab:blue", "gradients": "tab:orange", "optimizer state": "tab:green",
                    "saved activations": "tab:red", "temporaries": "tab:grey"}


def plot_step_timeline(report, ax=None, unit: float = 1024**3, unit_name: str = "GiB", title: str = ""):
    """Memory alive over one step, stacked by category, with the peak and the phases marked (chapter 1)."""
    import matplotlib.pyplot as plt

    timeline = getattr(report, "timeline", None)
    if timeline is None or not timeline.events:
        raise ValueError("the report has no timeline: measure it with measure_step_memory or estimate_step_memory")
    ax = ax or plt.subplots(figsize=(7, 3.8))[1]
    series = timeline.by_category()
    x = np.arange(len(timeline.events))
    ax.stackplot(x, *[np.array(values) / unit for values in series.values()], labels=list(series),
                 colors=[TIMELINE_COLOURS[name] for name in series], alpha=0.85)
    for phase, start in timeline.phase_starts.items():
        ax.axvline(start, color="black", linestyle=":", linewidth=1)
        ax.text(start, 0, f" {phase}", rotation=90, va="bottom", ha="left", fontsize=8)
    peak_at = max(timeline.peak_index, 0)
    ax.plot([peak_at], [timeline.peak / unit], marker="v", color="black", linestyle="none",
            label=f"peak {timeline.peak / unit:.2f} {unit_name} ({timeline.peak_phase})")
    ax.axhline(report.total / unit, color="tab:purple", linestyle="--", linewidth=1,
               label=f"sum of the four categories {report.total / unit:.2f} {unit_name}")
    ax.set_xlabel("allocations and frees during the step (in order)")
    ax.set_ylabel(f"memory alive ({unit_name})")
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3)  # below: keeps the peak visible
    ax.grid(alpha=0.3)
    return ax


def glue(name: str, value: Any, markdown: bool = False) -> None:
    """Hand a computed value to the page's prose (myst-nb `glue`, shown nowhere else) (all chapters).

    Prose cites it as {glue:text}`name:.2f` (numbers) or {glue:md}`name` (markdown=True, sentences). Nothing is
    returned, so a cell ending in `glue(...)` shows no stray value. Where myst-nb is missing (Colab, a plain
    Jupyter) nothing is recorded.
    """
    try:
        from myst_nb import glue as record
    except ImportError:
        return
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        value = value.item()  # a NumPy or torch scalar: the page formats Python numbers only
    if markdown:
        from IPython.display import Markdown

        record(name, Markdown(str(value)), display=False)
    else:
        record(name, value, display=False)
