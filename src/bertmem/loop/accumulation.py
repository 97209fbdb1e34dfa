"""Gradient accumulation that equals the big batch: windows, loss weights, step counts (chapter 2)."""

from __future__ import annotations

import contextlib
import math
import warnings
from dataclasses import dataclass
from typing import Iterable, Iterator

import torch

from bertmem.core.devices import empty_cache, move_to, resolve_device

WEIGHTINGS = ("examples", "tokens")


@dataclass(frozen=True)
class AccumulationPlan:
    """Micro-batch, accumulation steps and the derived step counts for one epoch (chapters 2 and 6)."""

    micro_batch: int
    accumulation_steps: int
    dataset_size: int

    def __post_init__(self) -> None:
        for name in ("micro_batch", "accumulation_steps", "dataset_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")

    @property
    def effective_batch(self) -> int:
        """Examples per optimizer step: micro-batch × accumulation steps."""
        return self.micro_batch * self.accumulation_steps

    @property
    def micro_batches_per_epoch(self) -> int:
        """Forward/backward passes per epoch (the last micro-batch may be short)."""
        return math.ceil(self.dataset_size / self.micro_batch)

    @property
    def optimizer_steps_per_epoch(self) -> int:
        """Optimizer (and scheduler) steps per epoch; a short last window still makes one step."""
        return optimizer_steps(self.micro_batches_per_epoch, self.accumulation_steps)[0]

    def warmup_steps(self, epochs: int, warmup_ratio: float = 0.1) -> int:
        """Warmup length in optimizer steps (not micro-batches) for a run of `epochs`."""
        return math.ceil(warmup_ratio * epochs * self.optimizer_steps_per_epoch)


def optimizer_steps(micro_batches: int, accumulation_steps: int, epochs: int = 1, max_steps: int | None = None,
                    processes: int = 1) -> tuple[int, int]:
    """Optimizer steps per epoch and in all, for every loop of the book (chapters 2, 5 and 7).

    Each of `processes` data-parallel copies sees every processes-th micro-batch; a short last window still
    makes a step; `max_steps` caps the total (the scheduler's length).
    """
    if min(micro_batches, accumulation_steps, epochs, processes) < 1:
        raise ValueError("micro_batches, accumulation_steps, epochs and processes must be >= 1, got "
                         f"{micro_batches}, {accumulation_steps}, {epochs} and {processes}")
    per_epoch = math.ceil(math.ceil(micro_batches / processes) / accumulation_steps)
    total = epochs * per_epoch
    return per_epoch, min(total, max_steps) if max_steps else total


