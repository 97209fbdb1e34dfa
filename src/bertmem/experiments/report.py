"""What a run's evaluation says class by class, for skewed data: per-class scores, the confusion matrix, the
classes that fail, and chance as the majority class's share (chapter A1, `bertmem train`).

On a skewed file accuracy hides the small classes: answering the largest class every time scores its share.
Macro-F1 weighs every class alike; the per-class rows and the confusion matrix say which classes fail and what
they are taken for (scikit-learn's `classification_report` and `confusion_matrix` conventions)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from bertmem.loop.baseline import Predictions


def class_report(predictions: Predictions, names: list[str]) -> dict[str, Any]:
    """Per-class precision/recall/F1/support, the confusion matrix and the majority class's accuracy (A1)."""
    return {"per_class": predictions.per_class(names),
            "confusion_matrix": {"labels": list(names), "rows": "true class", "columns": "predicted class",
                                 "counts": predictions.confusion(names)},
            "majority_class_accuracy": predictions.majority_share()}


def worst_classes(per_class: list[dict[str, Any]], count: int = 3) -> list[dict[str, Any]]:
    """The classes with the lowest F1 (ties: the larger support first), at most `count` (A1)."""
    tested = [row for row in per_class if row["support"] > 0]
    return sorted(tested, key=lambda row: (row["f1"], -row["support"]))[:count]


def class_summary(final: dict[str, float], report: dict[str, Any]) -> str:
    """A few lines for the end of `bertmem train`: accuracy against chance, macro-F1, the worst classes (A1)."""
    per_class = report["per_class"]
    lines = [f"accuracy {final['accuracy']:.3f} (always answering the largest class: "
             f"{report['majority_class_accuracy']:.3f}), macro-F1 {final['macro_f1']:.3f} (the mean over the "
             f"classes the test set holds or the model predicts; {len(per_class)} classes in training)"]
    if len(per_class) > 2:
        worst = ", ".join(f"{row['class']!r} F1 {row['f1']:.2f} (recall {row['recall']:.2f}, {row['support']} "
                          f"test examples)" for row in worst_classes(per_class))
        lines.append(f"weakest classes: {worst}")
    counts = np.array(report["confusion_matrix"]["counts"])
    off = counts - np.diag(np.diag(counts))
    if off.sum():
        i, j = np.unravel_index(off.argmax(), off.shape)
        names = report["confusion_matrix"]["labels"]
        lines.append(f"most frequent confusion: {off[i, j]} {names[i]!r} examples predicted as {names[j]!r} "
                     "(confusion.png, metrics.json)")
    return "\n".join(lines)


def save_confusion(report: dict[str, Any], path: Path, title: str) -> None:
    """The confusion matrix as a figure: counts, rows the true class, columns the prediction (A1)."""
    from matplotlib.figure import Figure  # no pyplot: leaves a notebook's backend alone

    names = report["confusion_matrix"]["labels"]
    counts = np.array(report["confusion_matrix"]["counts"])
    size = max(4.0, 0.55 * len(names) + 2)
    ax = Figure(figsize=(size + 1, size)).subplots()
    plot_confusion(ax, counts, names)
    ax.set_title(title)
    ax.figure.savefig(path, dpi=120, bbox_inches="tight")


def plot_confusion(ax, counts: np.ndarray, names: list[str]):
    """Draw a confusion matrix of counts on `ax`, each row shaded by its share (recall on the diagonal) (A1)."""
    totals = counts.sum(axis=1, keepdims=True)
    shares = np.divide(counts, totals, out=np.zeros(counts.shape), where=totals > 0)
    image = ax.imshow(shares, cmap="Blues", vmin=0, vmax=1)
    ax.figure.colorbar(image, ax=ax, fraction=0.046, label="share of the true class's test examples")
    ticks = range(len(names))
    ax.set_xticks(ticks, names, rotation=45, ha="right")
    ax.set_yticks(ticks, names)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    for i in ticks:
        for j in ticks:
            if counts[i, j]:
                ax.text(j, i, str(counts[i, j]), ha="center", va="center", fontsize=8,
                        color="white" if shares[i, j] > 0.6 else "black")
    return ax
