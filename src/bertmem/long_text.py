"""Text longer than the encoder's window: overlapping windows, pooled per document (chapter 9).

A document's tokens (without special tokens) are cut into windows of `window` positions, [CLS] and [SEP]
included, that start every `stride` content tokens; the last window ends at the document's last token, so
every token is in at least one window and none is dropped. The encoder reads each window; the document's
logits pool the windows' logits (mean, max, or attention: a softmax of learned window scores). Memory per step
grows with the number of windows, linearly, where one long sequence grows with its square under eager attention.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import nn
from torch.utils.data import DataLoader

from .data import content_tokens, subsample

POOLINGS = ("mean", "max", "attention")


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


def pool_windows(
    logits: torch.Tensor,
    document: torch.Tensor,
    documents: int,
    how: str = "mean",
    scores: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-document logits over each document's windows: their mean, their maximum, or
    (attention) their mean weighted by a softmax of `scores`, one per window (ch. 9)."""
    if how not in POOLINGS:
        raise ValueError(f"pooling must be one of {POOLINGS}, got {how!r}")
    if (how == "attention") != (scores is not None):
        raise ValueError("attention pooling takes scores, one per window; mean, max none")
    document = document.to(logits.device)
    rows = logits.new_zeros(documents, logits.shape[1])
    if how == "attention":  # softmax within each document; its top score shifted to 0
        top = scores.new_full((documents,), -torch.inf)
        top = top.scatter_reduce(0, document, scores.detach(), reduce="amax")
        weights = (scores - top[document]).exp()
        total = weights.new_zeros(documents).index_add(0, document, weights)
        weights = (weights / total[document]).to(logits.dtype)
        return rows.index_add(0, document, weights.unsqueeze(1) * logits)
    index = document.unsqueeze(1).expand_as(logits)
    reduce = "mean" if how == "mean" else "amax"
    return rows.scatter_reduce(0, index, logits, reduce=reduce, include_self=False)


@dataclass(frozen=True)
class PooledOutput:
    """What `ChunkedClassifier` answers: `.logits` per document and, given labels, `.loss`, as a classifier does."""

    logits: torch.Tensor
    loss: torch.Tensor | None = None


class ChunkedClassifier(nn.Module):
    """A sequence classifier read over windows, its logits pooled per document (ch. 9).

    `forward(input_ids, attention_mask, document, labels)`: windows in, one row of
    logits per document out; the loss is the cross-entropy of the pooled logits, so
    training reaches every window (end to end). Attention pooling scores each window's
    last-layer [CLS] vector with a linear scorer that starts at zero: the mean.
    """

    def __init__(self, classifier: nn.Module, pooling: str = "mean") -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        self.classifier, self.pooling = classifier, pooling
        if pooling == "attention":
            hidden = classifier.config.hidden_size
            self.scorer = nn.Linear(hidden, 1, bias=False)  # a softmax ignores a bias
            nn.init.zeros_(self.scorer.weight)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        document: torch.Tensor,
        labels: torch.Tensor | None = None,
    ) -> PooledOutput:
        attend = self.pooling == "attention"
        out = self.classifier(
            input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=attend
        )
        scores = self.scorer(out.hidden_states[-1][:, 0]).squeeze(1) if attend else None
        documents = int(document.max()) + 1
        logits = pool_windows(out.logits, document, documents, self.pooling, scores)
        loss = None if labels is None else nn.functional.cross_entropy(logits, labels)
        return PooledOutput(logits, loss)


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
    """`size` reviews, balanced per label and chosen by hash, longer than `longer_than` tokens with [CLS] and [SEP].

    `lengths`: the texts' token counts with [CLS] and [SEP] where already known (else they are counted here).
    """
    if lengths is None:
        lengths = [len(ids) + 2 for ids in content_tokens(frame["text"], tokenizer)]
    lengths = np.asarray(lengths)
    long = frame[lengths > longer_than]
    if len(long) < size:
        raise ValueError(f"only {len(long)} of {len(frame)} texts are longer than {longer_than} tokens, {size} asked "
                         "for: read more texts, ask for fewer or lower longer_than")
    return subsample(long, size, seed)


