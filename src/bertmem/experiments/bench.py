"""The post's results table, regenerated: recipe variants side by side on the same data (chapter 5, `make bench`)."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch

from bertmem.core.devices import (
    CPU_BF16_ENV,
    cuda_free_bytes,
    device_name,
    forced_note,
    on_cuda,
    peak_memory_bytes,
    reset_peak_memory,
)
from bertmem.core.flags import RefusesRenamed, shared_field
from bertmem.core.units import GIB, MIB
from bertmem.data.batching import epoch_batches, widest_batch
from bertmem.data.frames import row_keys
from bertmem.data.loaders import DataConfig, build_loaders, load_frames
from bertmem.experiments.compare import Skip, arm_order, fit_arm
from bertmem.experiments.fit import FitRequest, RunPlan, plan_run
from bertmem.experiments.cost import BatchWork, loader_work, matmul_tflops, model_flops_utilisation
from bertmem.experiments.run import environment_info
from bertmem.experiments.stats import compare_accuracies, compare_paired, step_timing, summarize
from bertmem.loop.combined import prepare_model, train
from bertmem.loop.config import TINY_MODEL, RunConfig, TrainConfig
from bertmem.loop.precision import DTYPES, choose_precision
from bertmem.loop.optim import SMALL_LEARNING_RATE
from bertmem.memory.cards import DEFAULT_CARD, card_named, parse_memory, with_article
from bertmem.memory.estimate import estimate_step_memory, model_config
from bertmem.memory.measure import measure_step_memory
from bertmem.memory.planner import PlanRequest
from bertmem.model.matmuls import MatmulShape, counted_shape, matmul_shape
from bertmem.model.adapters import LORA_LR_FACTOR, LORA_RANK

# Each variant of the chain is the one before plus one idea; the planned row branches off the full recipe:
# its micro-batch is the largest the planner fits in the budget (up to the effective batch), its accumulation
# makes up the rest, so it shows what the recipe's B/4 micro-batch costs (chapter 5).
PLANNED = "full recipe, planned micro-batch"
CHAIN = ("fp32 baseline", "accumulation ×4", "mixed precision + accumulation", "full recipe",
         "full + gradient checkpointing", "smallest footprint")
VARIANTS = (*CHAIN, PLANNED)
CHAIN_OF = {PLANNED: "full recipe"}  # the chain's variant a branch shares its precision and its work with


@dataclass(frozen=True)
class BenchConfig(RefusesRenamed):
    """What every variant shares: model, data, effective batch, seeds (chapter 5, `bertmem bench`)."""

    # fields that mean what they mean in RunConfig, DataConfig and TrainConfig are declared there, once
    model_id: str = shared_field(RunConfig, "model_id")
    dataset: str = shared_field(DataConfig, "dataset")
    train_size: int | None = shared_field(DataConfig, "train_size")
    eval_size: int | None = shared_field(DataConfig, "eval_size")
    max_length: int = shared_field(DataConfig, "max_length")
    effective_batch: int = field(default=16, metadata={"help": "examples per optimizer step"})
    accumulation_steps: int = field(default=4, metadata={"aliases": ("--accumulation",), "help": "micro-batches per "
                                                         "optimizer step in the accumulating variants"})
    learning_rate: float = shared_field(TrainConfig, "learning_rate", default=SMALL_LEARNING_RATE)  # MiniLM's size
    layerwise_decay: float = field(default=0.95, metadata={"help": "LLRD factor of the full recipe"})
    epochs: int = shared_field(TrainConfig, "epochs")
    data_seed: int = shared_field(DataConfig, "data_seed",
                                  help="picks the data subset: every seed and variant sees the same examples")
    seeds: tuple[int, ...] = field(default=(0,), metadata={
        "help": "training seeds, e.g. 0 1 2: one round of every variant per seed (accuracy mean ± std)",
        "parse": int, "nargs": "+"})
    device: str = shared_field(RunConfig, "device", default="cpu")
    variants: tuple[str, ...] = field(default=VARIANTS, metadata={
        "help": "the variants to run, in this order, each name quoted (default: all seven, from 'fp32 baseline' "
                f"to '{PLANNED}')", "parse": str, "nargs": "+", "metavar": "NAME"})
    progress: bool = shared_field(RunConfig, "progress")
    memory: str | None = shared_field(FitRequest, "memory", help=(
        "the card or memory every variant must fit (t4, l4, a100, …, 15GiB) and the planned micro-batch is "
        f"planned for (default: the GPU's free memory; on a CPU no limit, and '{PLANNED}' plans for "
        f"{with_article(card_named(DEFAULT_CARD).name)})"))
    RENAMED = {"model": "model_id", "accumulation": "accumulation_steps", "seed": "data_seed",
               "memory_bytes": "memory"}

    def __post_init__(self) -> None:
        if self.effective_batch % self.accumulation_steps:
            raise ValueError(f"effective_batch {self.effective_batch} must be a multiple of accumulation_steps "
                             f"{self.accumulation_steps} so every variant sees the same effective batch")
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"seeds must be distinct and at least one, got {self.seeds}")
        unknown = [v for v in self.variants if v not in VARIANTS]
        if unknown:
            raise ValueError(f"unknown variant(s) {unknown}: choose from {VARIANTS}")
        if self.memory is not None:
            parse_memory(self.memory)  # a bad size fails here, before any data loads


Settings = tuple[RunConfig, DataConfig, TrainConfig]


def variant_settings(bench: BenchConfig, variant: str, seed: int | None = None) -> Settings:
    """The run, data and recipe of one variant: each is the one before plus one idea (chapter 5).

    Training seed: `seed`, by default the first of `bench.seeds`.
    """
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}: choose from {VARIANTS}")
    seed = bench.seeds[0] if seed is None else seed
    if variant == PLANNED:
        run, data, recipe = variant_settings(bench, "full recipe", seed)
        plan, _ = planned_batch(bench)
        if plan is None:  # the full recipe's micro-batch: its fit check reports what does not fit
            return run, data, recipe
        return (run, dataclasses.replace(data, micro_batch=plan.micro_batch),
                dataclasses.replace(recipe, accumulation_steps=plan.accumulation_steps))
    run = RunConfig(model_id=bench.model_id, attention="eager", device=bench.device, progress=bench.progress)
    data = DataConfig(dataset=bench.dataset, train_size=bench.train_size, eval_size=bench.eval_size,
                      max_length=bench.max_length, micro_batch=bench.effective_batch, group_by_length=False,
                      pad_to_max_length=True, data_seed=bench.data_seed)
    # every variant warms up (chapter 6), so the rows differ only in the levers below
    recipe = TrainConfig(epochs=bench.epochs, learning_rate=bench.learning_rate, seed=seed, warmup_ratio=0.1)
    steps = {  # what each variant changes, in order: (run, data, recipe) overrides
        "accumulation ×4": ({}, {"micro_batch": bench.effective_batch // bench.accumulation_steps},
                            {"accumulation_steps": bench.accumulation_steps}),
        "mixed precision + accumulation": ({}, {}, {"precision": "auto"}),
        "full recipe": ({"attention": "sdpa"}, {"group_by_length": True, "pad_to_max_length": False},
                        {"layerwise_decay": bench.layerwise_decay}),
        "full + gradient checkpointing": ({}, {}, {"gradient_checkpointing": True}),
        # on top of checkpointing, chapter 8's lever that shrinks a step most: LoRA trains well under 1 % of the
        # weights (no gradients or optimizer state for the rest), with the larger steps adapters need
        "smallest footprint": ({}, {}, {"lora_r": LORA_RANK, "learning_rate": bench.learning_rate * LORA_LR_FACTOR}),
    }
    for name in CHAIN[1:CHAIN.index(variant) + 1]:
        run_change, data_change, recipe_change = steps[name]
        run = dataclasses.replace(run, **run_change)
        data = dataclasses.replace(data, **data_change)
        recipe = dataclasses.replace(recipe, **recipe_change)
    return run, data, recipe


@functools.lru_cache(maxsize=16)  # asked for each precision, estimate and seed: one FakeTensor plan
def planned_batch(bench: BenchConfig) -> tuple[RunPlan | None, str]:
    """`bertmem train --micro-batch auto`'s plan for the full recipe and what it was planned for, or (None, why
    not): for the bench's budget (on a CPU with no --memory, the book's card) and the longest batch the bench
    may meet, --max-length (chapter 5)."""
    run, data, config = variant_settings(bench, "full recipe")
    if run.model_id == TINY_MODEL:
        return None, f"not planned: {TINY_MODEL} is a test model the planner has no size for"
    memory = bench.memory
    if memory is None and not on_cuda(run.device):
        memory = DEFAULT_CARD
    fit = FitRequest(memory=memory, effective_batch=bench.effective_batch, plan_micro_batch=True)
    try:
        plan = plan_run(fit, run, data, config, [data.max_length])
    except ValueError as err:  # e.g. not even one example fits: the row's fit check says so on a GPU
        return None, f"not planned: {err}"
    return plan, (f"{plan.budget}: estimated peak {plan.plan.estimated_peak_bytes / GIB:.2f} GiB at "
                  f"{data.max_length} tokens, largest that fits {plan.plan.largest_fitting_batch}")


def fit_check(bench: BenchConfig, model, run: RunConfig, data: DataConfig, config: TrainConfig,
              precision: str) -> str | None:
    """'does not fit (estimated X GB > Y GB)' when the variant's estimated peak exceeds the budget, else None."""

    kernels = "cuda" if run.device.startswith("cuda") else "cpu"
    request = PlanRequest(model_id=run.model_id, max_length=data.max_length, kernels=kernels)
    budget = None if bench.memory is None else parse_memory(bench.memory)
    if budget is None:
        budget = cuda_free_bytes(run.device) if kernels == "cuda" else None
        # measured free memory: this process's CUDA context is already taken out
        request = dataclasses.replace(request, cuda_context_bytes=0)
    if budget is None:
        return None
    peak = estimate_step_memory(model.config, data.micro_batch, data.max_length, precision=precision,
                                attention=run.attention, gradient_checkpointing=config.gradient_checkpointing,
                                device=kernels).step_peak
    needed = request.needed_bytes(peak)
    if needed <= budget:
        return None
    return f"does not fit (estimated {needed / 1e9:.1f} GB > {budget / 1e9:.1f} GB)"


