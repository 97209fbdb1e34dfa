"""Measured on a GPU: the recorded run of `scripts/gpu_measure.py`, as the A3 page shows it (A3).

The run travels with the package (`bertmem/recorded/gpu-<card>.json`), so the page reads the same numbers on the
website, in Jupyter and in Colab; nothing here measures.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from bertmem.book.bench_info import recorded_bench
from bertmem.book.published import POST_TABLE
from bertmem.core.units import GIB, MIB
from bertmem.memory.cards import CUDA_CONTEXT_BYTES
from bertmem.memory.planner import ALLOCATOR_MARGIN, PlanRequest

RECORDED_CARD = "nvidia-h200"  # the card of the one recorded run (no Hub there: random weights)


def recorded_gpu_run(card: str = RECORDED_CARD) -> dict[str, Any]:
    """The recorded GPU run of `card`, with the planner's estimates beside each row (A3)."""
    return recorded_bench(f"gpu-{card}")


def run_provenance(run: dict[str, Any]) -> str:
    """Where a recorded GPU run comes from: card, driver and versions, and the estimates beside it (A3)."""
    env, made, checked = run["environment"], run["estimates made with"], run["estimates checked with"]
    return "\n".join([
        f"recorded run: {env['gpu']} ({env['card memory'] / GIB:.0f} GiB), driver {env['driver']}, CUDA "
        f"{env['cuda']}, torch {env['torch']}, transformers {env['transformers']}, on {env['date']}",
        f"estimates beside it: torch {made['torch']}, transformers {made['transformers']}",
        f"re-estimated with transformers {checked['transformers']} (torch {checked['torch']}): {checked['result']}",
        f"weights: {run['weights']}"])


