"""Chapter 8's levers side by side: the same data, budget and seeds; bytes, time and accuracy with its noise.

Each lever is a `dataclasses.replace` of one recipe (`lever_recipes`); `lever_memory` measures one step's
exact bytes by category, `run_levers` fine-tunes every lever once per seed and compares each accuracy with
full fine-tuning's against the noise of the seeds and the test set, paired (`stats.compare_paired`)."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import torch

from bertmem.core.runtime import progress
from bertmem.core.units import GIB, MIB
from bertmem.data.batching import widest_batch
from bertmem.data.loaders import DataConfig, build_loaders, load_frames
from bertmem.experiments.compare import arm_order, fit_arm
from bertmem.experiments.run import build_model
from bertmem.experiments.stats import compare_paired, summarize
from bertmem.loop.combined import PACKAGE_LEVERS, Levers, make_optimizer_and_scheduler, prepare_model, train
from bertmem.loop.config import RunConfig, TrainConfig
from bertmem.loop.precision import choose_precision
from bertmem.memory.estimate import estimate_step_memory, model_config
from bertmem.memory.measure import measure_step_memory
from bertmem.memory.planner import PlanRequest
from bertmem.memory.sharding import largest_parameter, offload_bytes
from bertmem.model.adapters import LORA_LR_FACTOR, LORA_RANK, trainable_share
from bertmem.model.loading import find_encoder_layers

FULL = "full fine-tuning (AdamW)"


def lever_recipes(recipe: TrainConfig, num_layers: int, lora_rank: int = LORA_RANK) -> dict[str, TrainConfig]:
    """Full fine-tuning and each lever as a replacement of the same recipe; LoRA at `lora_rank` (chapter 8)."""
    replace = dataclasses.replace
    return {FULL: recipe,
            "8-bit AdamW": replace(recipe, optimizer="adamw8bit"),
            "Adafactor": replace(recipe, optimizer="adafactor"),
            f"frozen lower {num_layers // 2} of {num_layers} layers": replace(recipe, freeze_layers=num_layers // 2),
            f"LoRA r={lora_rank}": replace(recipe, lora_r=lora_rank,
                                           learning_rate=recipe.learning_rate * LORA_LR_FACTOR)}


def lever_memory(model: torch.nn.Module, batch: dict, recipe: TrainConfig,
                 levers: Levers = PACKAGE_LEVERS) -> dict[str, float]:
    """One step's exact bytes by category under a lever; changes the model, so pass a spare one (ch. 8)."""
    prepare_model(model, recipe, levers=levers).train()
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer, _ = make_optimizer_and_scheduler(model, recipe, 1, levers)  # the one the training run builds
    device = next(model.parameters()).device.type
    precision = choose_precision(recipe.precision, device, verbose=False).precision
    report = measure_step_memory(model, batch, optimizer, precision)
    trained = sum(p.numel() for p in trainable)
    return {"trainable share": trainable_share(model), "weights (MiB)": report.parameters / MIB,
            "gradients (MiB)": report.gradients / MIB, "optimizer state (MiB)": report.optimizer_state / MIB,
            "saved activations (MiB)": report.activations / MIB, "step peak (MiB)": report.step_peak / MIB,
            "state bytes per trained parameter": report.optimizer_state / max(trained, 1)}