def variant_measure(bench: BenchConfig, run: RunConfig, data: DataConfig, config: TrainConfig, check: bool = True):
    """What chapter 5 records before a variant trains: the fit check (unless `check` is False: the planned row's
    plan was its check, made for the budget's card), then one step's bytes on the widest micro-batch; the
    variant's model is prepared (levers, checkpointing) and placed as its training needs."""
    def measure(model, tokenizer, loaders) -> dict[str, Any]:
        verdict = fit_check(bench, model, run, data, config, config.precision) if check else None
        if verdict is not None:
            raise Skip(verdict)
        prepare_model(model, config, run.device).train()  # chapter 8's levers before the memory is measured
        report = measure_step_memory(model, {k: v.to(run.device) for k, v in widest_batch(loaders.train).items()},
                                     precision=config.precision)
        model.zero_grad(set_to_none=True)
        reset_peak_memory(torch.device(run.device))
        return {"report": report, "shape": counted_shape(model)}  # after the levers: LoRA's adapters count
    return measure


WORK_COLUMNS = ("padded tokens per epoch", "tokens per epoch", "training FLOPs per epoch", "useful FLOPs per epoch")


def work_columns(work: BatchWork) -> dict[str, float]:
    """One epoch's work as a bench row's columns (chapter 5, A3)."""
    return dict(zip(WORK_COLUMNS, (work.padded_tokens, work.tokens, work.padded_flops, work.useful_flops)))


