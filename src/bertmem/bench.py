"""The seed's results table, regenerated: recipe variants side by side on the same data (chapter 5, `make bench`)."""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from .experiment import RunConfig, build_model, environment_info, load_frames
from .memory import GIB, measure_step_memory
from .train import TrainConfig

VARIANTS = ("fp32 baseline", "accumulation ×4", "mixed precision + accumulation", "full recipe",
            "full + gradient checkpointing")
SEED_TABLE = [  # the seed article's table (IMDb, RTX 3090), as printed there: not reproducible from it
    {"variant": "fp32 baseline", "memory (GB)": 10.2, "time per epoch (min)": 42, "F1": 0.923},
    {"variant": "accumulation ×4", "memory (GB)": 6.1, "time per epoch (min)": 48, "F1": 0.921},
    {"variant": "mixed precision + accumulation", "memory (GB)": 4.3, "time per epoch (min)": 35, "F1": 0.925},
    {"variant": "full recipe", "memory (GB)": 3.8, "time per epoch (min)": 32, "F1": 0.927},
]
TARGETS = {"activations": 0.25, "time": 0.5, "accuracy_points": 1.5, "estimated_peak": 0.15}


@dataclass
class BenchConfig:
    """Data, model and effective batch shared by every variant (chapter 5)."""

    model: str
    dataset: str = "imdb"
    train_size: int | None = 1000
    eval_size: int | None = 500
    max_length: int = 256
    effective_batch: int = 16
    accumulation: int = 4  # of the accumulation variants: micro-batch = effective_batch / accumulation
    learning_rate: float = 1e-4
    layerwise_decay: float = 0.95
    epochs: int = 1
    seed: int = 0
    device: str = "cpu"
    variants: tuple[str, ...] = VARIANTS
    progress: bool = True
    memory_bytes: int | None = None  # budget per variant; None: the CUDA device's free memory (no limit on CPU)

    def __post_init__(self) -> None:
        if self.effective_batch % self.accumulation:
            raise ValueError(f"effective_batch {self.effective_batch} must be a multiple of accumulation "
                             f"{self.accumulation} so every variant sees the same effective batch")
        unknown = [v for v in self.variants if v not in VARIANTS]
        if unknown:
            raise ValueError(f"unknown variant(s) {unknown}: choose from {VARIANTS}")


def variant_settings(bench: BenchConfig, variant: str) -> tuple[RunConfig, TrainConfig]:
    """The run and recipe of one variant; each adds one idea to the previous one (chapter 5)."""
    full = variant.startswith("full")
    micro = bench.effective_batch if variant == "fp32 baseline" else bench.effective_batch // bench.accumulation
    run = RunConfig(model=bench.model, dataset=bench.dataset, train_size=bench.train_size, eval_size=bench.eval_size,
                    max_length=bench.max_length, batch_size=micro, group_by_length=full, pad_to_max_length=not full,
                    attention="sdpa" if full else "eager")
    train = TrainConfig(epochs=bench.epochs, learning_rate=bench.learning_rate, seed=bench.seed, device=bench.device,
                        accumulation_steps=bench.effective_batch // micro, progress=bench.progress,
                        precision="fp32" if variant in VARIANTS[:2] else "auto",
                        warmup_ratio=0.1 if full else 0.0, layerwise_decay=bench.layerwise_decay if full else None,
                        gradient_checkpointing=variant == "full + gradient checkpointing")
    return run, train


def widest_batch(loader) -> dict[str, torch.Tensor]:
    """The micro-batch with the most token positions: the one that sets the activation peak."""
    return max(loader, key=lambda b: b["input_ids"].numel())


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


def fit_check(bench: BenchConfig, model, run: RunConfig, config: TrainConfig, precision: str) -> str | None:
    """'does not fit (estimated X GB > Y GB)' when the variant's estimated peak exceeds the budget, else None."""
    from .estimate import estimate_step_memory
    from .planner import PlanRequest

    kernels = "cuda" if config.device.startswith("cuda") else "cpu"
    request = PlanRequest(model=run.model, max_length=run.max_length, kernels=kernels)
    budget = bench.memory_bytes
    if budget is None:
        from .devices import cuda_free_bytes

        budget = cuda_free_bytes(config.device) if kernels == "cuda" else None
        # measured free memory: this process's CUDA context is already taken out
        request = dataclasses.replace(request, cuda_context_bytes=0)
    if budget is None:
        return None
    peak = estimate_step_memory(model.config, run.batch_size, run.max_length, precision=precision,
                                attention=run.attention, gradient_checkpointing=config.gradient_checkpointing,
                                device=kernels).step_peak
    needed = request.needed_bytes(peak)
    if needed <= budget:
        return None
    return f"does not fit (estimated {needed / 1e9:.1f} GB > {budget / 1e9:.1f} GB)"


