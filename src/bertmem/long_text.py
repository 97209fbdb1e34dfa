"""Text longer than the encoder's window: overlapping windows, pooled per document (chapter 9).

A document's tokens (without special tokens) are cut into windows of `window` positions, [CLS] and [SEP]
included, that start every `stride` content tokens; the last window ends at the document's last token, so
every token is in at least one window and none is dropped. The encoder reads each window; the document's
logits pool the windows' logits (mean or max). Memory per step grows with the number of windows, linearly,
where one long sequence grows with its square under eager attention.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

POOLINGS = ("mean", "max")


def window_starts(length: int, size: int, stride: int) -> list[int]:
    """Where each window of `size` content tokens starts in a text of `length` tokens (chapter 9).

    Starts step by `stride`; the last start is moved so that its window ends at the last token.
    """
    if size < 1 or not 1 <= stride <= size:
        raise ValueError(f"need size >= 1 and 1 <= stride <= size, got size {size} and stride {stride}")
    if length <= size:
        return [0]
    starts = list(range(0, length - size, stride))
    return starts + [length - size]


@dataclass(frozen=True)
class Windows:
    """The windows of a batch of documents: token ids with special tokens, and which document each is from."""

    input_ids: list[list[int]]
    document: list[int]  # index of each window's document in the batch
    starts: list[int]  # where each window starts in its document's content tokens


def split_windows(documents: list[list[int]], window: int, stride: int, cls_id: int, sep_id: int) -> Windows:
    """Overlapping windows of `window` positions ([CLS] + content + [SEP]) for each document (chapter 9).

    `documents` hold content token ids without special tokens; `stride` counts content tokens.
    """
    if window < 3:
        raise ValueError(f"window must hold [CLS], [SEP] and at least one token: got {window}")
    size = window - 2
    ids, document, starts = [], [], []
    for index, tokens in enumerate(documents):
        if not tokens:
            raise ValueError(f"document {index} has no tokens: drop it or give it text")
        for start in window_starts(len(tokens), size, stride):
            ids.append([cls_id, *tokens[start:start + size], sep_id])
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


def pool_windows(logits: torch.Tensor, document: torch.Tensor, documents: int, how: str = "mean") -> torch.Tensor:
    """Per-document logits from per-window logits: the mean or the maximum over each document's windows."""
    if how not in POOLINGS:
        raise ValueError(f"pooling must be one of {POOLINGS}, got {how!r}")
    index = document.to(logits.device).unsqueeze(1).expand_as(logits)
    start = torch.zeros(documents, logits.shape[1], dtype=logits.dtype, device=logits.device)
    reduce = "mean" if how == "mean" else "amax"
    return start.scatter_reduce(0, index, logits, reduce=reduce, include_self=False)


class ChunkedClassifier(nn.Module):
    """A sequence classifier applied to windows, its logits pooled per document (chapter 9).

    `forward(input_ids, attention_mask, document, labels)`: windows in, one row of logits per document out;
    with labels, the loss is cross-entropy of the pooled logits, trained end to end through every window.
    """

    def __init__(self, classifier: nn.Module, pooling: str = "mean") -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        self.classifier, self.pooling = classifier, pooling

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, document: torch.Tensor,
                labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        window_logits = self.classifier(input_ids=input_ids, attention_mask=attention_mask).logits
        documents = int(document.max()) + 1
        logits = pool_windows(window_logits, document, documents, self.pooling)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = nn.functional.cross_entropy(logits, labels)
        return out


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
