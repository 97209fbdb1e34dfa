"""Plan a run for a card before it starts: the largest micro-batch that fits this data's longest batch, the
accumulation for the effective batch, the estimated peak and time per epoch (`bertmem train --micro-batch auto
--memory t4`, chapter A1).

`bertmem plan` answers for a length chosen by hand; a run knows its data, so it plans for the longest batch it
will meet (dynamic padding never makes a batch longer than its longest example). The plan is printed before
the first step; a plan that does not fit is refused with the lever that would make it fit."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from bertmem.core.devices import cuda_free_bytes, device_name, on_cuda
from bertmem.core.units import GIB
from bertmem.data.loaders import DataConfig
from bertmem.loop.config import RunConfig, TrainConfig
from bertmem.loop.precision import choose_precision
from bertmem.memory.cards import Card, card_for, card_named, card_precision, parse_memory, with_article
from bertmem.memory.estimate import model_work
from bertmem.memory.planner import Plan, PlanRequest, plan_micro_batch
from bertmem.memory.speed import EpochEstimate, epoch_estimate
from bertmem.model.adapters import LORA_RANK

BOOK_EFFECTIVE_BATCH = 32  # the blog post's and the GPU profile's examples per optimizer step


@dataclass(frozen=True)
class FitRequest:
    """Which card a run plans for and its effective batch: with `--micro-batch auto` the micro-batch follows
    (chapter A1). Flags shared with `bertmem plan`: --memory, --effective-batch."""

    memory: str | None = field(default=None, metadata={
        "help": "the card or memory to plan for (t4, l4, a100, …, 15GiB): the micro-batch must fit it "
                "(default: the GPU in use; none on a CPU)"})
    effective_batch: int | None = field(default=None, metadata={
        "help": f"examples per optimizer step with --micro-batch auto: the accumulation follows (default "
                f"{BOOK_EFFECTIVE_BATCH})"})
    plan_micro_batch: bool = False  # --micro-batch auto: the planner chooses it

    def __post_init__(self) -> None:
        if self.memory is not None:
            parse_memory(self.memory)  # a bad size fails here, with the sizes and cards it accepts
        if self.effective_batch is not None and self.effective_batch < 1:
            raise ValueError(f"effective_batch must be >= 1, got {self.effective_batch}")


@dataclass(frozen=True)
class RunPlan:
    """What a run was planned as: micro-batch × accumulation, the planner's answer and the time estimate."""

    micro_batch: int
    accumulation_steps: int
    budget: str  # "a Colab T4", or "this CPU: no memory plan"
    plan: Plan | None = None
    epoch: EpochEstimate | None = None
    notes: list[str] = field(default_factory=list)
    card: Card | None = None  # the card the time is estimated for
    precision: str = "fp32"  # the precision the estimates assume

    def lines(self, examples: int, tokens: int, longest: int) -> list[str]:
        """The plan as the run prints it before its first step."""
        head = (f"plan: micro-batch {self.micro_batch} × {self.accumulation_steps} accumulation steps = effective "
                f"batch {self.micro_batch * self.accumulation_steps}")
        if self.plan is not None:
            r = self.plan.request
            head += (f"; estimated peak {self.plan.estimated_peak_bytes / GIB:.2f} of "
                     f"{self.plan.memory_bytes / GIB:.2f} GiB on {self.budget} (longest batch "
                     f"{self.micro_batch} × {longest} tokens, {r['precision']}, {r['attention']} attention; "
                     f"largest that fits: {self.plan.largest_fitting_batch})")
        else:
            head += f" ({self.budget})"
        lines = [head, f"data: {examples} training examples, {tokens / 1e6:.2f} M tokens per epoch (padding "
                       "included)"]
        lines.append(self.epoch.line() if self.epoch is not None else
                     "time: no estimate (name a card, --memory t4, or run on one)")
        return lines + [f"note: {note}" for note in self.notes]


