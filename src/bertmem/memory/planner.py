"""Will it fit? The largest micro-batch under a memory budget, from the step's estimated peak (chapters 1 and 5).

The planner asks `estimate_step_memory` (FakeTensorMode: nothing is allocated, no GPU is needed) for the peak of
one steady-state step, or reads it off the stored lines of the same estimates where they cover the request
(`bertmem.memory.stored`) — the most memory alive at one moment, not the sum of the categories (chapter 1) — and adds
what the estimate cannot see: the CUDA context and a margin for the caching allocator's rounding and fragmentation.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

import torch

from bertmem.core.devices import empty_cache, model_device
from bertmem.core.flags import RefusesRenamed
from bertmem.core.units import GIB
from bertmem.data.windows import check_window, default_stride, window_count
from bertmem.loop.precision import PRECISIONS, choose_precision
from bertmem.memory.cards import (
    CARD_MEMORY,
    CARDS,
    CUDA_CONTEXT_BYTES,
    DEFAULT_CARD,
    Card,
    card_named,
    card_precision,
    with_article,
)
from bertmem.memory.estimate import estimate_step_memory, model_config, model_work
from bertmem.memory.measure import measure_step_memory
from bertmem.memory.speed import EpochRequest, ModelWork, book_tokens_per_example, epoch_estimate
from bertmem.memory.stored import StoredStep, estimator_versions, stored_step, versions_text
from bertmem.model.adapters import LORA_RANK
from bertmem.model.known import attention_kernels, takes_token_types
from bertmem.model.loading import enable_gradient_checkpointing


FIT_CARDS = ("T4", "V100", "RTX3090")  # a Colab T4, a 16 GB V100, the blog post's 24 GB RTX 3090


def fits_column(card: str) -> str:
    """The column `estimated_rows` gives card `card` (a `CARDS` key): 'fits T4', 'fits RTX 3090' (A3)."""
    return f"fits {CARDS[card].name.removeprefix('Colab ')}"


def estimated_rows(model: str = "bert-base-uncased", seq_len: int = 512, effective_batch: int = 32,
                   accumulation_steps: int = 4, half: str = "bf16",
                   cards: tuple[str, ...] = FIT_CARDS) -> list[dict[str, Any]]:
    """The variants for a CUDA GPU, estimated with FakeTensorMode (no GPU needed), and whether each fits each of
    `cards` by name — a 16 GB V100 holds 1 GiB more than a T4 — with what the planner adds (A3).

    The peak is the most memory alive at one moment of a steady-state step (the timeline), not the sum of
    weights, gradients, optimizer state and activations, which no moment of the step holds at once. `half` is
    the 16-bit format of the mixed-precision rows: fp16 on a T4, bf16 on Ampere and newer (the same bytes).
    """
    if half not in ("bf16", "fp16"):
        raise ValueError(f"half must be 'bf16' or 'fp16', got {half!r}")

    micro = effective_batch // accumulation_steps
    specs = {"fp32 baseline": (effective_batch, "eager", "fp32", False, None),
             "accumulation ×4": (micro, "eager", "fp32", False, None),
             "mixed precision + accumulation": (micro, "eager", half, False, None),
             "full recipe": (micro, "sdpa", half, False, None),
             "full + gradient checkpointing": (micro, "sdpa", half, True, None),
             "smallest footprint": (micro, "sdpa", half, True, LORA_RANK)}  # + LoRA (chapter 8)
    rows = []
    for variant, (batch, attention, precision, ckpt, lora_r) in specs.items():
        r = estimate_step_memory(model, batch, seq_len, precision=precision, attention=attention,
                                 gradient_checkpointing=ckpt, lora_r=lora_r)
        rows.append({"variant": variant, "micro-batch": batch, "attention": attention, "precision": precision,
                     "activations (GiB)": r.activations / GIB, "estimated peak (GiB)": r.step_peak / GIB,
                     "peak during": r.peak_phase, "sum of categories (GiB)": r.total / GIB})

    base = rows[0]["estimated peak (GiB)"]
    needs = PlanRequest()  # what the planner adds: allocator margin and CUDA context
    for row in rows:
        row["peak ratio"] = row["estimated peak (GiB)"] / base
        needed = needs.needed_bytes(int(row["estimated peak (GiB)"] * GIB))
        for card in cards:  # the total nvidia-smi reports for each card
            row[fits_column(card)] = "yes" if needed <= CARD_MEMORY[card.lower()] else "no"
    return rows
ALLOCATOR_MARGIN = 0.115  # fraction of the estimated peak (book.published.fit_margin on the fit rows)
OPTIMIZERS = ("adamw", "adamw8bit", "adafactor", "sgd", "none")


@dataclass(frozen=True)
class PlanRequest(RefusesRenamed):
    """What to plan for: model, tokens, precision, memory budget and the effective batch (chapter 5)."""

    model_id: str = field(default="bert-base-uncased", metadata={
        "help": "a Hub id (13 encoders answer offline: `bertmem.model.known`, e.g. FacebookAI/roberta-large) or a "
                "local model folder", "flag": "--model"})
    max_length: int = field(default=512, metadata={"help": "tokens per example", "aliases": ("--max-seq-length",)})
    precision: str = field(default="fp16", metadata={
        "help": "autocast precision; auto: the card's 16-bit format (bf16 where it has bf16, fp16 on a T4; on "
                "this machine's GPU, what it runs)", "choices": ("auto",) + PRECISIONS, "cli_default": "auto"})
    memory_bytes: int = field(default=CARD_MEMORY[DEFAULT_CARD], metadata={  # the command line reads text
        "help": f"device memory: 15GiB, 16GB, a card ({', '.join(CARD_MEMORY)}); 'auto' reads this machine's CUDA "
                "device's free memory (a T4 where there is none)",
        "flag": "--memory", "parse": str, "cli_default": DEFAULT_CARD})
    effective_batch: int = field(default=32, metadata={"help": "examples per optimizer step"})
    attention: str = field(default="sdpa", metadata={"help": "attention kernel", "choices": ("sdpa", "eager")})
    gradient_checkpointing: bool = field(default=False, metadata={"help": "recompute activations in backward"})
    optimizer: str = field(default="adamw", metadata={"help": "optimizer state to hold", "choices": OPTIMIZERS})
    cuda_context_bytes: int = field(default=CUDA_CONTEXT_BYTES, metadata={
        "help": "memory the CUDA context takes outside PyTorch's tensors (a published measurement; measure yours)",
        "flag": "--cuda-context", "parse": str, "cli_default": f"{CUDA_CONTEXT_BYTES // 2**20}MiB"})
    allocator_margin: float = field(default=ALLOCATOR_MARGIN, metadata={
        "help": "extra fraction of the peak for allocator rounding and fragmentation (fitted to published runs)"})
    lora_r: int | None = field(default=None, metadata={"help": "LoRA rank: train adapters, not the encoder"})
    freeze_layers: int = field(default=0, metadata={"help": "frozen embeddings + bottom encoder layers"})
    window: int | None = field(default=None, metadata={
        "help": "read longer texts as overlapping windows of this many tokens (chapter 9); the micro-batch counts "
                "documents"})
    stride: int | None = field(default=None, metadata={
        "help": "tokens of text between window starts (default: three quarters of a window)"})
    kernels: str = field(default="cuda", metadata={  # whose kernel choices the estimate follows
        "help": "whose kernel choices to estimate: a GPU's or this CPU's", "choices": ("cuda", "cpu")})
    RENAMED = {"model": "model_id"}


    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r} ('auto' is resolved "
                             "for a card first: bertmem.memory.planner.plan_precision)")
        if self.attention not in ("eager", "sdpa"):
            raise ValueError(f"attention must be 'eager' or 'sdpa', got {self.attention!r}")
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        if self.kernels not in ("cuda", "cpu"):
            raise ValueError(f"kernels must be 'cuda' or 'cpu', got {self.kernels!r}")
        if self.max_length < 8 or self.effective_batch < 1 or self.memory_bytes <= 0:
            raise ValueError("max_length must be >= 8, effective_batch >= 1 and memory > 0; got "
                             f"{self.max_length}, {self.effective_batch}, {self.memory_bytes}")

        check_window(self.window, self.stride, self.max_length)
        if not 0 <= self.allocator_margin < 1 or self.cuda_context_bytes < 0:
            raise ValueError("allocator_margin must be in [0, 1) and cuda_context_bytes >= 0")

    def needed_bytes(self, tensor_peak: int) -> int:
        """Device memory a step needs: its tensors at the peak, the allocator margin, the CUDA context."""
        return int(tensor_peak * (1 + self.allocator_margin)) + self.cuda_context_bytes


@dataclass
class Plan:
    """The planner's answer: micro-batch, accumulation steps, and the estimated peak split by category."""

    micro_batch: int
    accumulation_steps: int
    largest_fitting_batch: int
    estimated_peak_bytes: int  # tensors at the peak + CUDA context + allocator margin
    memory_bytes: int
    peak_phase: str
    breakdown: dict[str, int] = field(default_factory=dict)
    request: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # where the plan differs from what was asked, and why
    precision_asked: str | None = None  # 'auto' when the precision was chosen for the card: the command keeps it
    memory_asked: str | None = None  # the card or size as given (t4, 15GiB, auto): the train command names it
    nearby: list[dict[str, int]] = field(default_factory=list)  # effective batches that split well, if this one
    #                                                             splits poorly (`split_advice`); else empty
    epoch: dict[str, Any] | None = None  # the estimated time per epoch on the named card (`plan_epoch`)
    no_epoch: str | None = None  # why there is no time estimate, where there is none
    estimated_from: str = ""  # the stored lines, or an estimate made afresh and why (`plan_micro_batch`)
    work: ModelWork | None = None  # what a training example costs the model as the stored lines carry it, for
    #                                the time estimate (`plan_epoch`); None: counted there, on the meta device

    def as_dict(self) -> dict[str, Any]:
        """One JSON-ready object (`bertmem plan --json`), with the `bertmem train` command that runs it."""
        return {**asdict(self), "train_command": self.train_command()}

    def train_command(self, dataset: str = "YOUR_FILE.csv", output_dir: str = "runs/mine") -> str:
        """The `bertmem train` command for this choice on a file: chapter 5's recipe (`--recipe book`), every
        setting asked here, and `--micro-batch auto`, so the run plans again on the same card for the file's longest
        batch (A1, the README; the "Will it fit?" page prints the same command)."""
        r = self.request
        named = [card for card, size in CARD_MEMORY.items() if size == r["memory_bytes"]]  # a card by its name
        memory = self.memory_asked or (named[0] if named else f"{r['memory_bytes'] // 2**20}MiB")
        flags = ["--model", r["model_id"]] + ([] if memory == "auto" else ["--memory", memory])  # auto: this GPU
        flags += ["--max-length", str(r["max_length"]), "--precision", self.precision_asked or r["precision"],
                  "--attention", r["attention"]]
        flags += ["--gradient-checkpointing"] if r["gradient_checkpointing"] else []
        flags += ["--optimizer", r["optimizer"]]
        flags += ["--lora-r", str(r["lora_r"])] if r.get("lora_r") else []
        flags += ["--freeze-layers", str(r["freeze_layers"])] if r.get("freeze_layers") else []
        flags += ["--window", str(r["window"])] if r.get("window") else []
        flags += ["--stride", str(r["stride"])] if r.get("stride") else []
        flags += ["--effective-batch", str(r["effective_batch"]), "--micro-batch", "auto"]
        return " ".join(["bertmem train", "--dataset", dataset, "--output-dir", output_dir, "--recipe", "book",
                         *flags])

    def describe(self) -> str:
        """A few lines a reader can act on (`bertmem plan`)."""
        r = self.request
        lines = [f"{r['model_id']}, {r['max_length']} tokens, {r['precision']}, {r['attention']} attention"
                 + (", gradient checkpointing" if r["gradient_checkpointing"] else "")
                 + (f", windows of {r['window']} tokens" if r.get("window") else "")
                 + f", {r['optimizer']}; budget {self.memory_bytes / GIB:.2f} GiB",
                 f"largest micro-batch that fits: {self.largest_fitting_batch}"
                 + (" (not searched beyond the effective batch)"
                    if self.largest_fitting_batch >= r["effective_batch"] else ""),
                 f"plan: micro-batch {self.micro_batch} × {self.accumulation_steps} accumulation steps "
                 f"= effective batch {self.micro_batch * self.accumulation_steps}"
                 + (f" ({self.micro_batch} is the largest divisor of {r['effective_batch']} that fits)"
                    if self.micro_batch < min(self.largest_fitting_batch, r["effective_batch"]) else ""),
                 *split_lines(self),
                 f"estimated peak {self.estimated_peak_bytes / GIB:.2f} GiB (during {self.peak_phase}):"]
        lines += [f"  {name:<34} {size / GIB:6.2f} GiB" for name, size in self.breakdown.items()]
        lines += [f"estimated from {self.estimated_from}"] if self.estimated_from else []
        if self.epoch or self.no_epoch:  # asked for (`plan_epoch`): the command always asks
            lines.append(f"time: {self.epoch['line']}" if self.epoch else f"time: no estimate: {self.no_epoch}")
        lines += [f"note: {note}" for note in self.notes]
        lines.append(f"to run it: {self.train_command()} (your file, and --text-column and --label-column if its "
                     "columns are not text and label; the run plans again for the file's longest batch)")
        return "\n".join(lines)


