"""A classifier for texts longer than the encoder's window: windows read, their logits pooled (chapter 9).

The encoder reads each window (`data.windows` cuts them); the document's logits pool the windows' logits
(mean, max, or attention: a softmax of learned window scores). `ChunkedClassifier` trains end to end;
`read_windows`, `pooled_correct` and `fit_scorer` evaluate a trained window classifier. Memory per step grows
with the number of windows, linearly, where one long sequence grows with its square under eager attention."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

POOLINGS = ("mean", "max", "attention")


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
    names = ("logits", "vectors", "document", "labels")
    parts: dict[str, list[torch.Tensor]] = {name: [] for name in names}
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
    return WindowReading(
        **{name: torch.cat(tensors) for name, tensors in parts.items()}
    )


@torch.no_grad()
def pooled_correct(reading: WindowReading, how: str, scorer: nn.Module | None = None,
                   pool: Callable[..., torch.Tensor] = pool_windows) -> list[int]:
    """Each document's 0/1 score when `pool` pools its windows' logits `how` (attention: by `scorer`); chapter 9
    passes the `pool_windows` its page shows (ch. 9)."""
    scores = None if scorer is None else scorer(reading.vectors).squeeze(1)
    pooled = pool(reading.logits, reading.document, len(reading.labels), how, scores)
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