def planned_card(fit: FitRequest, run: RunConfig) -> tuple[int | None, Card | None, str, bool]:
    """(budget in bytes, the card, its words, measured free memory?) for a request; (None, …) on a CPU run with
    no --memory (chapter A1)."""
    if fit.memory is not None:
        budget = parse_memory(fit.memory)
        card = card_named(fit.memory)
        words = with_article(card.name) if card else f"{budget / GIB:.2f} GiB"
        return budget, card, words, False
    if on_cuda(run.device):
        import torch

        name = device_name(torch.device(run.device))
        free = cuda_free_bytes(run.device)
        return free, card_for(name), f"this {name} (its free memory)", True
    return None, None, "this CPU: no memory plan; pass --memory to plan for a card", False


def estimate_precision(config: TrainConfig, run: RunConfig, card: Card | None) -> tuple[str, str | None]:
    """The precision the estimate assumes, and a note where it is not the run's own choice (chapter A1)."""
    if on_cuda(run.device) or config.precision != "auto":
        if config.precision == "auto":
            return choose_precision("auto", "cuda", verbose=False).precision, None
        return config.precision, None
    precision, why = card_precision(card)  # a CPU run planned for a card: what `auto` picks there
    return precision, None if card is not None else f"precision {why}"


def plan_run(fit: FitRequest, run: RunConfig, data: DataConfig, config: TrainConfig, lengths: list[int]) -> RunPlan:
    """The micro-batch and accumulation a run uses, planned for its card and its longest example (chapter A1).

    `lengths`: every training example's tokens as the run reads them (after the cut; per text with windows).
    """
    effective = fit.effective_batch or (data.micro_batch * config.accumulation_steps if not fit.plan_micro_batch
                                        else BOOK_EFFECTIVE_BATCH)
    budget, card, words, measured = planned_card(fit, run)
    notes = []
    if budget is None:
        micro = data.micro_batch
        if fit.plan_micro_batch:
            notes.append(f"--micro-batch auto on a CPU keeps the given micro-batch ({micro})")
        return RunPlan(micro, accumulation_for(effective, micro), words, notes=notes)
    precision, note = estimate_precision(config, run, card)
    notes += [note] if note else []
    if fit.memory is not None and not on_cuda(run.device):
        notes.append("this run is on the CPU: the plan is for the card named, for when the same command runs there")
    longest = int(max(lengths))  # a tokenizer's counts arrive as numpy integers; the estimator takes ints
    request = PlanRequest(model_id=run.model_id, max_length=max(8, longest), precision=precision,
                          memory_bytes=budget, effective_batch=effective, attention=run.attention,
                          gradient_checkpointing=config.gradient_checkpointing, optimizer=config.optimizer,
                          lora_r=config.lora_r, freeze_layers=config.freeze_layers,
                          window=data.window, stride=data.stride, kernels="cuda")
    if measured:  # free memory is measured after this process made its CUDA context
        request = dataclasses.replace(request, cuda_context_bytes=0)
    try:
        plan = plan_micro_batch(request)
    except ValueError as err:
        raise ValueError(f"{err}; {fit_levers(request)}") from None
    notes += plan.notes + [f"memory plan estimated from {plan.estimated_from}"]
    if fit.plan_micro_batch:
        micro, accumulation = plan.micro_batch, plan.accumulation_steps
    else:
        micro = data.micro_batch
        accumulation = accumulation_for(effective, micro)
        if micro > plan.largest_fitting_batch:
            message = (f"micro-batch {micro} does not fit {words}: the largest that fits this data's longest batch "
                       f"({longest} tokens) is {plan.largest_fitting_batch} (estimated); pass --micro-batch auto, "
                       f"or --micro-batch {plan.micro_batch} --accumulation-steps {plan.accumulation_steps}")
            if fit.memory is not None:
                raise ValueError(message)
            notes.append(message + " — running anyway: the estimate is not a measurement")
    return RunPlan(micro, accumulation, words, plan, None, notes, card, precision)