def planner_rows(run: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per measured shape: the allocator's peaks, the process's use of the card, the planner's estimate
    and need (A3)."""
    return [{"shape": r["label"], "allocated peak (GiB)": r["allocated peak"] / GIB,
             "estimated peak (GiB)": r["estimated peak"] / GIB, "estimate error": f"{r['estimate error']:+.1%}",
             "reserved peak (GiB)": r["reserved peak"] / GIB, "allocator slack": f"{r['allocator slack']:.1%}",
             "process at peak (GiB)": r["process at peak"] / GIB, "planner needs (GiB)": r["planner needs"] / GIB,
             "planner error": f"{r['planner error']:+.1%}", "margin needed": f"{r['margin needed']:.1%}"}
            for r in run["planner"]]


def calibration(run: dict[str, Any]) -> dict[str, Any]:
    """What the rows say about the planner's overhead model: estimate errors, the allocator's slack, the CUDA
    context, the margin each row needed, against the planner's assumptions; and the flags that would have
    covered every row (the largest context, the largest margin rounded up) (A3)."""
    rows = run["planner"]
    errors = [r["estimate error"] for r in rows]
    margins = [r["margin needed"] for r in rows]
    slacks = [r["allocator slack"] for r in rows]
    contexts = [r["context"] / MIB for r in rows]
    return {"rows": len(rows), "estimate error low": min(errors), "estimate error high": max(errors),
            "estimates below": sum(e < 0 for e in errors),
            "slack low": min(slacks), "slack high": max(slacks),
            "context MiB": statistics.median(contexts), "context low MiB": min(contexts),
            "context high MiB": max(contexts),
            "assumed context MiB": CUDA_CONTEXT_BYTES / MIB, "assumed margin": ALLOCATOR_MARGIN,
            "margin low": min(margins), "margin high": max(margins),
            "margin covered": sum(m <= ALLOCATOR_MARGIN for m in margins),
            "planner short": sum(r["planner error"] < 0 for r in rows),
            # the same plans with each row's own context: what is left short is the margin's doing
            "short with measured context": sum(
                PlanRequest(cuda_context_bytes=r["context"]).needed_bytes(r["estimated peak"]) < r["process at peak"]
                for r in rows),
            "planner error low": min(r["planner error"] for r in rows),
            "planner error high": max(r["planner error"] for r in rows),
            "covering context MiB": math.ceil(max(contexts)), "covering margin": math.ceil(100 * max(margins)) / 100}


def bench_rows(run: dict[str, Any]) -> list[dict[str, Any]]:
    """Chapter 5's fp32 baseline and full recipe on the GPU, with PyTorch's attention kernels as they come and
    with cuDNN's attention off, each against its own baseline. Each column names its time base: examples/s
    from the median micro-step, the time ratio from the summed steps after warm-up, the epoch ratio and MFU
    from the whole epoch (A3)."""
    rows = []
    for kernels, key in (("default", "bench"), ("cuDNN attention off", "bench, cuDNN attention off")):
        bench = run[key]["rows"]
        base = next(r for r in bench if r["variant"] == "fp32 baseline")
        for r in bench:
            rows.append({"attention kernels": kernels, "variant": r["variant"], "precision": r["precision"],
                         "micro-batch": r["micro-batch"], "CUDA peak (GiB)": r["CUDA peak (MiB)"] * MIB / GIB,
                         "peak ratio": r["CUDA peak (MiB)"] / base["CUDA peak (MiB)"],
                         "examples/s (median step)": r["examples/s"],
                         "time ratio (steps after warm-up)": r["time ratio"],
                         "time ratio range": r["time ratio range"], "epoch time ratio": r["epoch time ratio"],
                         "MFU (epoch)": f"{r['MFU']:.1%}", "useful MFU (epoch)": f"{r['useful MFU']:.1%}"})
    return rows


def recipe_work(run: dict[str, Any], key: str = "bench, cuDNN attention off") -> dict[str, float]:
    """Where the recipe's epoch time went against the baseline's: the matmul work it computed (padding
    included) and the model FLOP/s it reached, whose quotient is the epoch time ratio (A3)."""
    rows = {r["variant"]: r for r in run[key]["rows"]}
    recipe, base = rows["full recipe"], rows["fp32 baseline"]

    def rate(row: dict[str, Any]) -> float:
        return row["training FLOPs per epoch"] / row["time per epoch (s)"] / 1e12

    return {"padded token ratio": recipe["padded tokens per epoch"] / base["padded tokens per epoch"],
            "work ratio": recipe["training FLOPs per epoch"] / base["training FLOPs per epoch"],
            "recipe TFLOP/s": rate(recipe), "baseline TFLOP/s": rate(base),
            "rate ratio": rate(recipe) / rate(base), "epoch time ratio": recipe["epoch time ratio"],
            "baseline padding share": 1 - base["tokens per epoch"] / base["padded tokens per epoch"]}


def first_meeting_excess(run: dict[str, Any]) -> dict[str, Any]:
    """The recipe's extra training time with the default kernels over the run with cuDNN's attention off,
    round by round (each round a seed, in one process): a cost of meeting new lengths, paid less once they
    were met (A3)."""
    def recipe(key: str) -> dict[str, Any]:
        return next(r for r in run[key]["rows"] if r["variant"] == "full recipe")

    steps = len(next(r for r in run["bench"]["rounds"][0] if r["variant"] == "full recipe")["step_times_s"])
    excess = [a - b for a, b in zip(recipe("bench")["compute per round (s)"],
                                    recipe("bench, cuDNN attention off")["compute per round (s)"])]
    return {"excess per round (s)": excess, "steps per round": steps,
            "micro-batches per round": steps * recipe("bench")["accumulation steps"]}


def pass_noise(run: dict[str, Any]) -> float:
    """How much two passes over one and the same shape differed (the padded-to-512 row), relative to the
    faster: a difference between settings smaller than this is not read (A3)."""
    row = run["sdpa shapes"]["rows"]["default kernels, padded to 512"]
    first, second = row["first pass median (ms)"], row["second pass median (ms)"]
    return abs(first - second) / min(first, second)


def estimate_error_by_attention(run: dict[str, Any]) -> dict[str, float]:
    """The tensor estimate's median error against the allocator: eager rows, SDPA rows, and the SDPA rows in fp32
    (which cuDNN's attention, fp16 and bf16 only, never runs) (A3)."""
    def median(rows) -> float:
        return statistics.median(r["estimate error"] for r in rows)

    rows = run["planner"]
    fp32_sdpa = [r["estimate error"] for r in rows if r["attention"] == "sdpa" and r["precision"] == "fp32"]
    return {"eager": median(r for r in rows if r["attention"] == "eager"),
            "sdpa": median(r for r in rows if r["attention"] == "sdpa"),
            "sdpa fp32 low": min(fp32_sdpa), "sdpa fp32 high": max(fp32_sdpa), "sdpa fp32 rows": len(fp32_sdpa)}


def recipe_peak_against_planner(run: dict[str, Any]) -> dict[str, float]:
    """The bench's full recipe (bf16, SDPA, micro-batch 8, up to 512 tokens) against the planner row of its
    nominal shape: its allocated peak, that plus the measured context, and what the planner's defaults ask
    (GiB) (A3)."""
    recipe = next(r for r in run["bench"]["rows"] if r["variant"] == "full recipe")
    nominal = next(r for r in run["planner"] if r["batch"] == recipe["micro-batch"] and r["seq_len"] == 512
                   and r["precision"] == recipe["precision"] and r["attention"] == "sdpa"
                   and not r["checkpointing"] and r["model_id"] == "bert-base-uncased")
    context = calibration(run)["context MiB"] * MIB
    peaks = [r["CUDA peak (MiB)"] * MIB for key in ("bench", "bench, cuDNN attention off")
             for r in run[key]["rows"] if r["variant"] == "full recipe"]
    # allocated peak + context: a floor for the process, which also holds the allocator's slack
    return {"recipe allocated": max(peaks) / GIB, "nominal allocated": nominal["allocated peak"] / GIB,
            "recipe with context": (max(peaks) + context) / GIB, "planner asks": nominal["planner needs"] / GIB,
            "card idle MiB": run["environment"]["card idle used"] / MIB}


def measured_beside_estimates(rows: list[dict[str, Any]], run: dict[str, Any], seq_len: int = 512,
                              model_id: str = "bert-base-uncased") -> list[dict[str, Any]]:
    """Chapter 5's estimated bert-base rows beside the allocator's peak A3 measured for the same shape, where
    it measured one (fp16 and bf16 need the same bytes, so either stands for the other) (chapter 5, A3)."""
    def half(precision: str) -> str:
        return "16-bit" if precision in ("fp16", "bf16") else precision

    measured = {(r["batch"], r["attention"], half(r["precision"]), r["checkpointing"]): r
                for r in run["planner"] if r["model_id"] == model_id and r["seq_len"] == seq_len}
    beside = []
    for row in rows:
        checkpointing = "checkpointing" in row["variant"]
        found = measured.get((row["micro-batch"], row["attention"], half(row["precision"]), checkpointing))
        if found is not None and "footprint" not in row["variant"]:  # LoRA's rows were not measured
            beside.append({"variant": row["variant"], "estimated peak (GiB)": row["estimated peak (GiB)"],
                           f"measured on {run['environment']['gpu']} (GiB)": found["allocated peak"] / GIB,
                           "shape measured": found["label"]})
    return beside


def beside_rows(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The full recipe against the fp32 baseline here, on this book's CPU bench and in the article's table (A3)."""
    def gpu(key: str) -> dict[str, Any]:
        rows = {r["variant"]: r for r in run[key]["rows"]}
        recipe, base = rows["full recipe"], rows["fp32 baseline"]
        return {"memory ratio": recipe["CUDA peak (MiB)"] / base["CUDA peak (MiB)"],
                "time ratio": recipe["time ratio"]}

    cpu = {r["variant"]: r for r in recorded_bench()["rows"]}["full recipe"]
    post = {r["variant"]: r for r in POST_TABLE}
    post_memory = post["full recipe"]["memory (GB)"] / post["fp32 baseline"]["memory (GB)"]
    post_time = post["full recipe"]["time per epoch (min)"] / post["fp32 baseline"]["time per epoch (min)"]
    return [{"where": f"{run['environment']['gpu']}, default kernels", "measures": "CUDA peak",
             **gpu("bench")},
            {"where": f"{run['environment']['gpu']}, cuDNN attention off", "measures": "CUDA peak",
             **gpu("bench, cuDNN attention off")},
            {"where": "chapter 5's recorded CPU bench (IMDb, 3 seeds)", "measures": "saved activations only",
             "memory ratio": cpu["activations ratio"], "time ratio": cpu["time ratio"]},
            {"where": "[the blog post](A2_post_audit.md)'s table (RTX 3090)", "measures": "memory (GB), as printed",
             "memory ratio": post_memory, "time ratio": post_time}]


def matmul_rates(run: dict[str, Any]) -> dict[str, dict[str, float]]:
    """The matrix-multiply TFLOP/s each bench measured per precision: its MFU's denominators (A3)."""
    return {"default": run["bench"]["matmul_tflops"],
            "cuDNN attention off": run["bench, cuDNN attention off"]["matmul_tflops"]}


def shape_rows(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The dynamic-padding benchmark: median step over the first pass (each length met for the first time; the
    padded row's one length once) and over the second (every length seen) (A3)."""
    return [{"setting": name, "first pass, median (ms)": r["first pass median (ms)"],
             "second pass, median (ms)": r["second pass median (ms)"],
             "first pass total (s)": r["first pass total (s)"], "distinct lengths": r["distinct lengths"]}
            for name, r in run["sdpa shapes"]["rows"].items()]


def shape_lengths(run: dict[str, Any]) -> dict[str, Any]:
    """The lengths the dynamic-padding benchmark met: their range and count, and whether its two dynamic settings
    met the same ones in one process (the recorded run's did) (A3)."""
    lengths = run["sdpa shapes"]["lengths"]
    every = lengths["default"] + lengths["off"]
    return {"low": min(every), "high": max(every), "count": len(lengths["default"]),
            "shared": lengths["default"] == lengths["off"]}


def backend_losses(run: dict[str, Any]) -> list[dict[str, Any]]:
    """The three loops' losses per optimizer step, side by side (A3)."""
    losses = run["backends"]["losses"]
    names = list(losses)
    return [{"optimizer step": i + 1, **{name: losses[name][i] for name in names}}
            for i in range(len(losses[names[0]]))]


def plot_planner_check(run: dict[str, Any], ax=None):
    """The estimate's error against the allocator's peak (left) and the planner's against the process's use of
    the card (right), in percent, per shape by its measured size (A3)."""
    import matplotlib.pyplot as plt

    rows = run["planner"]
    axes = ax if ax is not None else plt.subplots(1, 2, figsize=(10, 4))[1]
    pairs = (("allocated peak", "estimate error", "tensor peak: estimate vs allocator"),
             ("process at peak", "planner error", "the planner vs the process's use of the card"))
    for axis, (measured, error, title) in zip(axes, pairs):
        x = [r[measured] / GIB for r in rows]
        y = [100 * r[error] for r in rows]
        axis.axhline(0, color="grey", linestyle="--", label="estimate = measured")
        axis.scatter(x, y, color="tab:blue", label="one shape")
        axis.set_xscale("log")
        axis.set_xlabel(f"measured on {run['environment']['gpu']} (GiB, log scale)")
        axis.set_ylabel("estimate − measured (% of measured)")
        axis.set_title(title)
        axis.grid(alpha=0.3)
        axis.legend(loc="lower right")
    return axes
