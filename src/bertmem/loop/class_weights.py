"""Class weights for a skewed file: rare classes count as much as common ones in the training loss (A1).

With $n_k$ of $n$ training examples in class $k$ of $K$, scikit-learn's "balanced" weights are
$w_k = n / (K n_k)$ (`compute_class_weight("balanced")`): a class's examples together weigh $n / K$, the same for
every class. The loss becomes the mean over examples of $w_{y_i}$ times each example's cross-entropy: where every
class has training examples the weights average 1 over the training set, so the loss keeps its scale, and the
accumulation arithmetic of chapter 2 is unchanged.

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
    """The mean over examples of w_{y_i} · cross-entropy_i, in fp32; `weights` on the logits' device (A1)."""
    per_example = nn.functional.cross_entropy(logits.float(), labels, reduction="none")
    return (weights[labels] * per_example).mean()


WEIGHTED = "_bertmem_class_weights"  # what a model carries once `weigh_classes` has hooked it: its weights


def weigh_classes(model: nn.Module, weights: torch.Tensor) -> RemovableHandle:
    """From now on the model's `.loss` in training mode is `weighted_loss` with `weights`; remove the handle to
    stop (A1)."""
    on_device: dict[torch.device, torch.Tensor] = {}  # one copy per device: no host-to-device copy per forward

    def reweigh(module: nn.Module, args: tuple, kwargs: dict[str, Any], output: Any) -> Any:
        labels = kwargs.get("labels")
        if not module.training or labels is None:
            return None  # evaluation, prediction: the output as it was
        logits = getattr(output, "logits", None)
        if logits is None:  # a tuple output (return_dict=False): training on the plain loss would be silent
            raise RuntimeError("class weights need the model's output with .logits: call it with return_dict=True")
        if logits.device not in on_device:
            on_device[logits.device] = weights.to(logits.device)
        # transformers' outputs and chapter 9's pooled windows are dataclasses: a new one with the weighted loss
        return dataclasses.replace(output, loss=weighted_loss(logits, labels, on_device[logits.device]))

    setattr(model, WEIGHTED, weights)
    return model.register_forward_hook(reweigh, with_kwargs=True)


def check_weighted(model: nn.Module, class_weights: str) -> None:
    """Refuse a recipe that asks for class weights on a model nobody weighted: it would train on the plain loss
    without a word (every backend calls this before its optimizer) (A1)."""
    if class_weights != "none" and getattr(model, WEIGHTED, None) is None:
        raise ValueError(f"class_weights={class_weights!r} needs the weights from the training labels: run through "
                         "run_experiment (bertmem train --class-weights), or call weigh_classes(model, "
                         "balanced_weights(train_labels, num_labels)) before training")


def weights_line(weights: torch.Tensor, names: Sequence[str]) -> str:
    """What a run prints once: the weights' range and the classes at each end (`bertmem train`, A1)."""
    order = sorted(range(len(names)), key=lambda k: float(weights[k]))
    low, high = order[0], order[-1]
    return (f"class weights (balanced, n / (K · n_k)): from {float(weights[low]):.2f} ({names[low]!r}) to "
            f"{float(weights[high]):.2f} ({names[high]!r}); evaluation keeps the plain loss")