def run_levers(run: RunConfig, data: DataConfig, recipes: dict[str, TrainConfig],
               seeds: tuple[int, ...] = (0, 1, 2), loop: Callable = train,
               levers: Levers = PACKAGE_LEVERS) -> list[dict[str, Any]]:
    """Fine-tune every lever once per seed on the same frames; one row per lever with memory (ch. 8).

    `levers`: the functions that apply LoRA, freezing and the optimizer, in the measurement and in every run
    (`loop` gets them as `levers=`). Memory is measured once per lever on the widest training batch of a
    spare model; accuracy and macro-F1 are mean ± std over the seeds; the verdict compares each lever with
    full fine-tuning.
    """
    loop = functools.partial(loop, levers=levers)
    frames = load_frames(data)
    names = frames[0].attrs["label_names"]
    device = torch.device(run.device or "cpu").type
    run = dataclasses.replace(run, progress=False)  # one bar for all the runs
    resolved = {}  # 'auto' resolved once, quietly: every run of a lever uses the same precision
    for lever, recipe in recipes.items():
        resolved[lever] = dataclasses.replace(
            recipe, precision=choose_precision(recipe.precision, device, verbose=False).precision)
    recipes = resolved
    runs: dict[str, list[dict[str, Any]]] = {lever: [] for lever in recipes}
    memory: dict[str, dict[str, float]] = {}

    def measure_once(lever: str, recipe: TrainConfig, seed: int):
        def measure(model, tokenizer, loaders) -> dict[str, Any]:
            if run.device is not None:
                model.to(run.device)
            if lever not in memory:  # a spare model and loader: the run's own order and weights stay untouched
                spare, _ = build_model(run, names, data.max_length)
                batches = build_loaders(data, tokenizer, frames, seed=seed).train
                memory[lever] = lever_memory(spare.to(next(model.parameters()).device), widest_batch(batches),
                                             recipe, levers)
                del spare
            return {}
        return measure

    steps = progress(None, "levers × seeds", total=len(seeds) * len(recipes))
    for seed, lever in arm_order(list(recipes), seeds):
        recipe = dataclasses.replace(recipes[lever], seed=seed)
        done = fit_arm(lever, (run, data, recipe), frames, loop, measure_once(lever, recipe, seed))
        if done.note is not None:
            raise RuntimeError(f"{lever} (seed {seed}): {done.note}; give the levers a smaller micro-batch "
                               "(DataConfig.micro_batch, BERTMEM_MICRO_BATCH)")
        result = done.result
        metrics = result.final_metrics
        runs[lever].append({"accuracy": metrics["accuracy"], "macro_f1": metrics["macro_f1"],
                            "eval_loss": metrics["eval_loss"], "losses": list(result.losses),
                            "time": result.epochs[-1]["train_time_s"], "correct": result.correct})
        steps.update(1)
    steps.close()
    return _lever_rows(runs, memory)


def _lever_rows(runs: dict[str, list[dict[str, Any]]], memory: dict[str, dict[str, float]]) -> list[dict[str, Any]]:
    """Mean ± std per lever and the accuracy difference to the first lever, paired by seed and test example."""
    base = next(iter(runs.values()))  # every run evaluated: scores always kept
    rows = []
    for lever, results in runs.items():
        accuracy = summarize([r["accuracy"] for r in results])
        f1 = summarize([r["macro_f1"] for r in results])
        row = {"lever": lever, **memory[lever],
               "time per epoch (s)": summarize([r["time"] for r in results]).mean,
               "accuracy": accuracy.mean, "accuracy std": accuracy.std, "macro-F1": f1.mean, "macro-F1 std": f1.std,
               "eval loss": summarize([r["eval_loss"] for r in results]).mean,
               "accuracies": [r["accuracy"] for r in results]}
        if rows:  # against the first lever, seed by seed: did the runs differ at all, and by how much
            verdict = compare_paired([r["correct"] for r in base], [r["correct"] for r in results])
            row["accuracy Δ vs noise"] = verdict.describe(" points", scale=100)
            row["answers changed"] = verdict.changed
            row["largest step-loss gap"] = max(largest_gap(a["losses"], b["losses"]) for a, b in zip(base, results))
        rows.append(row)
    return rows


def largest_gap(losses_a: list[float], losses_b: list[float]) -> float:
    """The largest |difference| between two runs' training losses at the same optimizer step (chapter 8)."""
    return max((abs(a - b) for a, b in zip(losses_a, losses_b)), default=0.0)