def plan_for(effective_batch: int, fits: int, dataset_size: int) -> AccumulationPlan:
    """The plan reaching `effective_batch` with micro-batches of at most `fits` examples (chapters 2 and 6)."""
    if effective_batch < 1 or fits < 1:
        raise ValueError(f"effective_batch and fits must be >= 1, got {effective_batch} and {fits}")
    steps = math.ceil(effective_batch / fits)
    while effective_batch % steps:  # prefer an exact split: micro × steps == target
        steps += 1
    return AccumulationPlan(effective_batch // steps, steps, dataset_size)


def split_batch(batch: dict[str, torch.Tensor], sizes: list[int]) -> list[dict[str, torch.Tensor]]:
    """Cut one batch into micro-batches of the given sizes, in order (chapter 2)."""
    n = len(batch["labels"])
    if sum(sizes) != n or min(sizes) < 1:
        raise ValueError(f"micro-batch sizes {sizes} must be positive and add up to the batch size {n}")
    out, start = [], 0
    for size in sizes:
        out.append({k: v[start:start + size] for k, v in batch.items()})
        start += size
    return out


def windows(loader: Iterable, accumulation_steps: int) -> Iterator[list]:
    """Micro-batches in windows of one optimizer step; the last may be short (ch. 2)."""
    if accumulation_steps < 1:
        raise ValueError(f"accumulation_steps must be >= 1, got {accumulation_steps}")
    window: list = []
    for micro in loader:
        window.append(micro)
        if len(window) == accumulation_steps:
            yield window
            window = []
    if window:
        yield window


def count_items(micro: dict, weighting: str = "examples") -> int:
    """Examples in a micro-batch, or (weighting='tokens') its labelled tokens, labels != -100 (chapter 2)."""
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")
    labels = micro["labels"]
    if weighting == "examples":
        return int(labels.shape[0])
    return int((labels != -100).sum())


def loss_weights(window: list, weighting: str = "examples") -> list[float]:
    """Each micro-batch's share of the window: the weighted losses sum to the mean."""
    counts = [count_items(micro, weighting) for micro in window]
    total = sum(counts)
    if total == 0:
        raise ValueError("the window has no labelled items to average over")
    return [c / total for c in counts]


def sync_context(model: torch.nn.Module, last: bool):
    """`model.no_sync()` for non-final micro-batches under DDP (no all-reduce until the window ends)."""
    if not last and hasattr(model, "no_sync"):
        return model.no_sync()
    return contextlib.nullcontext()


def check_dataset_fits(dataset_size: int, effective_batch: int) -> None:
    """Warn when one epoch holds less than one effective batch (every step then sees fewer examples)."""
    if dataset_size < effective_batch:
        warnings.warn(f"the dataset has {dataset_size} examples, fewer than one effective batch of "
                      f"{effective_batch}: every optimizer step averages over the {dataset_size} available. "
                      "Lower accumulation_steps or the micro-batch size.", stacklevel=3)


def backward_window(model: torch.nn.Module, window: list,
                    device: torch.device | str | None = None,
                    weighting: str = "examples", scale=None, autocast=None) -> float:
    """Backward each micro-batch, its loss weighted by its share; the loss (ch. 2).

    The micro-batches go to `device`, by default the model's. `autocast` (optional)
    returns the context for the forward pass and `scale` wraps each weighted loss
    before backward, e.g. a `torch.autocast` factory and `GradScaler.scale` (ch. 3).
    """
    device = resolve_device(model, device)
    weights = loss_weights(window, weighting)
    total = 0.0
    for j, (micro, weight) in enumerate(zip(window, weights)):
        micro = move_to(micro, device)
        with sync_context(model, last=j == len(window) - 1):  # DDP: sync once
            with autocast() if autocast is not None else contextlib.nullcontext():
                loss = model(**micro).loss.float() * weight
            (scale(loss) if scale is not None else loss).backward()
        total += loss.item()
    return total


def split_evenly(micro: dict[str, torch.Tensor], parts: int) -> list[dict[str, torch.Tensor]]:
    """Cut a micro-batch into `parts` near-equal pieces (fewer when it has fewer examples) (chapter 5b)."""
    n = len(micro["labels"])
    parts = max(1, min(parts, n))
    base, extra = divmod(n, parts)
    return split_batch(micro, [base + (1 if i < extra else 0) for i in range(parts)])


def is_out_of_memory(err: BaseException) -> bool:
    """True for a CUDA (or other accelerator) out-of-memory error."""
    return isinstance(err, torch.OutOfMemoryError) or "out of memory" in str(err).lower()


def backward_with_backoff(model: torch.nn.Module, window: list,
                          device: torch.device | str, weighting: str, splits: int,
                          backoff: bool, scale=None,
                          autocast=None) -> tuple[float, int]:
    """`backward_window`, cutting micro-batches in 2, 4, … on out-of-memory (ch. 5b).

    Halving the micro-batch and doubling the accumulation keeps the effective batch
    (and, with the loss weights of chapter 2, the gradient). Returns the window's loss
    and the number of pieces now in use.
    """
    while True:
        pieces = window
        if splits > 1:
            pieces = [p for micro in window for p in split_evenly(micro, splits)]
        try:
            loss = backward_window(model, pieces, device, weighting, scale=scale,
                                   autocast=autocast)
            return loss, splits
        except (torch.OutOfMemoryError, RuntimeError) as err:
            if not (backoff and is_out_of_memory(err)):
                raise
            smallest = min(len(micro["labels"]) for micro in window)
            if splits >= smallest:
                raise RuntimeError(
                    f"out of memory even with micro-batches of one example ({err}); "
                    "shorten max_length, enable gradient checkpointing or use a "
                    "smaller model") from err
            model.zero_grad(set_to_none=True)  # drop the partial window; redo it
            empty_cache(device)
            largest = max(len(micro["labels"]) for micro in window)
            splits *= 2
            examples = sum(len(m["labels"]) for m in window)
            warnings.warn(
                f"out of memory with micro-batches of {-(-largest * 2 // splits)} "
                f"examples: retrying with {-(-largest // splits)} per micro-batch and "
                f"{splits}× the accumulation steps (effective batch unchanged: "
                f"{examples})", stacklevel=2)