def optimizer_bytes(result) -> int:
    """The optimizer state a variant's loop measured from its own optimizer (`TrainResult.rank_bytes`) (chapter 5)."""
    if result.rank_bytes is None:
        raise ValueError("the training loop returned no rank_bytes: end it with "
                         "`result.rank_bytes = rank_bytes(model, optimizer)` as chapter 5's train does")
    return result.rank_bytes["optimizer_bytes"]


def run_variant(bench: BenchConfig, variant: str, frames, peak_tflops: dict[str, float] | float | None,
                seed: int | None = None, loop: Callable = train) -> dict[str, Any]:
    """Measure one variant with one training seed: memory on its widest micro-batch, then training and evaluation.

    A variant whose estimated peak exceeds the budget is not run: its row says so (chapter 5).
    `peak_tflops`: the measured matmul peak per precision, so MFU divides by the precision actually used.
    The row keeps the step times after a warm-up (`step_times_s`) for the median across rounds.
    """
    run, data, config = variant_settings(bench, variant, seed)
    precision = choose_precision(config.precision, torch.device(run.device).type, verbose=False).precision
    config = dataclasses.replace(config, precision=precision)  # resolved once: train() need not announce it
    row = {"variant": variant, "micro-batch": data.micro_batch, "accumulation steps": config.accumulation_steps,
           "precision": precision, "attention": run.attention,
           "padding": "dynamic, length-grouped" if data.group_by_length else f"to {data.max_length}"}
    planned = variant == PLANNED and planned_batch(bench)[0] is not None
    if variant == PLANNED:  # the budget and the estimate the micro-batch was chosen by
        row["planned for"] = planned_batch(bench)[1]
    done = fit_arm(variant, (run, data, config), frames, loop,
                   variant_measure(bench, run, data, config, check=not planned))
    if done.note is not None:
        return {**row, "accuracy": float("nan"), "note": done.note}
    report, result, device = done.measured["report"], done.result, torch.device(run.device)
    epoch = result.final_metrics
    times = [h["step_time_s"] for h in result.history]
    kept = times[2:] if len(times) > 2 else times  # the first steps pay for allocation and warm caches
    timing = step_timing(kept, warmup=0)
    row.update({"seed": config.seed, "step_times_s": kept, "effective batch": bench.effective_batch,
                "median step (s)": timing.median_s, "step spread (IQR / median)": timing.spread,
                "activations (MiB)": report.activations / MIB,
                # the weights and gradients of the measured step, and the state of the optimizer the
                # loop built (AdamW: two moments per trained weight; another optimizer: its own)
                "weights+grads+optimizer (MiB)": (report.parameters + report.gradients
                                                  + optimizer_bytes(result)) / MIB,
                "time per epoch (s)": sum(e["train_time_s"] for e in result.epochs) / len(result.epochs),
                "examples/s": bench.effective_batch / timing.median_s, "accuracy": epoch["accuracy"],
                "macro-F1": epoch["macro_f1"], "test examples": len(frames[1]), "correct": result.correct})
    row["total (MiB)"] = row["activations (MiB)"] + row["weights+grads+optimizer (MiB)"]
    if peak_memory_bytes(device) is not None:
        row["CUDA peak (MiB)"] = peak_memory_bytes(device) / MIB
    if done.measured["shape"] is None:  # an architecture the matmul count does not cover: no MFU
        return row
    # every epoch draws the same examples: the work of one pass over the loader, per epoch
    work = loader_work(done.measured["shape"], epoch_batches(done.loaders.train, 1))  # as the loop drew it
    row.update(work_columns(work))
    peak = peak_tflops.get(precision) if isinstance(peak_tflops, dict) else peak_tflops
    if peak:  # over the whole epoch's training time, first steps included
        used = model_flops_utilisation(work, row["time per epoch (s)"], peak)
        row.update({"MFU": used.padded, "useful MFU": used.useful})
    return row


