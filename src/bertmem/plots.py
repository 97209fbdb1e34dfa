"""The recurring figures of the book; no training logic here (all chapters)."""

from __future__ import annotations

from typing import Sequence

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
