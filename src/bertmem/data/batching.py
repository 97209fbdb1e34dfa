"""Length-grouped batches: less padding, the same examples every epoch, a resumable order (chapters 5, 5b)."""

from __future__ import annotations

import itertools
from typing import Iterator, Sequence

import torch
from torch.utils.data import Sampler


class LengthGroupedBatchSampler(Sampler[list[int]]):
    """Batches of similar-length examples in a seeded, per-epoch order (chapter 5).

    Each epoch shuffles the indices, cuts them into mega-batches of `group_size` batches, sorts each
    mega-batch by length and cuts it into batches, then shuffles the batch order. Every example appears
    exactly once per epoch; the order depends only on (seed, epoch), so a resumed run sees the same batches.
    With shuffle=False the order is fixed: one sort by length (evaluation).
    """

    def __init__(self, lengths: Sequence[int], batch_size: int, shuffle: bool = True, seed: int = 0,
                 group_size: int = 50):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1 (batches per sorted mega-batch), got {group_size}")
        if len(lengths) == 0:
            raise ValueError("no examples to batch: lengths is empty")
        self.lengths = [int(n) for n in lengths]
        self.batch_size, self.shuffle, self.seed, self.group_size = batch_size, shuffle, seed, group_size
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose order the next iteration yields (called by `train` each epoch)."""
        self.epoch = int(epoch)

    def __len__(self) -> int:
        return -(-len(self.lengths) // self.batch_size)

    def batches(self) -> list[list[int]]:
        """This epoch's batches, as lists of dataset indices."""
        n, size = len(self.lengths), self.batch_size
        if not self.shuffle:
            order = sorted(range(n), key=lambda i: (-self.lengths[i], i))
            return [order[i:i + size] for i in range(0, n, size)]
        gen = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        order = torch.randperm(n, generator=gen).tolist()
        mega = size * self.group_size
        batches = []
        for start in range(0, n, mega):
            chunk = sorted(order[start:start + mega], key=lambda i: -self.lengths[i])
            batches.extend(chunk[i:i + size] for i in range(0, len(chunk), size))
        perm = torch.randperm(len(batches), generator=gen).tolist()
        return [batches[i] for i in perm]

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.batches())


def padding_share(lengths: Sequence[int], batches: Sequence[Sequence[int]], pad_to: int | None = None) -> float:
    """Fraction of the token positions in the batches that are padding (chapter 5)."""
    real = padded = 0
    for batch in batches:
        sizes = [lengths[i] for i in batch]
        width = pad_to if pad_to is not None else max(sizes)
        real += sum(sizes)
        padded += width * len(sizes)
    if padded == 0:
        raise ValueError("no batches given")
    return 1 - real / padded


def dataset_size(loader) -> int:
    """Examples in a loader (chapters 0 and 2): len(dataset) for a DataLoader, else the labels of a list of batches."""
    dataset = getattr(loader, "dataset", None)
    return len(dataset) if dataset is not None else sum(len(b["labels"]) for b in loader)


def epoch_batches(loader, epoch: int, skip: int = 0):
    """The loader's batches for `epoch`, without the first `skip` (already trained on) (chapter 5)."""
    sampler = getattr(loader, "batch_sampler", None)
    if hasattr(sampler, "set_epoch"):
        sampler.set_epoch(epoch)
    return itertools.islice(iter(loader), skip, None)


def widest_batch(loader) -> dict[str, torch.Tensor]:
    """The micro-batch with the most token positions: the one that sets the activation peak (chapters 5, 8)."""
    return max(loader, key=lambda b: b["input_ids"].numel())