def run_variant(bench: BenchConfig, variant: str, frames, peak_tflops: dict[str, float] | float | None
                ) -> dict[str, Any]:
    """Measure one variant: memory on its widest micro-batch, then a full training run and evaluation.

    A variant whose estimated peak exceeds the budget is not run: its row says so (chapter 5).
    `peak_tflops`: the measured matmul peak per precision, so MFU divides by the precision actually used.
    """
    from .data import make_loader, tokenize_frame
    from .models import enable_gradient_checkpointing
    from .precision import choose_precision
    from .train import train

    run, config = variant_settings(bench, variant)
    train_frame, eval_frame = frames
    model, tokenizer = build_model(run, train_frame.attrs["label_names"])
    pad = run.max_length if run.pad_to_max_length else None
    loader = make_loader(tokenize_frame(train_frame, tokenizer, run.max_length), tokenizer, run.batch_size,
                         shuffle=True, seed=bench.seed, group_by_length=run.group_by_length, pad_to_max_length=pad)
    eval_loader = make_loader(tokenize_frame(eval_frame, tokenizer, run.max_length), tokenizer, 32,
                              group_by_length=True)
    precision = choose_precision(config.precision, torch.device(config.device).type, verbose=False).precision
    row = {"variant": variant, "micro-batch": run.batch_size, "accumulation": config.accumulation_steps,
           "precision": precision, "attention": run.attention,
           "padding": "dynamic, length-grouped" if run.group_by_length else f"to {run.max_length}"}
    verdict = fit_check(bench, model, run, config, precision)  # before the model takes memory on the device
    if verdict is not None:
        return {**row, "accuracy": float("nan"), "note": verdict}
    model.to(config.device).train()
    if config.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    cuda = config.device.startswith("cuda")
    try:
        report = measure_step_memory(model, {k: v.to(config.device) for k, v in widest_batch(loader).items()},
                                     precision=precision)
        model.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.reset_peak_memory_stats()
        result = train(model, loader, config, eval_loader)
    except torch.OutOfMemoryError:  # the point of the table: the baseline may not fit the card
        del model
        if cuda:
            torch.cuda.empty_cache()
        return {**row, "accuracy": float("nan"), "note": "out of memory"}
    epoch = result.final_metrics
    tokens = sum(b["input_ids"].numel() for b in loader) * len(result.epochs)
    num_params = sum(p.numel() for p in model.parameters())
    row.update({"activations (MiB)": report.activations / 2**20,
                "weights+grads+Adam (MiB)": (report.parameters * 4) / 2**20,  # fp32 weights, grads, 2 Adam moments
                "time per epoch (s)": sum(e["train_time_s"] for e in result.epochs) / len(result.epochs),
                "examples/s": epoch["examples_per_s"], "accuracy": epoch["accuracy"], "macro-F1": epoch["macro_f1"]})
    row["total (MiB)"] = row["activations (MiB)"] + row["weights+grads+Adam (MiB)"]
    if cuda:
        row["CUDA peak (MiB)"] = torch.cuda.max_memory_allocated() / 2**20
    peak = peak_tflops.get(precision) if isinstance(peak_tflops, dict) else peak_tflops
    if peak:
        row["MFU"] = model_flops_utilisation(num_params, tokens, row["time per epoch (s)"] * len(result.epochs),
                                             peak)
    return row


