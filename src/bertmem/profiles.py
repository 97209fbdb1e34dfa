"""The book's profiles (GPU, CPU, full), their environment overrides, and the configurations they build (all chapters).

A profile is a set of defaults for one kind of machine. It *builds* the library's configurations
(`profile.data_config()`, `run_config()`, `train_config()`, `plan_request()`, `bench_config()`); the
configurations never import it. The CPU profile is the library's own defaults (`DataConfig()`, `BenchConfig()`)."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Mapping

from bertmem.core.devices import cuda_available
from bertmem.core.runtime import quiet_bitsandbytes_notice, quiet_progress_import
from bertmem.data.loaders import DataConfig, check_subset_sizes, parse_size
from bertmem.experiments.bench import BenchConfig
from bertmem.loop.config import TINY_MODEL, RunConfig, TrainConfig
from bertmem.loop.optim import SMALL_LEARNING_RATE, default_learning_rate
from bertmem.memory.estimate import model_config
from bertmem.memory.planner import PlanRequest

ENV_PREFIX = "BERTMEM_"


@dataclass(frozen=True)
class Profile:
    """Model, data and batch defaults for one kind of machine (chapter 0 introduces it)."""

    name: str
    model_id: str
    dataset: str
    max_length: int
    micro_batch: int  # examples per forward and backward pass
    train_size: int | None  # None = the whole split
    eval_size: int | None
    epochs: int
    learning_rate: float
    device: str
    effective_batch: int = 16  # examples per optimizer step where a chapter accumulates (chapters 2 and 5)
    long_model_id: str | None = None  # an encoder pretrained on long input that chapter 9 fine-tunes; None: none
    # the dataset of the chapters whose point needs texts longer than their token limit (chapters 6 and 9)
    long_dataset: str = "imdb"
    # `bertmem train` keeps a checkpoint at least this often (minutes) unless told otherwise: a Colab runtime is
    # recycled without a signal, so only periodic checkpoints survive it (chapter 5b); None: by steps only
    checkpoint_minutes: float | None = None
    # training batches' lengths rounded up to multiples of this (a GPU meets few shapes: chapter 5); None: each
    # batch padded to its longest example. Off in the CPU profile: not measured there, and a CPU has no kernel
    # set-up per shape to save
    pad_to_multiple_of: int | None = None
    overridden: frozenset[str] = frozenset()  # the fields an environment variable set (BERTMEM_DATASET, …)

    def __post_init__(self) -> None:
        if self.name not in PROFILES:
            raise ValueError(f"profile name must be one of {PROFILES}, got {self.name!r}")
        for field in ("max_length", "micro_batch", "epochs", "effective_batch"):
            if getattr(self, field) < 1:
                raise ValueError(f"{field} must be >= 1, got {getattr(self, field)}; set {ENV_PREFIX}{field.upper()}")
        check_subset_sizes(train_size=self.train_size, eval_size=self.eval_size)
        if not self.learning_rate > 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")

    def describe(self) -> str:
        """The machine-level line a setup cell prints: profile, device, model (all chapters).

        What a chapter reads (dataset, sizes, batch) is its own: `bertmem.book.setup_line` prints it."""
        chosen = f" (set by the environment: {', '.join(sorted(self.overridden))})" if self.overridden else ""
        return f"profile={self.name} device={self.device} model={self.model_id}{chosen}"

    def defaults_line(self) -> str:
        """Every default of the profile on one line: what `bertmem train|bench` start from (chapter 0)."""
        sizes = f"train={self.train_size or 'all'}, eval={self.eval_size or 'all'}"
        return (f"profile={self.name} device={self.device} model={self.model_id} dataset={self.dataset} "
                f"({sizes}) max_length={self.max_length} micro_batch={self.micro_batch} "
                f"effective_batch={self.effective_batch} epochs={self.epochs} "
                f"lr={self.learning_rate:g}"
                + (f" pad_to_multiple_of={self.pad_to_multiple_of}" if self.pad_to_multiple_of else ""))

    def data_config(self, **overrides) -> DataConfig:
        """The profile's data: its dataset, subset sizes, tokens and micro-batch (all chapters)."""
        values = dict(dataset=self.dataset, train_size=self.train_size, eval_size=self.eval_size,
                      max_length=self.max_length, micro_batch=self.micro_batch,
                      pad_to_multiple_of=self.pad_to_multiple_of)
        return DataConfig(**{**values, **overrides})

    def run_config(self, **overrides) -> RunConfig:
        """The profile's model and device; everything else as given."""
        return RunConfig(**{"model_id": self.model_id, "device": self.device, **overrides})

    def train_config(self, **overrides) -> TrainConfig:
        """The profile's recipe for a run of its own: epochs, learning rate, precision 'auto'."""
        values = dict(epochs=self.epochs, learning_rate=self.learning_rate, precision="auto")
        return TrainConfig(**{**values, **overrides})

    def plan_request(self, **overrides) -> PlanRequest:
        """The profile's model, tokens and effective batch (`bertmem plan`'s defaults; chapter 5)."""
        values = dict(model_id=self.model_id, max_length=self.max_length, effective_batch=self.effective_batch)
        return PlanRequest(**{**values, **overrides})

    def bench_config(self, **overrides) -> BenchConfig:
        """The profile's model, data, effective batch, learning rate and device; seeds 0, 1, 2 (`bertmem bench`).

        Twice the profile's test examples (all where it takes all): evaluation is forward-only, and the
        paired interval of "recipe - baseline" narrows with the square root of their number.
        """
        eval_size = None if self.eval_size is None else 2 * self.eval_size
        values = dict(model_id=self.model_id, dataset=self.dataset, train_size=self.train_size,
                      eval_size=eval_size, max_length=self.max_length, effective_batch=self.effective_batch,
                      learning_rate=self.learning_rate, epochs=self.epochs, device=self.device, seeds=(0, 1, 2))
        return BenchConfig(**{**values, **overrides})