def combine_rounds(rounds: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per variant from its rows in every round: median step over all rounds, accuracy mean ± std."""
    combined = []
    for runs in zip(*rounds):
        if any("note" in r for r in runs):
            combined.append(next(r for r in runs if "note" in r))
            continue
        row = {k: v for k, v in runs[0].items() if k not in ("seed", "step_times_s", "correct")}
        timing = step_timing([t for r in runs for t in r["step_times_s"]], warmup=0)
        accuracy, f1 = summarize([r["accuracy"] for r in runs]), summarize([r["macro-F1"] for r in runs])
        compute = [sum(r["step_times_s"]) for r in runs]  # each round's training compute after warm-up
        row.update({"seed count": len(runs), "median step (s)": timing.median_s,
                    "step spread (IQR / median)": timing.spread,
                    "examples/s": row["effective batch"] / timing.median_s,
                    "time per epoch (s)": summarize([r["time per epoch (s)"] for r in runs]).mean,
                    "accuracy": accuracy.mean, "accuracy std": accuracy.std, "macro-F1": f1.mean,
                    "macro-F1 std": f1.std, "accuracies": [r["accuracy"] for r in runs],
                    "compute per round (s)": compute})
        if all(r.get("correct") is not None for r in runs):  # per seed, per test example: for pairing
            row["correct per seed"] = [r["correct"] for r in runs]
        for key in (*WORK_COLUMNS, "MFU", "useful MFU"):
            if all(key in r for r in runs):
                row[key] = summarize([r[key] for r in runs]).mean
        combined.append(row)
    return combined


def add_ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row against the fp32 baseline, or the first row that ran (named in "ratios relative to"); Δ, noise.

    The time ratio compares training compute (the step times after warm-up) round by round — each round runs
    every variant back to back, so a slow spell of the machine falls on all of them — and takes the median over
    rounds; with length-grouped batches the step times vary by design, so their sum, not a median step, is the
    work. The accuracy difference gets a verdict from `stats.compare_paired` (same seeds, same test examples),
    or from `stats.compare_accuracies` where a row lacks its per-example scores (an older bench.json).
    """
    ran = [r for r in rows if "note" not in r]
    if not ran:
        return rows
    base = next((r for r in ran if r["variant"] == "fp32 baseline"), ran[0])
    for row in rows:
        if "note" in row:
            continue
        row["ratios relative to"] = base["variant"]  # every ratio names its reference row
        row["activations ratio"] = row["activations (MiB)"] / base["activations (MiB)"]
        if "compute per round (s)" in row and "compute per round (s)" in base:
            per_round = [r / b for r, b in zip(row["compute per round (s)"], base["compute per round (s)"])]
            row["time ratio"] = statistics.median(per_round)
            row["time ratio range"] = f"{min(per_round):.2f}–{max(per_round):.2f}"
        else:
            row["time ratio"] = row["median step (s)"] / base["median step (s)"]
        row["epoch time ratio"] = row["time per epoch (s)"] / base["time per epoch (s)"]
        row["accuracy Δ (points)"] = 100 * (row["accuracy"] - base["accuracy"])
        if row is not base:
            if "correct per seed" in row and "correct per seed" in base:
                verdict = compare_paired(base["correct per seed"], row["correct per seed"])
            else:
                verdict = compare_accuracies(base.get("accuracies", [base["accuracy"]]),
                                             row.get("accuracies", [row["accuracy"]]), row.get("test examples"))
            row["accuracy Δ vs noise"] = verdict.describe(" points", scale=100)
            row["accuracy Δ margin (points)"] = 100 * verdict.margin  # half the 95 % interval's width
            row["within noise"] = verdict.within_noise
    return rows


def precisions_used(bench: BenchConfig) -> list[str]:
    """The precisions the variants run in on this device ('auto' resolved: fp16 on a T4, bf16 on newer cards)."""

    device = torch.device(bench.device).type
    return sorted({choose_precision(variant_settings(bench, CHAIN_OF.get(v, v))[2].precision, device,
                                    verbose=False).precision for v in bench.variants})


def auto_precision_note(bench: BenchConfig) -> str | None:
    """A line when the variants that ask for mixed precision run fp32 (`auto` on a CPU without native bf16)."""
    device = torch.device(bench.device).type
    asked = [v for v in bench.variants if variant_settings(bench, CHAIN_OF.get(v, v))[2].precision == "auto"]
    if not asked or choose_precision("auto", device, verbose=False).precision != "fp32":
        return None
    return (f"the rows that ask for mixed precision ({', '.join(asked)}) run fp32 here: `auto` found no native "
            f"bf16 on this CPU{forced_note(CPU_BF16_ENV)}; set {CPU_BF16_ENV}=1 to run them in bf16, emulated")


def matmul_peaks(bench: BenchConfig) -> dict[str, float]:
    """The measured matmul TFLOP/s of each precision the variants use: MFU's denominators, once per round."""
    return {p: matmul_tflops(DTYPES[p], bench.device) for p in precisions_used(bench)}


# Bench settings that only choose which rows run: a bench continued with more seeds or variants reuses its rows.
SELECTING = frozenset({"seeds", "variants", "progress"})


def run_slug(variant: str, seed: int) -> str:
    """'accumulation-x4-seed1': a finished run's file name (chapter 5)."""
    return re.sub(r"[^a-z0-9]+", "-", variant.replace("×", "x").lower()).strip("-") + f"-seed{seed}"


def frames_fingerprint(frames) -> str:
    """A short hash of every split's texts and labels, in order: a resumed bench must see the same data."""
    digest = hashlib.sha256()
    for frame in frames:
        for text, label in zip(row_keys(frame), frame["label"]):
            digest.update(text.encode() + b"\0" + str(int(label)).encode() + b"\n")
    return digest.hexdigest()[:16]


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON through a temporary file and a rename: a kill never leaves half a file."""
    tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


class FinishedRuns:
    """The bench's finished (variant, seed) rows, kept in `folder/finished/` as each completes, so a bench killed
    by a runtime reset continues where it stopped (chapter 5, `bertmem bench`)."""

    def __init__(self, folder: str | os.PathLike, bench: BenchConfig, overwrite: bool = False):
        self.folder = Path(folder).expanduser() / "finished"
        self.settings = {k: v for k, v in json.loads(json.dumps(asdict(bench))).items() if k not in SELECTING}
        # the card and torch decide timings, 'auto' precision and what fits: rows from another are not comparable
        self.settings.update(card=device_name(torch.device(bench.device)), torch=torch.__version__)
        self.selected = [(variant, seed) for seed in bench.seeds for variant in bench.variants]
        if overwrite and self.folder.is_dir():
            for path in self.folder.glob("*.json"):
                path.unlink()
        self.folder.mkdir(parents=True, exist_ok=True)

    def __len__(self) -> int:
        """How many of this bench's (variant, seed) runs are finished already."""
        return sum(self.row(variant, seed) is not None for variant, seed in self.selected)

    def check(self, data_fingerprint: str) -> None:
        """Refuse rows of a bench with other settings or other data; record ours when the folder is new."""
        current = dict(self.settings, data_fingerprint=data_fingerprint)
        path = self.folder / "settings.json"
        if not path.exists():
            write_json_atomic(path, current)
            return
        saved = json.loads(path.read_text())
        changed = [f"{k}: {saved.get(k)!r} then, {current.get(k)!r} now" for k in sorted(set(saved) | set(current))
                   if saved.get(k) != current.get(k)]
        if changed:
            raise ValueError(f"{self.folder.parent} holds finished runs of a bench with other settings ("
                             + "; ".join(changed) + "): rerun with those settings to continue it, pass --overwrite "
                             "to start over, or choose another --output-dir")

    def row(self, variant: str, seed: int) -> dict[str, Any] | None:
        """The row of a finished run, or None."""
        path = self.folder / f"run-{run_slug(variant, seed)}.json"
        return json.loads(path.read_text()) if path.exists() else None

    def keep(self, variant: str, seed: int, row: dict[str, Any]) -> None:
        """Write a run's row the moment it finishes; a row that did not run (no fit, out of memory) is run again
        next time, when the free memory may differ."""
        if "note" in row:
            return
        write_json_atomic(self.folder / f"run-{run_slug(variant, seed)}.json", row)

    def peaks(self, seed: int, measure: Callable[[], dict[str, float]]) -> dict[str, float]:
        """The round's measured matmul peaks: kept with its rows, so the round's MFU keeps its denominator; a
        precision a later variant adds is measured then and added."""
        path = self.folder / f"peaks-{seed}.json"
        kept = json.loads(path.read_text()) if path.exists() else {}
        measured = measure()
        peaks = {**measured, **kept}
        if peaks != kept:
            write_json_atomic(path, peaks)
        return peaks


def run_bench(bench: BenchConfig, loop: Callable = train, finished: FinishedRuns | None = None) -> dict[str, Any]:
    """Every variant on the same frames, in rounds (A B C … per seed); rows with ratios and noise (chapter 5).

    Interleaving puts a slow spell of a shared machine on every variant alike instead of on whichever ran then
    (odd rounds run the variants in reverse order); the matmul peak is measured again in every round.
    `loop` trains each variant: chapter 5 passes the `train` its cell shows, so an edit there changes the table.
    `finished`: where each (variant, seed) row is kept as it completes; rows already there are not run again.
    """
    frames = load_frames(variant_settings(bench, bench.variants[0])[1])
    note = auto_precision_note(bench)
    if note is not None:  # never fp32 without a word where a row asks for mixed precision
        print(note)
    if finished is not None:
        finished.check(frames_fingerprint(frames))
    rounds, peaks_per_round = [], []
    order = list(arm_order(bench.variants, bench.seeds, alternate=True))  # A B C, then C B A: no fixed slot
    for seed in bench.seeds:
        measure = functools.partial(matmul_peaks, bench)
        peaks = finished.peaks(seed, measure) if finished is not None else measure()
        peaks_per_round.append(peaks)
        rows = {}
        for _, variant in (arm for arm in order if arm[0] == seed):
            rows[variant] = finished.row(variant, seed) if finished is not None else None
            if rows[variant] is not None and variant == PLANNED:
                same_plan(rows[variant], variant_settings(bench, PLANNED, seed)[1].micro_batch)
            if rows[variant] is None:
                rows[variant] = run_variant(bench, variant, frames, peaks, seed, loop)
                if finished is not None:
                    finished.keep(variant, seed, rows[variant])
        rounds.append([rows[v] for v in bench.variants])
    rows = combine_rounds(rounds)
    if "fp32 baseline" in bench.variants:
        rows = add_ratios(rows)
    peaks = {p: statistics.median(r[p] for r in peaks_per_round) for p in peaks_per_round[0]}
    return {"rows": rows, "rounds": rounds, "matmul_tflops": peaks, "matmul_tflops_per_round": peaks_per_round,
            "bf16_matmul_tflops": peaks.get("bf16"), "settings": asdict(bench), "environment": environment_info(),
            "precision note": note}


def same_plan(kept: dict[str, Any], micro_batch: int) -> None:
    """Refuse to pool a finished planned row with rows of another plan (free memory moves between processes)."""
    if kept.get("micro-batch", micro_batch) != micro_batch:
        raise ValueError(f"the finished '{PLANNED}' rows ran micro-batch {kept['micro-batch']}, this bench plans "
                         f"{micro_batch}: pass --memory to plan for a fixed budget, or --overwrite to start over")


def variant_shape(bench: BenchConfig, variant: str, num_labels: int) -> MatmulShape:
    """The matmul shape of a variant's model, built on the meta device from its configuration with the
    variant's levers (LoRA's adapters are linear layers too): no weights, no download (chapter 5, A3)."""
    from transformers import AutoModelForSequenceClassification

    _, _, config = variant_settings(bench, variant)
    with torch.device("meta"):
        model = AutoModelForSequenceClassification.from_config(model_config(bench.model_id, num_labels))
        prepare_model(model, dataclasses.replace(config, gradient_checkpointing=False))
    return matmul_shape(model)


def rebuilt_work(bench: BenchConfig, variant: str, seed: int, tokenizer, shape: MatmulShape) -> BatchWork:
    """One epoch's work of a (variant, seed) as the bench drew it: its training batches rebuilt from the same
    data, tokenizer and seed (a recorded bench that predates the work columns) (chapter 5, A3)."""
    _, data, _ = variant_settings(bench, variant, seed)
    frames = load_frames(data)
    return loader_work(shape, epoch_batches(build_loaders(data, tokenizer, frames, seed=seed).train, 1))


def add_work(result: dict[str, Any], tokenizer, shapes: dict[str, MatmulShape], source: str) -> dict[str, Any]:
    """A recorded bench's work and MFU, padded and useful, from its rebuilt batches: every round's row against
    that round's measured peak, the combined rows the mean over rounds (chapter 5, A3). `source` says how the
    batches were rebuilt; it is kept as `result["work"]`."""
    fields = {k: v for k, v in result["settings"].items() if k in {f.name for f in dataclasses.fields(BenchConfig)}}
    bench = BenchConfig(**{**fields, "seeds": tuple(fields["seeds"]), "variants": tuple(fields["variants"])})
    for peaks, runs in zip(result["matmul_tflops_per_round"], result["rounds"]):
        for row in runs:
            if "note" in row:
                continue
            work = rebuilt_work(bench, row["variant"], row["seed"], tokenizer, shapes[row["variant"]])
            used = model_flops_utilisation(work, row["time per epoch (s)"], peaks[row["precision"]])
            row.update({**work_columns(work), "MFU": used.padded, "useful MFU": used.useful})
    for row, runs in zip(result["rows"], zip(*result["rounds"])):
        if "note" in row:
            continue
        for key in (*WORK_COLUMNS, "MFU", "useful MFU"):
            row[key] = summarize([r[key] for r in runs]).mean
    result["work"] = source
    return result