def window_loader(frame: pd.DataFrame, tokenizer, window: int, stride: int, documents_per_batch: int,
                  max_tokens: int | None = None, shuffle: bool = False, seed: int = 0) -> DataLoader:
    """The reviews of `frame` as batches of windows, one label per review (chapter 9, `--window`).

    Each batch holds `documents_per_batch` reviews, every window of each (`document` says whose);
    `max_tokens` reads at most that many tokens of each review (None: all of it).
    """
    if stride < 1 or stride > window - 2:
        raise ValueError(f"stride must be in [1, window - 2 = {window - 2}], got {stride}")
    documents = [ids[:max_tokens] for ids in content_tokens(frame["text"], tokenizer)]
    items = list(zip(documents, frame["label"].tolist()))

    def collate(batch: list[tuple[list[int], int]]) -> dict[str, torch.Tensor]:
        windows = split_windows([ids for ids, _ in batch], window, stride, tokenizer.cls_token_id,
                                tokenizer.sep_token_id)
        labels = torch.tensor([label for _, label in batch], dtype=torch.long)
        return {**pad_windows(windows, tokenizer.pad_token_id), "labels": labels}

    generator = torch.Generator().manual_seed(seed) if shuffle else None
    return DataLoader(items, batch_size=documents_per_batch, shuffle=shuffle, generator=generator, collate_fn=collate)


@dataclass(frozen=True)
class WindowReading:
    """Every window of some documents, read once: logits, last-layer [CLS] vectors, whose document, the labels."""

    logits: torch.Tensor  # (windows, classes)
    vectors: torch.Tensor  # (windows, hidden size)
    document: torch.Tensor  # (windows,): the index of each window's document in `labels`
    labels: torch.Tensor  # (documents,)


@torch.no_grad()
def read_windows(classifier: nn.Module, batches) -> WindowReading:
    """Each window's logits and [CLS] vector, in eval mode, once (ch. 9).

    Every pooling, and a window scorer, can then work from the same reading.
    """
    classifier.eval()
    device = next(classifier.parameters()).device
    parts: dict[str, list[torch.Tensor]] = {name: [] for name in
                                            ("logits", "vectors", "document", "labels")}
    for batch in batches:
        out = classifier(
            input_ids=batch["input_ids"].to(device),
            attention_mask=batch["attention_mask"].to(device),
            output_hidden_states=True,
        )
        offset = sum(len(labels) for labels in parts["labels"])  # documents so far
        parts["logits"].append(out.logits.float().cpu())
        parts["vectors"].append(out.hidden_states[-1][:, 0].float().cpu())
        parts["document"].append(batch["document"] + offset)
        parts["labels"].append(batch["labels"])
    return WindowReading(**{name: torch.cat(tensors) for name, tensors in parts.items()})


@torch.no_grad()
def pooled_correct(reading: WindowReading, how: str, scorer: nn.Module | None = None) -> list[int]:
    """Each document's 0/1 score when its windows' logits are pooled `how` (attention: by `scorer`) (ch. 9)."""
    scores = None if scorer is None else scorer(reading.vectors).squeeze(1)
    pooled = pool_windows(reading.logits, reading.document, len(reading.labels), how, scores)
    return (pooled.argmax(-1) == reading.labels).int().tolist()


def fit_scorer(reading: WindowReading, steps: int = 100, lr: float = 1e-2) -> nn.Linear:
    """A linear window scorer for attention pooling, fitted on frozen windows (ch. 9).

    It starts at zero (every window weighs the same: the mean) and learns which
    windows to trust from the loss of the pooled logits; the encoder is not touched.
    """
    scorer = nn.Linear(reading.vectors.shape[1], 1, bias=False)
    nn.init.zeros_(scorer.weight)
    optimizer = torch.optim.AdamW(scorer.parameters(), lr=lr, weight_decay=0.1)
    documents = len(reading.labels)
    for _ in range(steps):  # full batch: the windows are read already
        scores = scorer(reading.vectors).squeeze(1)
        logits = pool_windows(
            reading.logits, reading.document, documents, "attention", scores
        )
        loss = nn.functional.cross_entropy(logits, reading.labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return scorer