def largest_divisor(effective: int, limit: int) -> int:
    """The largest micro-batch up to `limit` that divides the effective batch: every micro-batch the same size."""
    return max(d for d in range(1, min(limit, effective) + 1) if effective % d == 0)


def split_advice(effective: int, largest: int) -> list[dict[str, int]]:
    """Where `effective` splits poorly — its largest divisor that fits is under half of what fits, up to the
    effective batch — the nearest effective batch below and above that splits well, with their splits; else []
    (`bertmem plan`, the "Will it fit?" page)."""
    def split(batch: int) -> dict[str, int]:
        micro = largest_divisor(batch, min(largest, effective))
        return {"effective_batch": batch, "micro_batch": micro, "accumulation_steps": batch // micro}

    def well(batch: int) -> bool:
        return 2 * split(batch)["micro_batch"] >= min(largest, effective, batch)

    if well(effective):
        return []
    below = next((b for b in range(effective - 1, 0, -1) if well(b)), None)
    above = next(b for b in range(effective + 1, 2 * effective + 2) if well(b))
    return [split(b) for b in (below, above) if b is not None]


def split_lines(plan: Plan) -> list[str]:
    """The lines `bertmem plan` prints when the effective batch splits poorly (chapter 2: a ragged split would be
    exact with per-example weights, but `bertmem train` splits evenly)."""
    if not plan.nearby:
        return []
    options = " or ".join(f"{s['effective_batch']} ({s['micro_batch']} × {s['accumulation_steps']})"
                          for s in plan.nearby)
    effective = plan.request["effective_batch"]
    return [f"effective batch {effective} splits poorly: micro-batches of {plan.micro_batch} where "
            f"{min(plan.largest_fitting_batch, effective)} fit; {options} split well (--effective-batch)"]


def plan_precision(precision: str, memory: str, gpu_capability: tuple[int, int] | None = None) -> tuple[str, str]:
    """`--precision auto` for a plan: a named card's 16-bit format, this GPU's choice, else a T4's fp16; with the
    words that say why (`bertmem plan`)."""
    if precision != "auto":
        return precision, "as asked"
    if str(memory).strip().lower() == "auto" and gpu_capability is not None:
        return choose_precision("auto", "cuda", gpu_capability, verbose=False).precision, "auto: this GPU's choice"
    return card_precision(card_named(memory))


def windows_per_document(request: PlanRequest) -> int:
    """How many windows a document of max_length tokens is read as (1 without a window; chapter 9)."""

    if request.window is None or request.window >= request.max_length:
        return 1
    return window_count(request.max_length, request.window, request.stride or default_stride(request.window))


def estimate_for(request: PlanRequest, batch: int):
    """The estimate of one steady-state step at micro-batch `batch` (documents: each window is a sequence)."""

    windows = windows_per_document(request)
    length = request.max_length if windows == 1 else request.window
    return estimate_step_memory(request.model_id, batch * windows, length, precision=request.precision,
                                attention=request.attention, optimizer=request.optimizer,
                                gradient_checkpointing=request.gradient_checkpointing, device=request.kernels,
                                lora_r=request.lora_r, freeze_layers=request.freeze_layers)


def runnable(request: PlanRequest, kernels: tuple[str, ...] | None = None) -> tuple[PlanRequest, list[str]]:
    """The request as the model can run it, with a note for each change: an attention kernel the model lacks in
    transformers (DeBERTa-v3 has no SDPA) becomes eager, which every model has (`bertmem plan`). `kernels`: the
    model's, where known (the stored lines hold them), else read from transformers."""
    kernels = kernels or attention_kernels(model_config(request.model_id))
    if request.attention in kernels:
        return request, []
    note = (f"{request.model_id} has no {request.attention} attention in transformers: planned with "
            f"{kernels[0]} attention, the kernel it runs")
    return replace(request, attention=kernels[0]), [note]


def estimate_source(request: PlanRequest, cap: int, fresh: bool) -> tuple[StoredStep | None, str]:
    """The stored lines that answer a plan searched up to micro-batch `cap` (the "Will it fit?" page's), or None
    where they do not cover it or `fresh` asks for a new estimate; with the words that say which (`bertmem plan`)."""
    step = "asked for with --fresh" if fresh else stored_step(request)
    if isinstance(step, StoredStep) and cap > step.max_batch:
        step = f"micro-batches beyond the stored {step.max_batch}"
    here = estimator_versions()
    if isinstance(step, StoredStep):
        return step, (f"the stored lines of the \"Will it fit?\" page, estimated under FakeTensorMode with "
                      f"{versions_text(step.versions)}"
                      + ("" if here == step.versions else f"; this machine has {versions_text(here)}")
                      + " (--fresh, or fresh=True, estimates with this machine's)")
    return None, f"an estimate made now under FakeTensorMode with {versions_text(here)} ({step})"


def plan_micro_batch(request: PlanRequest, max_batch: int = 1024, fresh: bool = False) -> Plan:
    """The largest micro-batch whose estimated peak fits, and the accumulation for the effective batch (ch. 5).

    The peak grows linearly with the micro-batch once its moment is fixed, so two estimates give a first guess
    that a few more estimates confirm; the micro-batch used divides the effective batch exactly. Where the
    stored lines cover the request they give each estimate (the same numbers, read off the lines) unless
    `fresh`.
    """
    cap = min(max_batch, max(request.effective_batch, 2))  # a larger micro-batch would not be used
    stored, source = estimate_source(request, cap, fresh)
    request, notes = runnable(request, stored.attentions if stored else None)
    cache: dict[int, Any] = {}

    def report(batch: int):
        if batch not in cache:
            cache[batch] = stored.peak(batch) if stored else estimate_for(request, batch)
        return cache[batch]

    def fits(batch: int) -> bool:
        return request.needed_bytes(report(batch).step_peak) <= request.memory_bytes

    if not fits(1):
        minimum = request.needed_bytes(report(1).step_peak)
        raise ValueError(f"{request.model_id} at {request.max_length} tokens needs at least {minimum / GIB:.2f} GiB "
                         f"for one example ({request.precision}, {request.optimizer}), but the budget is "
                         f"{request.memory_bytes / GIB:.2f} GiB: use a card with more memory, fewer tokens, "
                         "gradient checkpointing or a smaller optimizer state")
    slope = max(1, report(2).step_peak - report(1).step_peak)
    usable = (request.memory_bytes - request.cuda_context_bytes) / (1 + request.allocator_margin)
    guess = 1 + int((usable - report(1).step_peak) // slope)
    low, high = 1, cap + 1  # fits(low) holds; fits(high) does not (or high is past the cap)
    guess = min(max(guess, 1), cap)
    if fits(guess):
        low = guess
    else:
        high = guess
    if low + 1 < high and low == guess and not fits(low + 1):  # the linear guess was exact
        high = low + 1
    while low + 1 < high:  # bisect what is left (the guess is off when the peak changes its moment)
        middle = (low + high) // 2
        low, high = (middle, high) if fits(middle) else (low, middle)
    largest = low
    micro = largest_divisor(request.effective_batch, largest)
    chosen = report(micro)
    tensor_peak = chosen.step_peak
    at = chosen.peak_breakdown
    breakdown = {"weights": at.get("weights", 0), "gradients": at.get("gradients", 0),
                 "optimizer state": at.get("optimizer state", 0),
                 "activations and temporaries": at.get("saved activations", 0) + at.get("temporaries", 0),
                 f"allocator margin ({request.allocator_margin:.1%})": int(tensor_peak * request.allocator_margin),
                 "CUDA context": request.cuda_context_bytes}
    return Plan(micro_batch=micro, accumulation_steps=request.effective_batch // micro,
                largest_fitting_batch=largest, estimated_peak_bytes=request.needed_bytes(tensor_peak),
                memory_bytes=request.memory_bytes, peak_phase=chosen.peak_phase, breakdown=breakdown,
                request=asdict(request), notes=notes, nearby=split_advice(request.effective_batch, largest),
                estimated_from=source, work=stored.work if stored else None)


SIZE_HAS_NO_SPEED = "a budget given as a size has no known speed: name the card (e.g. --memory t4)"


def plan_epoch(plan: Plan, card: Card | None, epoch: EpochRequest, no_card: str = SIZE_HAS_NO_SPEED,
               ) -> tuple[dict[str, Any] | None, str | None]:
    """The plan's estimated time per epoch on `card` for `epoch`'s data (IMDb's by default), as `bertmem plan`
    prints it and the "Will it fit?" page computes it; or (None, why not): no card (`no_card` says why), windows
    (chapter 9), a precision the card has no rate for."""
    r = plan.request
    if card is None:
        return None, no_card
    if r.get("window"):
        return None, "reading windows (--window) is not estimated"
    if r["precision"] not in card.peak_tflops and r["precision"] not in card.measured_tflops:
        return None, (f"{with_article(card.name)} has no {r['precision']} rate (its 16-bit format: "
                      f"{card.low_precision()})")
    tokens = epoch.tokens_per_example or book_tokens_per_example(r["max_length"])
    work = plan.work or model_work(r["model_id"], r.get("lora_r"), r.get("freeze_layers") or 0)  # or the lines'
    estimate = epoch_estimate(work, epoch.train_size, tokens, plan.micro_batch, card, r["precision"],
                              r["gradient_checkpointing"])
    return ({**asdict(estimate), "line": estimate.line(), "examples": epoch.train_size,
             "tokens_per_example": tokens}, None)


def random_batch(model, batch_size: int, seq_len: int, seed: int = 0) -> dict:
    """Seeded random token ids shaped as the estimate's batch, with one half-padded row (chapter 5, A3).

    The padded row is there as in real batches: with an all-ones mask transformers skips building the attention
    mask (a data-dependent shortcut the planner, which cannot see values, never takes).
    """
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, model.config.vocab_size, (batch_size, seq_len), generator=generator)
    mask = torch.ones_like(ids)
    mask[0, seq_len // 2:] = 0
    batch = {"input_ids": ids, "attention_mask": mask,
             "labels": torch.randint(0, model.config.num_labels, (batch_size,), generator=generator)}
    if takes_token_types(model, model.config):  # the batch the estimate builds
        batch["token_type_ids"] = torch.zeros_like(ids)
    return batch


def planner_vs_measured(config_or_model_id, model, batch_size: int, seq_len: int, precision: str = "fp32",
                        attention: str = "sdpa", gradient_checkpointing: bool = False) -> dict[str, Any]:
    """The planner's estimate against one real CPU step of `model` (same shapes): a validation row (chapter 5).

    `model` must be built with the same attention implementation; its step runs on this machine's CPU, so the
    estimate follows the CPU's kernel choices.
    """

    estimate = estimate_step_memory(config_or_model_id, batch_size, seq_len, precision=precision,
                                    attention=attention, gradient_checkpointing=gradient_checkpointing, device="cpu")
    model.train()
    if gradient_checkpointing:
        enable_gradient_checkpointing(model)
    batch = random_batch(model, batch_size, seq_len)
    measured = measure_step_memory(model, batch, torch.optim.AdamW(model.parameters(), foreach=False), precision)
    return {"batch × seq": f"{batch_size} × {seq_len}", "precision": precision, "attention": attention,
            "checkpointing": "yes" if gradient_checkpointing else "no",
            "activations, planner (MiB)": estimate.activations / 2**20,
            "activations, measured (MiB)": measured.activations / 2**20,
            "peak, planner (MiB)": estimate.step_peak / 2**20, "peak, measured (MiB)": measured.step_peak / 2**20,
            "activation error": estimate.activations / measured.activations - 1,
            "peak error": estimate.step_peak / measured.step_peak - 1}


@dataclass(frozen=True)
class StepAttempt:
    """What one real training step did on its device: it fit (with its peak), or ran out of memory (chapter 1)."""

    fits: bool
    peak_bytes: int | None  # the device's peak (CUDA); None where torch does not track one
    error: str | None = None

    def describe(self) -> str:
        """One line for the page."""
        if self.fits:
            peak = "" if self.peak_bytes is None else f", peak {self.peak_bytes / GIB:.2f} GiB"
            return f"the step fits{peak}"
        return f"out of memory: {self.error}"


def attempt_training_step(model, batch: dict, precision: str = "fp32") -> StepAttempt:
    """One AdamW step on the model's device; an out-of-memory error becomes an answer, not a crash (chapter 1)."""

    device = model_device(model)
    try:
        report = measure_step_memory(model, batch, torch.optim.AdamW(model.parameters()), precision=precision)
        return StepAttempt(True, report.peak)
    except (torch.OutOfMemoryError, RuntimeError) as err:  # the allocator's own message: what it tried, what was free
        text = str(err).strip()
        if not isinstance(err, torch.OutOfMemoryError) and not any(
                sign in text for sign in ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED")):
            raise  # a real error, not the card running out (cuBLAS reports that as a RuntimeError)
        message = text.splitlines()[0] if text else "out of memory"
        return StepAttempt(False, None, message.split(" Including non-PyTorch")[0][:200])
    finally:
        model.zero_grad(set_to_none=True)  # the failed step's gradients would stay alive otherwise
        empty_cache(device)
