"""Class weights for a skewed file: rare classes count as much as common ones in the training loss (A1).

With $n_k$ of $n$ training examples in class $k$ of $K$, scikit-learn's "balanced" weights are
$w_k = n / (K n_k)$ (`compute_class_weight("balanced")`): a class's examples together weigh $n / K$, the same for
every class. The loss becomes the mean over examples of $w_{y_i}$ times each example's cross-entropy, so a batch
of the old mean's size keeps its scale and the accumulation arithmetic of chapter 2 is unchanged.

The weights reach every backend the same way: a forward hook replaces the model's `.loss` in training mode, and
bertmem's own loop, Accelerate and the `Trainer` all read that. Evaluation keeps the plain cross-entropy, so its
loss compares with a run trained without weights.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

CLASS_WEIGHTINGS = ("none", "balanced")


def balanced_weights(labels: Sequence[int], num_labels: int) -> torch.Tensor:
    """n / (K · n_k) for classes 0..K-1 of `labels`, scikit-learn's "balanced"; 0 for a class with no example (A1)."""
    counts = torch.bincount(torch.as_tensor(list(labels), dtype=torch.long), minlength=num_labels).double()
    weights = counts.sum() / (num_labels * counts.clamp(min=1))
    return torch.where(counts > 0, weights, torch.zeros_like(weights)).float()


def weighted_loss(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """The mean over examples of w_{y_i} · cross-entropy_i, in fp32 (A1)."""
    per_example = nn.functional.cross_entropy(logits.float(), labels, reduction="none")
    return (weights.to(per_example.device)[labels] * per_example).mean()


def weigh_classes(model: nn.Module, weights: torch.Tensor) -> RemovableHandle:
    """From now on the model's `.loss` in training mode is `weighted_loss` with `weights`; remove the handle to
    stop (A1)."""

    def reweigh(module: nn.Module, args: tuple, kwargs: dict[str, Any], output: Any) -> Any:
        labels = kwargs.get("labels")
        if not module.training or labels is None or getattr(output, "logits", None) is None:
            return None  # evaluation, prediction: the output as it was
        loss = weighted_loss(output.logits, labels, weights)
        if dataclasses.is_dataclass(output):  # a frozen dataclass (chapter 9's pooled windows)
            return dataclasses.replace(output, loss=loss)
        output["loss"] = loss  # a transformers ModelOutput: key and attribute both
        return output

    return model.register_forward_hook(reweigh, with_kwargs=True)


def weights_line(weights: torch.Tensor, names: Sequence[str]) -> str:
    """What a run prints once: the weights' range and the classes at each end (`bertmem train`, A1)."""
    order = sorted(range(len(names)), key=lambda k: float(weights[k]))
    low, high = order[0], order[-1]
    return (f"class weights (balanced, n / (K · n_k)): from {float(weights[low]):.2f} ({names[low]!r}) to "
            f"{float(weights[high]):.2f} ({names[high]!r}); evaluation keeps the plain loss")
