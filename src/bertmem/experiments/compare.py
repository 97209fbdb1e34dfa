"""One comparison harness: arms fine-tuned side by side on the same frames, per training seed (chapters 5, 8).

An arm is a (RunConfig, DataConfig, TrainConfig): chapter 5's recipe variants and chapter 8's levers are arms.
Every arm of a seed starts from the same classifier head and sees the same examples; each is measured before it
trains (what is measured is the caller's: a step's bytes, a fit check) and trained by the loop the caller
passes, so a chapter that shows its loop runs that loop. Each arm keeps its per-example scores, in test-set
order, so two arms are compared paired by seed and example (`stats.compare_paired`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import torch

from bertmem.core.devices import empty_cache
from bertmem.core.runtime import seed_everything
from bertmem.data.loaders import DataConfig, Loaders, build_loaders
from bertmem.experiments.run import build_model
from bertmem.loop.baseline import TrainResult
from bertmem.loop.combined import train
from bertmem.loop.config import RunConfig, TrainConfig

Arm = tuple[RunConfig, DataConfig, TrainConfig]
# measure(model, tokenizer, loaders) -> what the caller records before training; a `Skip` stops the arm there
Measure = Callable[[torch.nn.Module, Any, Loaders], dict[str, Any]]


class Skip(Exception):
    """Raised by a measurement to leave an arm untrained, with the reason its row shows (e.g. does not fit)."""


@dataclass
class ArmRun:
    """One arm trained with one seed: what was measured first, the training result, or why it did not run."""

    arm: str
    seed: int
    measured: dict[str, Any] = field(default_factory=dict)
    result: TrainResult | None = None
    note: str | None = None
    loaders: Loaders | None = None


def arm_order(arms: Sequence[str], seeds: Sequence[int], alternate: bool = False) -> Iterator[tuple[int, str]]:
    """(seed, arm) in the order the runs happen: every arm once per seed, seed by seed. With `alternate`, odd
    rounds run the arms in reverse (A B C, then C B A), so a slow spell of a shared machine falls on no fixed slot."""
    for index, seed in enumerate(seeds):
        for arm in (arms[::-1] if alternate and index % 2 else arms):
            yield seed, arm


def fit_arm(name: str, arm: Arm, frames, loop: Callable = train, measure: Measure | None = None) -> ArmRun:
    """Seed, model, loaders, the measurement, then `loop` (chapter 5's `train` by default) (chapters 5, 8).

    The seed comes first so every arm of a seed draws the same classifier head, whatever ran before; a run that
    runs out of memory on a GPU is reported in its note, not raised (the point of a memory table).
    """
    run, data, recipe = arm
    seed_everything(recipe.seed)
    model, tokenizer = build_model(run, frames[0].attrs["label_names"], data.max_length)
    loaders = build_loaders(data, tokenizer, frames, seed=recipe.seed)
    done = ArmRun(name, recipe.seed, loaders=loaders)
    try:
        done.measured = measure(model, tokenizer, loaders) if measure else {}
        done.result = loop(model, loaders.train, recipe, loaders.eval, run=run)
    except Skip as reason:
        done.note = str(reason)
    except torch.OutOfMemoryError:
        done.note = "out of memory"
    if done.note == "out of memory":
        del model
        empty_cache(torch.device(run.device or "cpu"))
    return done
