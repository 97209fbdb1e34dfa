"""What a fine-tune costs in FLOPs: a batch's and an epoch's matrix multiplies (counted by
`bertmem.model.matmuls`, which the time estimates use too), measured matmul throughput and model-FLOPs
utilisation, padded and useful (chapter 5, A3)."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from bertmem.core.devices import synchronize
from bertmem.data.frames import shape_positions
from bertmem.loop.precision import DTYPES
from bertmem.model.matmuls import MatmulShape

PEAK_SIZE = {"cuda": 8192, "cpu": 1024}  # the square matmul that measures a peak, by device type
PEAK_REPEATS = 3


@dataclass(frozen=True)
class BatchWork:
    """The training FLOPs of batches, over every position the card computed and over the examples' own tokens
    (chapter 5, A3)."""

    padded_tokens: int
    tokens: int  # without padding
    padded_flops: float
    useful_flops: float

    def share(self, part: float) -> BatchWork:
        """This work times `part` (one process's share of a data-parallel epoch)."""
        return BatchWork(round(self.padded_tokens * part), round(self.tokens * part), self.padded_flops * part,
                         self.useful_flops * part)

    def __add__(self, other: BatchWork) -> BatchWork:
        return BatchWork(self.padded_tokens + other.padded_tokens, self.tokens + other.tokens,
                         self.padded_flops + other.padded_flops, self.useful_flops + other.useful_flops)


def batch_work(shape: MatmulShape, attention_mask: torch.Tensor) -> BatchWork:
    """One batch's work: every row at the padded length, and each at its own length (chapter 5, A3)."""
    rows, padded = attention_mask.shape
    lengths = attention_mask.sum(dim=1)
    return BatchWork(padded_tokens=rows * padded, tokens=int(lengths.sum()),
                     padded_flops=shape.training_flops(torch.full((rows,), padded)),
                     useful_flops=shape.training_flops(lengths))


def epoch_work(shape: MatmulShape, lengths: Sequence[int], shapes: Counter) -> BatchWork:
    """One epoch's work from its examples' own lengths and its (examples, padded length) shapes
    (`data.frames.epoch_shapes`): no pass over the data (`bertmem train`)."""
    padded = sum(shape.training_flops(torch.full((rows,), length)) * count for (rows, length), count in shapes.items())
    return BatchWork(padded_tokens=shape_positions(shapes),
                     tokens=int(sum(lengths)), padded_flops=float(padded),
                     useful_flops=shape.training_flops(torch.as_tensor(list(lengths))))


def loader_work(shape: MatmulShape, batches) -> BatchWork:
    """The work of these batches: one epoch's (`data.batching.epoch_batches`) (chapter 5, A3)."""
    total = BatchWork(0, 0, 0.0, 0.0)
    for batch in batches:
        total = total + batch_work(shape, batch["attention_mask"])
    return total


def matmul_tflops(dtype: torch.dtype = torch.bfloat16, device: str = "cpu", n: int | None = None,
                  repeats: int = PEAK_REPEATS) -> float:
    """Measured dense matmul throughput in TFLOP/s: the denominator of model-FLOPs utilisation (chapter 5)."""
    n = n or PEAK_SIZE["cuda" if device.startswith("cuda") else "cpu"]
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    a @ b  # warm-up
    best = float("inf")
    for _ in range(repeats):
        synchronize(torch.device(device))
        start = time.perf_counter()
        a @ b
        synchronize(torch.device(device))
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e12


def peak_method(device: str, float32_precision: str | None = None) -> str:
    """How `matmul_tflops` measured a peak, TF32 included: the line printed beside every MFU (chapter 5, A3).

    The peak is this machine's measured rate, not a datasheet's: MFU against it reads higher than against the
    datasheet peak."""
    kind = "cuda" if device.startswith("cuda") else "cpu"
    precision = float32_precision or torch.get_float32_matmul_precision()
    tf32 = ("TF32 off" if precision == "highest"
            else "TF32 or lower allowed: the fp32 rate is not full fp32")
    where = f"; fp32 at float32 matmul precision '{precision}' ({tf32})" if kind == "cuda" else ""
    return (f"peak: measured here, one {PEAK_SIZE[kind]:,} × {PEAK_SIZE[kind]:,} matmul per precision, the best "
            f"of {PEAK_REPEATS} after a warm-up{where}")


@dataclass(frozen=True)
class Utilisation:
    """Model-FLOPs utilisation over every computed position (padded) and over the examples' own tokens
    (useful) (chapter 5, A3)."""

    padded: float
    useful: float


def run_utilisation(work: BatchWork, seconds: float, precision: str, device: str) -> dict[str, Any]:
    """MFU, padded and useful, of a run's epoch against a matmul peak measured now in its precision, with how the
    peak was measured: what `bertmem train` prints and keeps (chapter 5)."""
    peak = matmul_tflops(DTYPES[precision], device)
    used = model_flops_utilisation(work, seconds, peak)
    return {"MFU": used.padded, "useful MFU": used.useful, "peak TFLOP/s": peak, "peak": peak_method(device)}


def model_flops_utilisation(work: BatchWork, seconds: float, peak_tflops: float) -> Utilisation:
    """The work's matmul FLOPs per second as a share of the measured peak: padded and useful (chapter 5, A3)."""
    if seconds <= 0 or peak_tflops <= 0:
        raise ValueError(f"seconds and peak_tflops must be > 0, got {seconds} and {peak_tflops}")
    rate = seconds * peak_tflops * 1e12
    return Utilisation(padded=work.padded_flops / rate, useful=work.useful_flops / rate)
