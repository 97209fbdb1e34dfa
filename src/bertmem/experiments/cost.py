"""What a fine-tune costs in FLOPs: measured matmul throughput and model-FLOPs utilisation (chapter 5).

Training costs 6 · parameters · tokens FLOPs (Kaplan et al., 2020); MFU is that over time, as a share of a peak."""

from __future__ import annotations

import time

import torch

from bertmem.core.devices import synchronize


def matmul_tflops(dtype: torch.dtype = torch.bfloat16, device: str = "cpu", n: int | None = None,
                  repeats: int = 3) -> float:
    """Measured dense matmul throughput in TFLOP/s: the denominator of model-FLOPs utilisation (chapter 5)."""
    n = n or (8192 if device.startswith("cuda") else 1024)
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


def model_flops_utilisation(num_params: int, tokens: int, seconds: float, peak_tflops: float) -> float:
    """6 · parameters · tokens / time, as a share of the peak (Kaplan et al.'s training FLOPs) (chapter 5)."""
    if seconds <= 0 or peak_tflops <= 0:
        raise ValueError(f"seconds and peak_tflops must be > 0, got {seconds} and {peak_tflops}")
    return 6 * num_params * tokens / seconds / (peak_tflops * 1e12)
