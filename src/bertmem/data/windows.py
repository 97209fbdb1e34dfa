"""Texts longer than the encoder's window, cut into overlapping windows and batched (chapter 9).

A document's tokens (without special tokens) are cut into windows of `window` positions, [CLS] and [SEP]
included, that start every `stride` content tokens; the last window ends at the document's last token, so
every token is in at least one window and none is dropped. `model.chunked` reads and pools them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch.utils.data import DataLoader

from bertmem.data.frames import content_tokens, subsample


def default_stride(window: int) -> int:
    """Tokens of text between window starts when none is given: three quarters of a window (chapter 9)."""
    return max(1, 3 * window // 4)


def window_starts(length: int, size: int, stride: int) -> list[int]:
    """Where each window of `size` text tokens starts in `length` tokens (chapter 9).

    Starts step by `stride`; the last moves back so its window ends at the last token.
    """
    if size < 1 or not 1 <= stride <= size:
        raise ValueError(
            f"need size >= 1 and 1 <= stride <= size: got size {size}, stride {stride}"
        )
    if length <= size:
        return [0]
    starts = list(range(0, length - size, stride))
    return starts + [length - size]


def check_window(window: int | None, stride: int | None, max_length: int) -> None:
    """A window holds [CLS], [SEP] and a token, at most max_length; a stride needs a window and lies in
    [1, window - 2] (`DataConfig`, `PlanRequest`; chapter 9)."""
    if window is not None and not 3 <= window <= max_length:
        raise ValueError(f"window must be in [3, max_length={max_length}], got {window}: raise --max-length "
                         "(max_length) to read more of each text")
    if stride is not None and (window is None or not 1 <= stride <= window - 2):
        raise ValueError(f"stride needs a window and must be in [1, window - 2], got {stride}")


def window_count(length: int, window: int, stride: int) -> int:
    """How many windows of `window` positions read a text of `length` tokens, [CLS] and [SEP] counted in both
    (planner, estimates; chapter 9)."""
    return len(window_starts(max(length - 2, 1), window - 2, stride))


@dataclass(frozen=True)
class Windows:
    """The windows of a batch of documents: token ids with special tokens, and which document each is from."""

    input_ids: list[list[int]]
    document: list[int]  # index of each window's document in the batch
    starts: list[int]  # where each window starts in its document's content tokens


def split_windows(
    documents: list[list[int]], window: int, stride: int, cls_id: int, sep_id: int
) -> Windows:
    """Overlapping windows of `window` positions, [CLS] text [SEP], per text (ch. 9).

    `documents` hold token ids without special tokens; `stride` counts text tokens.
    """
    if window < 3:
        raise ValueError(f"window must hold [CLS], [SEP] and one token: got {window}")
    size = window - 2
    ids, document, starts = [], [], []
    for index, tokens in enumerate(documents):
        if not tokens:
            raise ValueError(f"document {index} has no tokens: drop it or give it text")
        for start in window_starts(len(tokens), size, stride):
            ids.append([cls_id, *tokens[start : start + size], sep_id])
            document.append(index)
            starts.append(start)
    return Windows(ids, document, starts)


def join_windows(windows: Windows, documents: int) -> list[list[int]]:
    """Each document's content tokens rebuilt from its windows: the inverse of `split_windows` (chapter 9)."""
    rebuilt: list[list[int]] = [[] for _ in range(documents)]
    for ids, index, start in zip(windows.input_ids, windows.document, windows.starts):
        content = ids[1:-1]
        tokens = rebuilt[index]
        tokens[start:] = content  # overlaps hold the same ids: later windows only extend
    return rebuilt


def pad_windows(windows: Windows, pad_id: int) -> dict[str, torch.Tensor]:
    """The windows as one padded batch: input_ids, attention_mask and each window's document index."""
    longest = max(len(ids) for ids in windows.input_ids)
    input_ids = torch.full((len(windows.input_ids), longest), pad_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for row, ids in enumerate(windows.input_ids):
        input_ids[row, :len(ids)] = torch.tensor(ids)
        attention_mask[row, :len(ids)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask,
            "document": torch.tensor(windows.document, dtype=torch.long)}


def long_subset(frame: pd.DataFrame, tokenizer, longer_than: int, size: int, seed: int = 0,
                lengths=None) -> pd.DataFrame:
    """`size` reviews, balanced per label (chapter 9's test sets) and chosen by hash, longer than `longer_than`
    tokens with [CLS] and [SEP].

    `lengths`: the texts' token counts with [CLS] and [SEP] where already known (else they are counted here).
    """
    if lengths is None:
        lengths = [len(ids) + 2 for ids in content_tokens(frame["text"], tokenizer)]
    lengths = np.asarray(lengths)
    long = frame[lengths > longer_than]
    if len(long) < size:
        raise ValueError(f"only {len(long)} of {len(frame)} texts are longer than {longer_than} tokens, {size} asked "
                         "for: read more texts, ask for fewer or lower longer_than")
    per_label = long["label"].value_counts()
    need = -(-size // len(per_label))  # a balanced set: the larger share, rounded up
    if per_label.min() < need:
        raise ValueError(f"label {per_label.idxmin()} has only {per_label.min()} texts longer than {longer_than} "
                         f"tokens, {need} needed for a balanced set of {size}: read more texts or ask for fewer")
    return subsample(long, size, seed, balance=True)


def window_loader(frame: pd.DataFrame, tokenizer, window: int, stride: int, documents_per_batch: int,
                  max_tokens: int | None = None, shuffle: bool = False, seed: int = 0,
                  split: Callable[..., Windows] = split_windows) -> DataLoader:
    """The reviews of `frame` as batches of windows, one label per review (chapter 9, `--window`).

    Each batch holds `documents_per_batch` reviews, every window of each (`document` says whose);
    `max_tokens` reads at most that many tokens of each review (None: all of it); `split` cuts them (chapter 9
    passes the one its page shows).
    """
    if stride < 1 or stride > window - 2:
        raise ValueError(f"stride must be in [1, window - 2 = {window - 2}], got {stride}")
    if "text_pair" in frame:
        raise ValueError("windows read one text per example; this frame holds text pairs: join the texts "
                         "(--join-texts) to read them in windows")
    documents = [ids[:max_tokens] for ids in content_tokens(frame["text"], tokenizer)]
    items = list(zip(documents, frame["label"].tolist()))

    def collate(batch: list[tuple[list[int], int]]) -> dict[str, torch.Tensor]:
        windows = split([ids for ids, _ in batch], window, stride, tokenizer.cls_token_id, tokenizer.sep_token_id)
        labels = torch.tensor([label for _, label in batch], dtype=torch.long)
        return {**pad_windows(windows, tokenizer.pad_token_id), "labels": labels}

    generator = torch.Generator().manual_seed(seed) if shuffle else None
    return DataLoader(items, batch_size=documents_per_batch, shuffle=shuffle, generator=generator, collate_fn=collate)
