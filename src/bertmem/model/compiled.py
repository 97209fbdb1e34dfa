"""`torch.compile` for a run, with its compilations counted (chapter 5, `bertmem train --compile`).

Every new input shape may cost a compilation: PyTorch's default compiles the first shape, recompiles once with
the sequence length made dynamic, and then holds; `reduce-overhead` also records a CUDA graph per shape, so it
is only offered with length buckets (`--pad-to-multiple-of`), which bound the shapes a run meets."""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

COMPILE_MODES = ("off", "default", "reduce-overhead")


@dataclass(frozen=True)
class Compilations:
    """What `torch.compile` compiled during a run: frames compiled, how many were recompilations, and why."""

    compiled: int
    recompilations: int
    reasons: tuple[str, ...] = ()
    complete: bool = True  # False: PyTorch kept fewer records than compilations (the counts are lower bounds)

    def line(self, mode: str) -> str:
        """'torch.compile (default): 2 frames compiled, 1 of them a recompilation (…)' for the run's summary."""
        at_least = "" if self.complete else "at least "
        recompiled = "a recompilation" if self.recompilations == 1 else "recompilations"
        why = f" (the first: {self.reasons[0]})" if self.reasons else ""
        return (f"torch.compile ({mode}): {at_least}{self.compiled} frame{'s' * (self.compiled != 1)} compiled, "
                f"{at_least}{self.recompilations} of them {recompiled}{why}")


def check_compile_mode(mode: str, pad_to_multiple_of: int | None) -> None:
    """Refuse a mode the run cannot use, with the flag that fixes it (chapter 5)."""
    if mode not in COMPILE_MODES:
        raise ValueError(f"--compile must be one of {', '.join(COMPILE_MODES)}, got {mode!r}")
    if mode == "reduce-overhead" and not pad_to_multiple_of:
        raise ValueError("--compile reduce-overhead records a CUDA graph for every shape a run meets: pass "
                         "--pad-to-multiple-of 64 so it meets few, or use --compile default")


def compile_model(model: torch.nn.Module, mode: str) -> list[object]:
    """Compile `model` in place (its state dict keeps its names); return PyTorch's compilation records so far,
    the mark `compilations_since` counts from (chapter 5)."""
    if mode == "off":
        return []
    before = compilation_records()
    model.compile(mode=None if mode == "default" else mode)
    return before


def compilation_records() -> list[object]:
    """PyTorch's records of the compilations in this process, oldest first (a bounded list)."""
    from torch._dynamo.utils import get_compilation_metrics  # private, and a second to import: here only

    return list(get_compilation_metrics())


def short_reason(reason: str) -> str:
    """A guard failure in one line: "tensor 'x' size mismatch at index 0. expected 2, actual 3" (PyTorch adds
    the frame's number, the source line and a stack trace)."""
    first = re.sub(r"^\d+/\d+:\s*", "", reason.strip().splitlines()[0])
    return " ".join(first.split("  #")[0].split())


def compilations_since(before: list[object]) -> Compilations:
    """The compilations recorded after `before`: a recompilation is one of a frame already compiled."""
    from torch._dynamo.utils import _compilation_metrics  # as above: the bounded list itself, for its limit

    seen = {id(record) for record in before}
    new = [record for record in compilation_records() if id(record) not in seen]
    reasons = tuple(short_reason(r.recompile_reason) for r in new if getattr(r, "recompile_reason", None))
    recompiled = sum(1 for r in new if (getattr(r, "cache_size", 0) or 0) > 0 or
                     getattr(r, "recompile_reason", None))
    # the list drops its oldest records when full: as many new records as it holds may hide more
    complete = _compilation_metrics.maxlen is None or len(new) < _compilation_metrics.maxlen
    return Compilations(len(new), recompiled, reasons, complete)
