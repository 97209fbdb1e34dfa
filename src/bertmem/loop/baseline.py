"""The plainest correct fine-tuning loop and what it returns (chapter 0); later chapters add one piece each.

`train_baseline` is the loop chapter 0 shows: fp32, AdamW, linear warmup and decay, gradient clipping,
evaluation after each epoch. `bertmem.loop.combined.train` composes the same steps with the pieces of chapters
2-5; with every feature off (chapter 5's fused AdamW kernel too: `fused_optimizer=False`) it gives
bit-identical losses and weights (tests/test_loop.py)."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
import torch

from bertmem.core.devices import model_device, move_to, resolve_device
from bertmem.core.runtime import progress as progress_bar
from bertmem.core.runtime import seed_everything
from bertmem.loop.optim import BASE_LEARNING_RATE


@dataclass
class TrainResult:
    """What a run produced: per-step history, per-epoch metrics and timing; plots itself (chapter 0)."""

    # per optimizer step: step, epoch, loss, lr, step_time_s (and grad_norm, loss_scale when they apply)
    history: list[dict[str, float]] = field(default_factory=list)
    epochs: list[dict[str, float]] = field(default_factory=list)  # epoch, train_time_s, examples_per_s, metrics
    precision: str = "fp32"
    skipped_steps: int = 0  # optimizer steps the fp16 loss scaler skipped after an overflow
    backoffs: list[dict[str, int]] = field(default_factory=list)  # out-of-memory back-offs (chapter 5b)
    num_processes: int = 1  # data-parallel processes (Accelerate, chapter 7)
    rank: int = 0  # this process's index among them
    rank_bytes: dict[str, int] | None = None  # this process's parameter/optimizer bytes (chapters 5, 7)
    # the last evaluation's 0/1 score per test example, in the test set's order: for paired comparisons (ch. 5)
    correct: list[int] | None = None
    predictions: "Predictions | None" = None  # the last evaluation's predicted and true labels (A1)
    checkpoint_saves: int = 0  # checkpoints written by this process (chapter 5b)
    checkpoint_time_s: float = 0.0  # the time they took
    checkpoint_after_epochs_s: float = 0.0  # of which at epochs' ends, outside the epochs' train_time_s

    @property
    def checkpoint_share(self) -> float:
        """The share of training plus saving time spent writing checkpoints (chapter 5b)."""
        total = sum(e.get("train_time_s", 0.0) for e in self.epochs) + self.checkpoint_after_epochs_s
        return self.checkpoint_time_s / total if total else 0.0

    @property
    def periodic_checkpoint_share(self) -> float:
        """The share spent on the saves inside epochs (every N steps or minutes): what a longer interval cuts."""
        total = sum(e.get("train_time_s", 0.0) for e in self.epochs) + self.checkpoint_after_epochs_s
        periodic = self.checkpoint_time_s - self.checkpoint_after_epochs_s
        return periodic / total if total else 0.0

    @property
    def final_metrics(self) -> dict[str, float]:
        """Metrics of the last evaluated epoch (empty when no evaluation ran)."""
        return self.epochs[-1] if self.epochs else {}

    @property
    def losses(self) -> list[float]:
        """The training loss of every optimizer step."""
        return [h["loss"] for h in self.history]

    def plot(self, ax=None, smooth: int = 10, label: str | None = None):
        """Loss per optimizer step, raw and smoothed by a running mean over `smooth` steps."""
        import matplotlib.pyplot as plt

        ax = ax or plt.subplots(figsize=(7, 3.5))[1]
        steps = [h["step"] for h in self.history]
        line, = ax.plot(steps, self.losses, alpha=0.3, label=None)
        if len(self.losses) >= smooth > 1:
            kernel = np.ones(smooth) / smooth
            ax.plot(steps[smooth - 1:], np.convolve(self.losses, kernel, mode="valid"), color=line.get_color(),
                    label=label or f"running mean ({smooth} steps)")
            ax.legend()
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("training loss (cross-entropy, nats)")
        ax.grid(alpha=0.3)
        return ax


@dataclass(frozen=True)
class Predictions:
    """A model's predicted and true labels per test example and its mean loss (chapters 0, 5)."""

    predicted: np.ndarray
    labels: np.ndarray
    loss: float

    def metrics(self) -> dict[str, float]:
        """Accuracy, macro-F1 (scikit-learn) and the mean loss."""
        from sklearn.metrics import accuracy_score, f1_score

        return {"accuracy": float(accuracy_score(self.labels, self.predicted)),
                "macro_f1": float(f1_score(self.labels, self.predicted, average="macro")),
                "eval_loss": self.loss}

    def majority_share(self) -> float:
        """The accuracy of always answering the most frequent test class: chance for skewed data (ch. 0, A1)."""
        return float(np.bincount(self.labels).max() / len(self.labels)) if len(self.labels) else float("nan")

    def per_class(self, names: list[str]) -> list[dict[str, float | int | str]]:
        """Precision, recall, F1 and support of every class, by name, as scikit-learn computes them (A1)."""
        from sklearn.metrics import precision_recall_fscore_support

        precision, recall, f1, support = precision_recall_fscore_support(
            self.labels, self.predicted, labels=list(range(len(names))), zero_division=0)
        return [{"class": name, "precision": float(p), "recall": float(r), "f1": float(f), "support": int(n)}
                for name, p, r, f, n in zip(names, precision, recall, f1, support)]

    def confusion(self, names: list[str]) -> list[list[int]]:
        """Counts: row i, column j = test examples of class i predicted as class j (A1)."""
        from sklearn.metrics import confusion_matrix

        return confusion_matrix(self.labels, self.predicted, labels=list(range(len(names)))).tolist()


