"""The planner's stored lines: the estimated step peaks the "Will it fit?" page holds, kept in the package so that
`bertmem plan` answers from the same exact lines in a blink, and estimates afresh only what they do not cover
(chapter 5, the "Will it fit?" page).

For one configuration the live bytes after each event of the estimated step are `fixed + b · per example` in the
micro-batch b, exactly (`bertmem.book.fit_page` makes them from two estimates, and keeps a third for micro-batch 1
where one example is off the lines: ModernBERT's eager attention); the step peak at any b up to the
stored search limit is the highest of the kept lines, plus the optimizer's state, or the optimizer's own step on
top of the end of backward. A LoRA rank or a number of frozen layers is a member of a family stored as segments
(a first member and a whole step per member) and members stored as estimated (`expand`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib.metadata import version
from importlib.resources import files
from pathlib import Path
from typing import Any, Callable

from bertmem.memory.speed import ModelWork
from bertmem.memory.timeline import PHASES
from bertmem.model.known import known_model
from bertmem.model.matmuls import MatmulShape

LINES_FILE = "fit-lines.json"  # in bertmem/recorded: written by scripts/make_fit_page.py with the page's data


def estimator_versions() -> dict[str, str]:
    """The torch and transformers an estimate made here runs on: what the stored lines record and are compared
    with."""
    return {"torch": version("torch").split("+")[0], "transformers": version("transformers")}


def versions_text(versions: dict[str, str]) -> str:
    """'torch 2.13.0, transformers 5.25.0'."""
    return f"torch {versions['torch']}, transformers {versions['transformers']}"


def lines_key(model_id: str, length: int, precision: str, attention: str, checkpointing: bool,
              adaptation: str) -> str:
    """How the stored lines name a configuration: 'FacebookAI/roberta-base|512|bf16|sdpa|1|lora'."""
    return "|".join((model_id, str(length), precision, attention, str(int(checkpointing)), adaptation))


class NotAffine(ValueError):
    """Two members of a family differ in shape, or not by a whole step per member."""


def zip_numbers(first, second, combine):
    """`combine` applied to the numbers at the same place in two entries of the same shape."""
    if isinstance(first, dict):
        if first.keys() != second.keys():
            raise NotAffine("different parts")
        return {key: zip_numbers(first[key], second[key], combine) for key in first}
    if isinstance(first, list):
        if len(first) != len(second):
            raise NotAffine("different numbers of lines")
        return [zip_numbers(a, b, combine) for a, b in zip(first, second)]
    return combine(first, second)


def expand(family: dict[str, Any], value: int) -> Any:
    """One member of a stored family: the estimate itself where stored, else its segment's first member plus one
    step per member (the page's script does the same)."""
    if str(value) in family["direct"]:
        return family["direct"][str(value)]
    segment = next((s for s in family["segments"] if s["low"] <= value <= s["high"]), None)
    if segment is None:
        raise KeyError(f"the family holds no member {value}")
    return zip_numbers(segment["base"], segment["step"], lambda x, s: x + (value - segment["low"]) * s)


WORK_FIELDS = ("per_token", "per_example", "per_token_trained", "per_example_trained", "frozen_below",
               "frozen_below_per_token")  # a member's row; the stored work names them (its "fields")


def work_row(work: ModelWork) -> list[int] | None:
    """A member's matmul shape as the stored lines and the page keep it (`WORK_FIELDS`), or None where the count
    does not cover the model (the fallback 6 · non-embedding parameters · tokens then, from the model's
    `non_embedding`)."""
    return None if work.shape is None else [getattr(work.shape, name) for name in WORK_FIELDS]


def stored_work(work: dict[str, Any], model_id: str, kind: str, member: int) -> ModelWork:
    """What a training example costs one member of a model's families, read off the stored work (its "fields"
    name each row's numbers; the page's script reads it the same way): its matmul shape, or where the count does
    not cover the model (a None row) the fallback 6 · non-embedding parameters · tokens, with the model's
    `non_embedding` parameters (all `parameters` less the embeddings module's)."""
    entry = work["models"][model_id]
    row = entry["full"] if kind == "full" else entry[kind][str(member)]
    shape = None if row is None else MatmulShape(layers=entry["layers"], hidden=entry["hidden"],
                                                 **dict(zip(work["fields"], row)))
    return ModelWork(parameters=entry["parameters"], shape=shape, non_embedding=entry["non_embedding"])


@lru_cache(maxsize=1)
def stored_lines() -> dict[str, Any]:
    """The package's lines: versions, search limit, LoRA ranks, lengths, models (with optimizer facts), peaks,
    and each model's work per example (the time estimate)."""
    return json.loads(files("bertmem").joinpath("recorded", LINES_FILE).read_text(encoding="utf-8"))


@dataclass(frozen=True)
class StoredPeak:
    """One step's peak read off the stored lines, named as `MemoryReport` names an estimate's (the planner's
    search takes either)."""

    step_peak: int
    peak_breakdown: dict[str, int]
    peak_phase: str


def peak_at(entry: dict[str, Any], facts: list[int], batch: int) -> StoredPeak:
    """The tensor peak of one step at micro-batch `batch` from a configuration's lines and its optimizer's
    [state, rise] (the page's peakAt): the highest line, or the optimizer's step on the end of backward."""
    if batch == 1 and "one" in entry:  # estimated on its own where one example is off the lines
        entry = entry["one"]
    value, weights, gradients, phase = max(((fixed + batch * per_example, weights, gradients, phase)
                                            for fixed, per_example, weights, gradients, phase in entry["lines"]),
                                           key=lambda line: line[0])  # max: the first of equal values
    fixed, per_example, end_weights, end_gradients = entry["end"]
    state, rise = facts
    if fixed + batch * per_example + rise > value:
        value, weights, gradients, phase = fixed + batch * per_example + rise, end_weights, end_gradients, 2
    peak = value + state
    return StoredPeak(step_peak=peak, peak_phase=PHASES[phase],
                      peak_breakdown={"weights": weights, "gradients": gradients, "optimizer state": state,
                                      "saved activations": peak - weights - gradients - state, "temporaries": 0})


@dataclass(frozen=True)
class StoredStep:
    """The stored lines of one request: its step peak at any micro-batch up to `max_batch`, the model's attention
    kernels, what a training example costs it, and the versions that made the lines (`bertmem plan`)."""

    peak: Callable[[int], StoredPeak]
    max_batch: int
    attentions: tuple[str, ...]
    work: ModelWork
    versions: dict[str, str]


def _adaptation(request, layers: int, ranks: list[int]) -> tuple[str, int] | str:
    """The page's adaptation and member for a request, or why the lines do not hold it."""
    if request.lora_r is not None and request.freeze_layers:
        return "LoRA with frozen layers"
    if request.lora_r is not None:
        return ("lora", request.lora_r) if request.lora_r in ranks else f"LoRA rank {request.lora_r}"
    if request.freeze_layers:
        return (("freeze", request.freeze_layers) if 0 < request.freeze_layers < layers
                else f"{request.freeze_layers} frozen layers")
    return "full", 0


def stored_step(request) -> StoredStep | str:
    """The stored lines that answer a `PlanRequest` (with the model's first kernel where it lacks the one asked
    for, as the planner runs it), or the reason they do not cover it: the planner estimates afresh then
    (`plan_micro_batch`)."""
    if Path(request.model_id).expanduser().is_dir():
        return "no stored lines for a local model folder"
    known, data = known_model(request.model_id), stored_lines()
    model = next((m for m in data["models"] if known and m["id"] == known.hub_id), None)
    if model is None:
        return f"no stored lines for {request.model_id}"
    optimizer = model["optimizers"].get(request.optimizer)
    uncovered = [what for what, missing in (
        (f"the optimizer {request.optimizer}", optimizer is None),
        (f"{request.max_length} tokens", request.max_length not in model["lengths"]),
        ("windows", request.window is not None), ("this CPU's kernels", request.kernels != "cuda"))
        if missing]
    adaptation = _adaptation(request, model["layers"], data["lora_ranks"])
    uncovered += [adaptation] if isinstance(adaptation, str) else []
    if uncovered:
        return f"no stored lines for {', '.join(uncovered)}"
    kind, member = adaptation
    precision = "fp32" if request.precision == "fp32" else "bf16"  # fp16 and bf16 hold the same bytes
    attention = request.attention if request.attention in model["attentions"] else model["attentions"][0]
    key = lines_key(model["id"], request.max_length, precision, attention, request.gradient_checkpointing, kind)
    if key not in data["peaks"]:  # lines made for fewer lengths than the model takes (make_fit_page --lengths)
        return f"no stored lines for {request.max_length} tokens"
    entry, facts = data["peaks"][key], optimizer[kind]
    if kind != "full":
        entry, facts = expand(entry, member), expand(facts, member)
    return StoredStep(peak=lambda batch: peak_at(entry, facts, batch), max_batch=data["max_batch"],
                      attentions=tuple(model["attentions"]),
                      work=stored_work(data["work"], model["id"], kind, member), versions=data["versions"])


__all__ = ["LINES_FILE", "NotAffine", "StoredPeak", "StoredStep", "WORK_FIELDS", "estimator_versions", "expand",
           "lines_key", "peak_at", "stored_lines", "stored_step", "stored_work", "versions_text", "work_row",
           "zip_numbers"]