# Sized for a Colab T4 (16 GB, fp16): bert-base at 512 tokens on hash-chosen IMDb subsets, so each chapter takes
# at most about 10 minutes there (bertmem.book.chapters estimates it from FLOPs). Chapter 0's fp32 baseline at batch 8
# fits 15 GiB with room to spare (the planner's largest is about twice that; a test checks that 8 fits); the
# chapters that accumulate reach the effective batch 32.
GPU_DEFAULTS = dict(name="gpu", model_id="bert-base-uncased", dataset="imdb", max_length=512, micro_batch=8,
                    train_size=2000, eval_size=1000, epochs=1, device="cuda", effective_batch=32,
                    long_model_id="answerdotai/ModernBERT-base", checkpoint_minutes=15.0, pad_to_multiple_of=64)
# The results table at full size on a large card (BERTMEM_PROFILE=full make bench): all of IMDb, 2 epochs.
FULL_DEFAULTS = dict(GPU_DEFAULTS, name="full", micro_batch=32, train_size=None, eval_size=None, epochs=2)
# The CPU profile is the library's defaults: the data of `DataConfig()`, the model and recipe of `BenchConfig()`.
_DATA, _BENCH = DataConfig(), BenchConfig()
CPU_DEFAULTS = dict(name="cpu", model_id=_BENCH.model_id, dataset=_DATA.dataset, max_length=_DATA.max_length,
                    micro_batch=_DATA.micro_batch, train_size=_DATA.train_size, eval_size=_DATA.eval_size,
                    epochs=_BENCH.epochs, device="cpu",
                    effective_batch=_BENCH.effective_batch)
PROFILES = ("gpu", "cpu", "full")
_DEFAULTS = {"gpu": GPU_DEFAULTS, "cpu": CPU_DEFAULTS, "full": FULL_DEFAULTS}

RENAMED_ENV = {ENV_PREFIX + "BATCH_SIZE": ENV_PREFIX + "MICRO_BATCH"}  # one name per idea (micro_batch)
_CASTS = {"max_length": int, "micro_batch": int, "epochs": int, "learning_rate": float, "effective_batch": int,
          "model_id": str, "dataset": str, "device": str, "long_model_id": str, "long_dataset": str,
          "checkpoint_minutes": lambda raw: None if raw.strip().lower() == "none" else float(raw),
          "pad_to_multiple_of": lambda raw: None if raw.strip().lower() == "none" else int(raw)}


def learning_rate_for(model_id: str) -> float:
    """The default peak learning rate of this model, from its size (`default_learning_rate`; the profiles, `bertmem
    train` and `bench` when no rate is given; chapter 0)."""
    if model_id == TINY_MODEL:  # the test model: 2 small layers
        return SMALL_LEARNING_RATE
    try:
        hidden_size = model_config(model_id).hidden_size
    except OSError:  # not found offline, a typo, a folder without config.json
        raise ValueError(f"cannot read {model_id}'s configuration to choose its learning rate: check the model's "
                         "name (and the network), or give a rate (--learning-rate, BERTMEM_LEARNING_RATE)") from None
    return default_learning_rate(hidden_size)


def get_profile(name: str | None = None, env: Mapping[str, str] | None = None) -> Profile:
    """The GPU profile when CUDA is present, else the CPU one (or BERTMEM_PROFILE); BERTMEM_* override fields."""
    env = os.environ if env is None else env
    quiet_progress_import()  # before transformers imports tqdm.auto and warns with this machine's paths
    quiet_bitsandbytes_notice()  # transformers and peft import bitsandbytes when it is installed
    name = (name or env.get(ENV_PREFIX + "PROFILE") or ("gpu" if cuda_available() else "cpu")).lower()
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}: use one of {PROFILES} (or unset {ENV_PREFIX}PROFILE)")
    values = dict(_DEFAULTS[name])
    for old, new in RENAMED_ENV.items():
        if old in env:
            raise ValueError(f"{old} is now {new}: rename it in your environment")
    overridden = set()
    for field in dataclasses.fields(Profile):
        raw = env.get(ENV_PREFIX + field.name.upper())
        if raw is None or field.name in ("name", "overridden"):
            continue
        overridden.add(field.name)
        try:
            sized = field.name in ("train_size", "eval_size")
            values[field.name] = parse_size(raw) if sized else _CASTS[field.name](raw)
        except ValueError as err:
            raise ValueError(f"{ENV_PREFIX}{field.name.upper()}={raw!r} is not a valid {field.name}: {err}") from None
    if "learning_rate" not in overridden:  # the model's own, whichever model the profile reads
        values["learning_rate"] = learning_rate_for(values["model_id"])
    return Profile(**values, overridden=frozenset(overridden))