def estimated_lever_rows(model: str = "bert-base-uncased", seq_len: int = 512, micro_batch: int = 8,
                         precision: str = "fp16", cards_gb: tuple[int, ...] = (16, 24),
                         lora_rank: int = LORA_RANK) -> list[dict[str, Any]]:
    """Each lever for a GPU step at `seq_len` tokens (LoRA at `lora_rank`), estimated under FakeTensorMode (ch. 8).

    Once activations dominate, the peak grows linearly with the micro-batch (chapter 1), so steps of
    `micro_batch` and twice that many examples give the largest micro-batch each card holds, with the
    planner's CUDA context and allocator margin added. The planner's own search (`plan_micro_batch`, several
    more steps each) gives the same answers for every row of chapter 8's table at six times the cost; a test
    checks full fine-tuning of bert-base.
    ZeRO-Offload (DeepSpeed, CUDA only) is counted from the full fine-tuning step's activations
    (`memory.sharding.offload_bytes`): its row sums weights, DeepSpeed's gradient buffer and activations, a sum that
    can miss the peak either way (chapter 1), where the other rows give the step's peak; its gradients column is that
    buffer, allocated at DeepSpeed's default bucket size whatever the model.
    """

    config = model_config(model)
    layers = config.num_hidden_layers
    levers = {FULL: {}, "8-bit AdamW": {"optimizer": "adamw8bit"}, "Adafactor": {"optimizer": "adafactor"},
              f"frozen lower {layers // 2} of {layers} layers": {"freeze_layers": layers // 2},
              f"LoRA r={lora_rank}": {"lora_r": lora_rank}}
    margin = PlanRequest(model_id=model, max_length=seq_len)
    rows, lines = [], {}
    for lever, kwargs in levers.items():
        one, two = (estimate_step_memory(config, b, seq_len, precision=precision, attention="sdpa", **kwargs)
                    for b in (micro_batch, 2 * micro_batch))
        if one.peak_phase != two.peak_phase:
            raise ValueError(f"{lever}: the peak moves from {one.peak_phase} to {two.peak_phase} between "
                             f"{micro_batch} and {2 * micro_batch} examples; pass a larger micro_batch")
        slope = (two.step_peak - one.step_peak) / micro_batch
        lines[lever] = (one.step_peak - slope * micro_batch, slope)
        rows.append({"model": model, "lever": lever, "optimizer state (GiB)": one.optimizer_state / GIB,
                     "gradients (GiB)": one.gradients / GIB, "activations (GiB)": one.activations / GIB})
        if lever == FULL:  # 16-bit weights and DeepSpeed's gradient buffer on the GPU, the activations as before
            offload_gpu = offload_bytes(one.parameters // 4, 0, half_bytes=2,
                                        largest_param=largest_parameter(config))["gpu"]
            offload, buckets = offload_gpu["total"], offload_gpu["gradient buffer (16-bit)"]
            per_example = (two.activations - one.activations) / micro_batch
            lines["ZeRO-Offload (optimizer on the CPU)"] = (offload + one.activations - per_example * micro_batch,
                                                            per_example)
    rows.append({"model": model, "lever": "ZeRO-Offload (optimizer on the CPU)", "optimizer state (GiB)": 0.0,
                 "gradients (GiB)": buckets / GIB, "activations (GiB)": rows[0]["activations (GiB)"]})
    for row in rows:
        fixed, slope = lines[row["lever"]]
        row[f"peak at {micro_batch} (GiB)"] = (fixed + slope * micro_batch) / GIB
        for card in cards_gb:
            budget = (card * 1e9 - margin.cuda_context_bytes) / (1 + margin.allocator_margin)
            row[f"largest micro-batch, {card} GB"] = max(0, int((budget - fixed) // slope))
    return rows


def encoder_depth(model: torch.nn.Module) -> int:
    """The number of encoder layers (chapter 8 freezes the lower half)."""
    return len(find_encoder_layers(model)[1])
