"""Text longer than the encoder's window: overlapping windows, pooled per document (chapter 9).

A document's tokens (without special tokens) are cut into windows of `window` positions, [CLS] and [SEP]
included, that start every `stride` content tokens; the last window ends at the document's last token, so
every token is in at least one window and none is dropped. The encoder reads each window; the document's
logits pool the windows' logits (mean or max). Memory per step grows with the number of windows, linearly,
where one long sequence grows with its square under eager attention.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import nn
from torch.utils.data import DataLoader

from .data import content_tokens, subsample

POOLINGS = ("mean", "max")


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
    logits: torch.Tensor, document: torch.Tensor, documents: int, how: str = "mean"
) -> torch.Tensor:
    """Per-document logits: the mean or maximum over each document's windows (ch. 9)."""
    if how not in POOLINGS:
        raise ValueError(f"pooling must be one of {POOLINGS}, got {how!r}")
    index = document.to(logits.device).unsqueeze(1).expand_as(logits)
    start = torch.zeros(
        documents, logits.shape[1], dtype=logits.dtype, device=logits.device
    )
    reduce = "mean" if how == "mean" else "amax"
    return start.scatter_reduce(0, index, logits, reduce=reduce, include_self=False)


@dataclass(frozen=True)
class PooledOutput:
    """What `ChunkedClassifier` answers: `.logits` per document and, given labels, `.loss`, as a classifier does."""

    logits: torch.Tensor
    loss: torch.Tensor | None = None


class ChunkedClassifier(nn.Module):
    """A sequence classifier read over windows, its logits pooled per document (ch. 9).

    `forward(input_ids, attention_mask, document, labels)`: windows in, one row of
    logits per document out; the loss is the cross-entropy of the pooled logits, so
    training reaches every window (end to end).
    """

    def __init__(self, classifier: nn.Module, pooling: str = "mean") -> None:
        super().__init__()
        if pooling not in POOLINGS:
            raise ValueError(f"pooling must be one of {POOLINGS}, got {pooling!r}")
        self.classifier, self.pooling = classifier, pooling

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        document: torch.Tensor,
        labels: torch.Tensor | None = None,
    ) -> PooledOutput:
        window_logits = self.classifier(
            input_ids=input_ids, attention_mask=attention_mask
        ).logits
        documents = int(document.max()) + 1
        logits = pool_windows(window_logits, document, documents, self.pooling)
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


@torch.no_grad()
def predict_windows(
    classifier: nn.Module, batches, poolings: tuple[str, ...] = POOLINGS
) -> dict[str, list[int]]:
    """Each review's 0/1 score per pooling, a classifier reading its windows (ch. 9).

    The windows are read once; each pooling combines the same window logits.
    """
    classifier.eval()
    device = next(classifier.parameters()).device
    correct: dict[str, list[int]] = {how: [] for how in poolings}
    for batch in batches:
        batch = {name: tensor.to(device) for name, tensor in batch.items()}
        logits = classifier(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]
        ).logits
        for how in poolings:
            pooled = pool_windows(logits, batch["document"], len(batch["labels"]), how)
            correct[how] += (pooled.argmax(-1) == batch["labels"]).int().tolist()
    return correct


def long_position_config(config_or_model_id, length: int):
    """A configuration whose position table holds `length` tokens (bert-base's stops at 512) (chapter 9).

    Reading 1,024 tokens as one sequence needs a longer table (new rows, trained); its shapes, not its
    values, set the memory, so the estimate only needs the longer configuration.
    """
    import copy

    from .estimate import model_config

    config = copy.deepcopy(model_config(config_or_model_id))
    config.max_position_embeddings = max(config.max_position_embeddings, length)
    return config


def estimated_long_rows(lengths: tuple[int, ...], model_id: str = "bert-base-uncased", window: int = 512,
                        stride: int = 256, precision: str = "fp16", micro_batch: int = 1) -> list[dict]:
    """The estimated step peak (GiB, a GPU's kernels) of reading documents of each length four ways (chapter 9).

    One sequence with eager attention, with fused attention (SDPA), with SDPA and gradient checkpointing, and
    as windows of `window` tokens every `stride` tokens (SDPA); `micro_batch` documents per step.
    """
    from .estimate import estimate_step_memory

    ways = {"one sequence, eager attention": dict(attention="eager"),
            "one sequence, SDPA": dict(attention="sdpa"),
            "one sequence, SDPA + checkpointing": dict(attention="sdpa", gradient_checkpointing=True)}
    rows = []
    for name, kwargs in ways.items():
        row = {"reading": name}
        for length in lengths:
            config = long_position_config(model_id, length)
            row[length] = estimate_step_memory(config, micro_batch, length, precision=precision,
                                               **kwargs).step_peak / 2**30
        rows.append(row)
    row = {"reading": f"windows of {window} every {stride} tokens, SDPA"}
    for length in lengths:
        windows = len(window_starts(length - 2, window - 2, stride))
        row[length] = estimate_step_memory(model_id, micro_batch * windows, window,
                                           precision=precision).step_peak / 2**30
    return rows + [row]


def estimated_encoder_rows(lengths: tuple[int, ...], precision: str = "fp16", micro_batch: int = 1) -> list[dict]:
    """The estimated step peak (GiB) of encoders built for long input, from their base configurations (chapter 9).

    ModernBERT-base: local attention in most layers, 8,192 positions. BigBird-RoBERTa-base: block-sparse attention,
    estimated in fp32 because its fp16 step does not trace under FakeTensorMode (a scatter of mixed dtypes).
    Longformer-base asks at run time whether any token attends globally (`.item()` on the data), which
    FakeTensorMode cannot answer: its row has no numbers. Past a configuration's own position table, the table
    is lengthened as for bert-base.
    """
    from transformers import BigBirdConfig, ModernBertConfig

    from .estimate import estimate_step_memory
    from .models import _quiet_transformers

    encoders = {"ModernBERT-base": (ModernBertConfig(), precision, "sdpa"),
                "BigBird-RoBERTa-base, fp32": (BigBirdConfig(), "fp32", "eager")}
    rows = []
    for name, (config, used, attention) in encoders.items():
        row = {"reading": name}
        for length in lengths:
            with _quiet_transformers():  # BigBird's notice that 512 tokens fall back to full attention
                report = estimate_step_memory(long_position_config(config, length), micro_batch, length,
                                              precision=used, attention=attention)
            row[length] = report.step_peak / 2**30
        rows.append(row)
    return rows + [{"reading": "Longformer-base (not traceable)", **{length: None for length in lengths}}]
