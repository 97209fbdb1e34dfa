"""How long an epoch takes on a card, estimated: FLOPs over the card's training rate, with a floor per micro-step
(`bertmem train`'s plan, `bertmem plan`; chapters' minutes use the FLOP count alone).

Training costs the model's matrix multiplies (`bertmem.model.matmuls`, the count the bench's MFU divides; for an
architecture the count does not cover, the book's fallback 6 · non-embedding parameters · tokens, Kaplan et al.'s
6N) at the rate a BERT fine-tune reaches on the card (`Card.training_tflops`, in the same count: measured where the
book has a measurement, else the datasheet peak times an assumed utilisation). Every example is taken at the mean
length, so attention's s² is counted at the mean's square, a little under the mean of the squares. A FLOP count
alone gives 8 × 4 and 32 × 1 the same time, but a small micro-batch's step does not shrink with its work (launch
overhead is A3's hypothesis for why): appendix A3 measured a forward and backward pass of bert-base at micro-batch 8
taking 27–34 ms (medians, lengths already seen) for lengths from 82 to 512 tokens on an H200, so no micro-step is
estimated faster than the fastest of those. An estimate, never a measurement: every line it prints says so."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.resources import files

import torch

from bertmem.memory.cards import Card, with_article
from bertmem.model.matmuls import MatmulShape


def six_n_flops(non_embedding: int, tokens: float) -> float:
    """6 · non-embedding parameters · tokens: the book's fallback for one forward and backward pass over `tokens` of
    an architecture the matmul count does not cover (DeBERTa-v3). Kaplan et al. (2020)'s C ≈ 6N per token, with N the
    parameters less the embeddings module's (`bertmem.model.matmuls.non_embedding_parameters`), which look tokens up
    and multiply nothing (98 M of DeBERTa-v3-base's 184 M). Like 6N it leaves out attention's products, QKᵀ and its
    product with the values (and DeBERTa's relative-position terms): for bert-base at 512 tokens, which the count
    covers, 6N is 9 % below it."""
    return 6.0 * non_embedding * tokens


@dataclass(frozen=True)
class ModelWork:
    """What one training example costs a model, as the time estimate counts it: its matrix multiplies, or the
    fallback 6 · non-embedding parameters · tokens where the count does not cover the architecture (`shape` None;
    `non_embedding` is then required). `parameters`: the classifier's own, embeddings included."""

    parameters: int
    shape: MatmulShape | None = None
    non_embedding: int | None = None  # the parameters less the embeddings module's: Kaplan et al.'s N

    def __post_init__(self) -> None:
        if self.shape is None and self.non_embedding is None:
            raise ValueError("a model the matmul count does not cover needs its non-embedding parameters "
                             "(the fallback 6 · non-embedding parameters · tokens)")

    def example_flops(self, tokens: float, checkpointing: bool = False) -> float:
        """FLOPs of training on one example of `tokens` tokens: forward and backward, and with gradient
        checkpointing the forward of the layers backward reaches once more (`MatmulShape.recompute_flops`;
        uncounted: 2 · non-embedding parameters · tokens)."""
        lengths = torch.tensor([tokens], dtype=torch.float64)
        if self.shape is None:
            n = self.non_embedding
            return six_n_flops(n, tokens) + (2.0 * n * tokens if checkpointing else 0.0)
        training = self.shape.training_flops(lengths)
        return training + self.shape.recompute_flops(lengths) if checkpointing else training

    def example_forward_flops(self, tokens: float) -> float:
        """Forward FLOPs of one example of `tokens` tokens (an evaluation pass): 2 · non-embedding parameters ·
        tokens uncounted."""
        if self.shape is None:
            return 2.0 * self.non_embedding * tokens
        return self.shape.forward_flops(torch.tensor([tokens], dtype=torch.float64))

    def counted_as(self) -> str:
        """How the FLOPs were counted, for the estimate's basis line."""
        return ("matmul FLOPs as chapter 5 counts them" if self.shape is not None
                else "6 · non-embedding parameters · tokens (the matmul count does not cover this model)")


BOOK_EXAMPLES = 25_000  # IMDb's training reviews: the epoch the estimates assume unless told another


@dataclass(frozen=True)
class EpochRequest:
    """The data an epoch's time is estimated for (`bertmem plan`, the "Will it fit?" page)."""

    train_size: int = field(default=BOOK_EXAMPLES, metadata={
        "help": "training examples per epoch, for the time estimate (default: IMDb's 25,000 reviews)"})
    tokens_per_example: float | None = field(default=None, metadata={
        "help": "mean tokens per training example as the card computes them (with the padding your batches "
                "carry), for the time estimate (default: IMDb's reviews cut at --max-length, counted with BERT's "
                "tokenizer, no padding)"})

    def __post_init__(self) -> None:
        if self.train_size < 1 or (self.tokens_per_example is not None and self.tokens_per_example <= 0):
            raise ValueError(f"--train-size and --tokens-per-example must be positive, got {self.train_size} and "
                             f"{self.tokens_per_example}")


@lru_cache(maxsize=None)
def book_length_counts() -> tuple[tuple[int, int], ...]:
    """IMDb's training reviews as (tokens, how many), uncut (`scripts/imdb_token_lengths.py`)."""
    recorded = json.loads(files("bertmem").joinpath("recorded", "imdb-token-lengths.json").read_text(encoding="utf-8"))
    return tuple((int(n), int(c)) for n, c in recorded["counts"])


def book_tokens_per_example(max_length: int) -> float:
    """IMDb's mean tokens per training review when cut at `max_length`: the time estimates' default data."""
    counts = book_length_counts()
    return sum(min(n, max_length) * c for n, c in counts) / sum(c for _, c in counts)


@lru_cache(maxsize=None)
def micro_step_floor_seconds() -> float:
    """The fastest forward+backward A3 measured for bert-base at micro-batch 8 on an H200 (lengths already seen,
    cuDNN attention off): the time below which no micro-step is estimated."""
    recorded = json.loads(files("bertmem").joinpath("recorded", "gpu-nvidia-h200.json").read_text(encoding="utf-8"))
    rows = recorded["sdpa shapes"]["rows"]
    return min(row["second pass median (ms)"] for row in rows.values()) / 1000


@dataclass(frozen=True)
class EpochEstimate:
    """An estimated training epoch on a card: its time, and what the estimate rests on (plan, train)."""

    seconds: float
    micro_steps: int
    tokens: int
    seconds_per_micro_step: float
    bound: str  # "compute" (FLOPs over the rate) or "per-step floor" (A3's fastest measured step)
    rate_tflops: float
    card: str
    basis: str

    def line(self) -> str:
        """'about 4 min per epoch on a Colab T4 (estimated: ...)'."""
        minutes = self.seconds / 60
        took = (f"about {minutes:.0f} min" if minutes >= 1 else f"about {self.seconds:.0f} s" if self.seconds >= 1
                else "under 1 s")
        return (f"{took} per epoch on {with_article(self.card)} (estimated: {self.micro_steps} micro-steps of "
                f"{1000 * self.seconds_per_micro_step:.0f} ms, {self.bound}-bound; {self.basis})")


def epoch_estimate(work: ModelWork, examples: int, tokens_per_example: float, micro_batch: int, card: Card,
                   precision: str, checkpointing: bool = False) -> EpochEstimate:
    """One epoch of `examples` at `micro_batch` on `card`: each micro-step the larger of its FLOPs over the
    card's training rate and A3's measured floor. `tokens_per_example` counts padding (what the card computes);
    with gradient checkpointing the forward runs twice."""
    if examples < 1 or micro_batch < 1 or tokens_per_example <= 0:
        raise ValueError(f"examples, micro_batch and tokens_per_example must be positive, got {examples}, "
                         f"{micro_batch}, {tokens_per_example}")
    steps = math.ceil(examples / micro_batch)
    rate = card.training_tflops(precision)
    compute = micro_batch * work.example_flops(tokens_per_example, checkpointing) / (rate * 1e12)
    floor = micro_step_floor_seconds()
    source = (f"{rate:.1f} TFLOP/s, a BERT fine-tune's published rate on it" if card.rate_measured(precision)
              else f"{rate:.1f} TFLOP/s, {card.utilisation:.0%} of its datasheet peak (assumed)")
    basis = (f"{work.counted_as()} at {source}; no micro-step under A3's {1000 * floor:.0f} ms, measured "
             "for bert-base at micro-batch 8 on an H200")
    return EpochEstimate(seconds=steps * max(compute, floor), micro_steps=steps,
                         tokens=int(examples * tokens_per_example), seconds_per_micro_step=max(compute, floor),
                         bound="compute" if compute >= floor else "per-step floor", rate_tflops=rate,
                         card=card.name, basis=basis)