def with_epoch_estimate(plan: RunPlan, run: RunConfig, config: TrainConfig, examples: int,
                        padded_tokens: int) -> RunPlan:
    """The plan with its estimated time per epoch on its card, from the epoch's tokens with padding (A1)."""
    if plan.card is None:
        return plan
    work = model_work(run.model_id, config.lora_r, config.freeze_layers)  # LoRA's and frozen layers' own count
    epoch = epoch_estimate(work, examples, padded_tokens / examples, plan.micro_batch, plan.card, plan.precision,
                           config.gradient_checkpointing)
    return dataclasses.replace(plan, epoch=epoch)


def accumulation_for(effective: int, micro: int) -> int:
    """The accumulation steps that make `effective` from `micro` exactly; otherwise an error with the nearest
    effective batches that divide (chapter 2: uneven windows are exact with weights, but the loop counts
    micro-batches)."""
    if effective % micro == 0:
        return effective // micro
    if micro > effective:
        raise ValueError(f"the micro-batch {micro} is larger than --effective-batch {effective}: use a micro-batch "
                         f"that divides it (--micro-batch {effective}), or a larger --effective-batch")
    lower, upper = micro * (effective // micro), micro * math.ceil(effective / micro)
    raise ValueError(f"--effective-batch {effective} is not a multiple of the micro-batch {micro}: use "
                     f"{lower} or {upper}, or another --micro-batch")


def fit_levers(request: PlanRequest) -> str:
    """Which single lever makes one example fit, tried in the book's order of cost (chapter A1)."""
    tries = [("--gradient-checkpointing", dict(gradient_checkpointing=True)),
             ("--optimizer adamw8bit", dict(optimizer="adamw8bit")),
             (f"--lora-r {LORA_RANK}", dict(lora_r=LORA_RANK)),
             (f"--max-length {request.max_length // 2}", dict(max_length=max(8, request.max_length // 2)))]
    for flag, change in tries:
        if all(getattr(request, k) == v for k, v in change.items()):
            continue
        try:
            plan_micro_batch(dataclasses.replace(request, **change))
        except ValueError:
            continue
        return f"with {flag} it fits (estimated)"
    return "no single lever makes it fit here: combine them, or plan for a card with more memory"


def plan_summary(plan: RunPlan) -> dict[str, Any]:
    """The plan as metrics.json keeps it (chapter A1)."""
    out: dict[str, Any] = {"micro_batch": plan.micro_batch, "accumulation_steps": plan.accumulation_steps,
                           "budget": plan.budget, "notes": plan.notes}
    if plan.plan is not None:
        out["planner"] = plan.plan.as_dict()
    if plan.epoch is not None:
        out["epoch_estimate"] = dataclasses.asdict(plan.epoch)
    return out


# A run padded to multiples of this many tokens meets at most max_length / it lengths: 8 up to 512 with 64.
FEW_LENGTHS = 8


def bucket_for(max_length: int) -> int:
    """The `--pad-to-multiple-of` that meets at most `FEW_LENGTHS` lengths up to `max_length` (a multiple of 8)."""
    return 8 * math.ceil(max_length / FEW_LENGTHS / 8)


def attention_kernel_rule(cudnn_first: bool, distinct_lengths: int) -> tuple[bool, str]:
    """Keep cuDNN's attention among SDPA's choices, or switch it off, and the line that says why (chapter 5, A3).

    The rule: where SDPA would run cuDNN's attention (`cudnn_first`: asked of PyTorch on the card, or
    `core.devices.cudnn_attention_first` for another card), switch it off. Appendix A3 measured it on an H200
    (torch 2.11): 5.2× a seen length's step on each new length, and slower on lengths already seen as well; no
    measurement says buckets make it worth keeping. Elsewhere there is nothing to decide."""
    if not cudnn_first:
        return True, "attention kernels: PyTorch's choice (it would not run cuDNN's attention here)"
    return False, (f"attention kernels: cuDNN's attention off (PyTorch would run it first here; appendix A3 "
                   f"measured it slower on new lengths and on seen ones); this run meets {distinct_lengths} padded "
                   "lengths")
