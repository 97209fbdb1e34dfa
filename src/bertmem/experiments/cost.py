"""What each chapter trains, and about how long that takes on a GPU, from a FLOP count (setup cells, intro).

Each chapter that fine-tunes takes its data and recipe from `chapter_settings`; `chapter_minutes` counts its runs:
training costs 6 · parameters · tokens FLOPs and evaluation 2 · parameters · tokens (Kaplan et al., 2020). Training
runs at the throughput a BERT-class fine-tune was measured to reach on the card in the precision used (published
measurements, where there are any; else an assumed share of the datasheet peak); evaluation runs in fp32, as
`evaluate` does. Each chapter also pays for its CPU-side work (imports, estimates, demonstrations, tokenizing: the
GPU profile's dry run, measured) and for loading bert-base once per fine-tune. Tokens are counted at the full
`max_length` (every review padded to the limit). The first run on a fresh runtime adds the install and the
downloads (`FIRST_RUN_MINUTES`). It is an estimate, never a measurement: the pages say so."""

from __future__ import annotations

import time

import torch


def matmul_tflops(dtype: torch.dtype = torch.bfloat16, device: str = "cpu", n: int | None = None,
                  repeats: int = 3) -> float:
    """Measured dense matmul throughput in TFLOP/s: the denominator of model-FLOPs utilisation (chapter 5)."""
    n = n or (8192 if device.startswith("cuda") else 1024)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    a @ b  # warm-up
    best = float("inf")
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        a @ b
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e12


def model_flops_utilisation(num_params: int, tokens: int, seconds: float, peak_tflops: float) -> float:
    """6 · parameters · tokens / time, as a share of the peak (Kaplan et al.'s training FLOPs) (chapter 5)."""
    if seconds <= 0 or peak_tflops <= 0:
        raise ValueError(f"seconds and peak_tflops must be > 0, got {seconds} and {peak_tflops}")
    return 6 * num_params * tokens / seconds / (peak_tflops * 1e12)