def add_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row against the fp32 baseline of the same run (or, when it did not fit, the first row that ran)."""
    ran = [r for r in rows if "note" not in r]
    if not ran:
        return rows
    base = next((r for r in ran if r["variant"] == "fp32 baseline"), ran[0])
    for row in rows:
        if "note" in row:
            continue
        if base["variant"] != "fp32 baseline":  # the baseline did not fit: say what the ratios compare with
            row["ratios relative to"] = base["variant"]
        row["activations ratio"] = row["activations (MiB)"] / base["activations (MiB)"]
        row["time ratio"] = row["time per epoch (s)"] / base["time per epoch (s)"]
        row["accuracy Δ (points)"] = 100 * (row["accuracy"] - base["accuracy"])
        if row["variant"] == "full recipe":
            met = (row["activations ratio"] <= TARGETS["activations"] and row["time ratio"] <= TARGETS["time"]
                   and abs(row["accuracy Δ (points)"]) <= TARGETS["accuracy_points"])
            row["targets"] = "met" if met else "missed"
    return rows


def precisions_used(bench: BenchConfig) -> list[str]:
    """The precisions the variants run in on this device ('auto' resolved: fp16 on a T4, bf16 on newer cards)."""
    from .precision import choose_precision

    device = torch.device(bench.device).type
    return sorted({choose_precision(variant_settings(bench, v)[1].precision, device, verbose=False).precision
                   for v in bench.variants})


def run_bench(bench: BenchConfig) -> dict[str, Any]:
    """Every variant on the same frames; rows with ratios, environment and settings (chapter 5)."""
    first = variant_settings(bench, bench.variants[0])[0]
    frames = load_frames(first, seed=bench.seed)
    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    peaks = {p: matmul_tflops(dtypes[p], bench.device) for p in precisions_used(bench)}
    rows = [run_variant(bench, v, frames, peaks) for v in bench.variants]
    if "fp32 baseline" in bench.variants:
        rows = add_ratios(rows)
    return {"rows": rows, "matmul_tflops": peaks, "bf16_matmul_tflops": peaks.get("bf16"), "settings": asdict(bench),
            "environment": environment_info()}


def estimated_rows(model: str = "bert-base-uncased", seq_len: int = 512, effective_batch: int = 32,
                   accumulation: int = 4) -> list[dict[str, Any]]:
    """The variants for a CUDA GPU, estimated with FakeTensorMode (no GPU needed), with 16/24 GB fits (chapter 5).

    The peak is the most memory alive at one moment of a steady-state step (the timeline), not the sum of
    weights, gradients, optimizer state and activations, which no moment of the step holds at once.
    """
    from .estimate import estimate_step_memory

    micro = effective_batch // accumulation
    specs = {"fp32 baseline": (effective_batch, "eager", "fp32", False),
             "accumulation ×4": (micro, "eager", "fp32", False),
             "mixed precision + accumulation": (micro, "eager", "bf16", False),
             "full recipe": (micro, "sdpa", "bf16", False),
             "full + gradient checkpointing": (micro, "sdpa", "bf16", True)}
    rows = []
    for variant, (batch, attention, precision, ckpt) in specs.items():
        r = estimate_step_memory(model, batch, seq_len, precision=precision, attention=attention,
                                 gradient_checkpointing=ckpt)
        rows.append({"variant": variant, "micro-batch": batch, "attention": attention, "precision": precision,
                     "activations (GiB)": r.activations / GIB, "estimated peak (GiB)": r.step_peak / GIB,
                     "peak during": r.peak_phase, "sum of categories (GiB)": r.total / GIB})
    base = rows[0]["estimated peak (GiB)"]
    for row in rows:
        row["peak ratio"] = row["estimated peak (GiB)"] / base
        for card in (16, 24):  # leave ~1 GiB for the CUDA context and allocator slack
            row[f"fits {card} GB"] = "yes" if row["estimated peak (GiB)"] + 1 <= card * 1e9 / GIB else "no"
    return rows


def write_bench(result: dict[str, Any], folder: str | Path) -> Path:
    """bench.json and bench.md (table + hardware and versions) into folder (chapter 5)."""
    from .plots import markdown_table

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bench.json").write_text(json.dumps(result, indent=1, default=str))
    env = ", ".join(f"{k} {v}" for k, v in result["environment"].items())
    parts = [f"# Recipe benchmark\n\n{env}\n", markdown_table(result["rows"], floatfmt=".3g")]
    if result.get("estimated"):
        parts += ["\n## Estimated for a CUDA GPU (bert-base, 512 tokens, effective batch 32)\n",
                  markdown_table(result["estimated"], floatfmt=".3g")]
    (folder / "bench.md").write_text("\n".join(parts) + "\n")
    return folder / "bench.md"