def loader_order(loader) -> list[int] | None:
    """The dataset index of every example in the order a fixed-order loader yields them; None if unknown."""
    from torch.utils.data import DataLoader, RandomSampler

    if not isinstance(loader, DataLoader) or isinstance(loader.sampler, RandomSampler):
        return None
    sampler = loader.batch_sampler
    if getattr(sampler, "shuffle", False):  # a shuffled length-grouped sampler: no fixed order
        return None
    return [int(i) for batch in sampler for i in batch]


@torch.no_grad()
def predict(model: torch.nn.Module, loader: Iterable[dict], device: str | None = None,
            show_progress: bool = False) -> Predictions:
    """Predicted and true labels over a loader, in the dataset's order where the loader's is fixed (ch. 0, 5)."""
    device = resolve_device(model, device)
    model.eval()
    preds, labels, losses, counts = [], [], [], []
    for batch in progress_bar(loader, "eval", enabled=show_progress, leave=False):
        batch = move_to(batch, device)
        out = model(**batch)
        preds.append(out.logits.argmax(-1).cpu())
        labels.append(batch["labels"].cpu())
        losses.append(float(out.loss) * len(batch["labels"]))
        counts.append(len(batch["labels"]))
    y_pred, y_true = torch.cat(preds).numpy(), torch.cat(labels).numpy()
    order = loader_order(loader)
    if order is not None and len(order) == len(y_pred):  # back to the dataset's order: examples line up
        back = np.empty(len(order), dtype=int)
        back[np.asarray(order)] = np.arange(len(order))
        y_pred, y_true = y_pred[back], y_true[back]
    return Predictions(y_pred, y_true, sum(losses) / sum(counts))


def evaluate(model: torch.nn.Module, loader: Iterable[dict], device: str | None = None,
             show_progress: bool = False) -> dict[str, float]:
    """Accuracy, macro-F1 (scikit-learn) and mean loss over a loader, on the model's device (chapter 0)."""
    return predict(model, loader, device, show_progress).metrics()


def evaluate_into(result: TrainResult, model: torch.nn.Module, loader: Iterable[dict],
                  show_progress: bool = False) -> dict[str, float]:
    """`evaluate`, keeping each test example's 0/1 score on `result.correct` for paired comparisons (ch. 5)."""
    predictions = predict(model, loader, show_progress=show_progress)
    result.correct = (predictions.predicted == predictions.labels).astype(int).tolist()
    result.predictions = predictions
    return predictions.metrics()


def train_baseline(
    model: torch.nn.Module,
    train_loader,
    eval_loader=None,
    epochs: int = 1,
    learning_rate: float = BASE_LEARNING_RATE,
    weight_decay: float = 0.01,
    warmup_ratio: float = 0.1,
    max_grad_norm: float = 1.0,
    seed: int = 0,
    progress: bool = True,
) -> TrainResult:
    """fp32 fine-tuning: AdamW, linear warmup and decay, clipping (chapter 0)."""
    from transformers import get_linear_schedule_with_warmup

    seed_everything(seed)  # dropout masks: same seed, same run
    device = model_device(model)  # the model was placed once; batches follow it
    params = [p for p in model.parameters() if p.requires_grad]
    total = epochs * len(train_loader)  # optimizer steps: one per batch
    optimizer = torch.optim.AdamW(params, learning_rate, weight_decay=weight_decay)
    warmup = math.ceil(warmup_ratio * total)
    scheduler = get_linear_schedule_with_warmup(optimizer, warmup, total)
    result = TrainResult()
    for epoch in range(1, epochs + 1):
        model.train()
        start, seen = time.perf_counter(), 0
        for batch in progress_bar(train_loader, f"epoch {epoch}/{epochs}", progress):
            loss = model(**move_to(batch, device)).loss  # mean over the batch
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, max_grad_norm)  # rare huge steps
            optimizer.step()
            scheduler.step()  # the learning rate of the next step
            optimizer.zero_grad(set_to_none=True)  # free until the next backward
            seen += len(batch["labels"])
            lr, step = scheduler.get_last_lr()[0], len(result.history) + 1
            result.history.append(
                {"step": step, "epoch": epoch, "loss": loss.item(), "lr": lr}
            )
        elapsed = time.perf_counter() - start
        record = {"epoch": epoch, "train_time_s": elapsed, "examples": seen}
        record["examples_per_s"] = seen / elapsed
        if eval_loader is not None:
            record.update(evaluate(model, eval_loader))
        result.epochs.append(record)
    return result
