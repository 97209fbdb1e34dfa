"""Runtime profiles (GPU vs CPU defaults), environment overrides and seeding (all chapters)."""

from __future__ import annotations

import dataclasses
import logging
import os
import random
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping

import numpy as np
import torch

MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"
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
        """One line a notebook prints so the reader sees what ran (all chapters)."""
        sizes = f"train={self.train_size or 'all'}, eval={self.eval_size or 'all'}"
        return (f"profile={self.name} device={self.device} model={self.model_id} dataset={self.dataset} "
                f"({sizes}) max_length={self.max_length} micro_batch={self.micro_batch} "
                f"effective_batch={self.effective_batch} epochs={self.epochs} "
                f"lr={self.learning_rate:g}")


# Sized for a Colab T4 (16 GB, fp16): bert-base at 512 tokens on hash-chosen IMDb subsets, so each chapter takes
# at most about 10 minutes there (bertmem.workload estimates it from FLOPs). Chapter 0's fp32 baseline at batch 8
# fits 15 GiB with room to spare (the planner's largest is about twice that; a test checks that 8 fits); the
# chapters that accumulate reach the effective batch 32.
GPU_DEFAULTS = dict(name="gpu", model_id="bert-base-uncased", dataset="imdb", max_length=512, micro_batch=8,
                    train_size=2000, eval_size=1000, epochs=1, learning_rate=2e-5, device="cuda", effective_batch=32,
                    long_model_id="answerdotai/ModernBERT-base")
# The results table at full size on a large card (BERTMEM_PROFILE=full make bench): all of IMDb, 2 epochs.
FULL_DEFAULTS = dict(GPU_DEFAULTS, name="full", micro_batch=32, train_size=None, eval_size=None, epochs=2)
CPU_DEFAULTS = dict(name="cpu", model_id=MINILM_ID, dataset="imdb", max_length=256, micro_batch=8,
                    train_size=1000, eval_size=500, epochs=1, learning_rate=1e-4, device="cpu", effective_batch=16)
PROFILES = ("gpu", "cpu", "full")
_DEFAULTS = {"gpu": GPU_DEFAULTS, "cpu": CPU_DEFAULTS, "full": FULL_DEFAULTS}

RENAMED_ENV = {ENV_PREFIX + "BATCH_SIZE": ENV_PREFIX + "MICRO_BATCH"}  # one name per idea (micro_batch)
_CASTS = {"max_length": int, "micro_batch": int, "epochs": int, "learning_rate": float, "effective_batch": int,
          "model_id": str, "dataset": str, "device": str, "long_model_id": str}


def parse_size(raw: str) -> int | None:
    """A subset size from text (environment, command line): a number of examples, or 'all' (the whole split)."""
    return None if raw.strip().lower() in ("all", "none", "") else int(raw)


def check_subset_sizes(**sizes: int | None) -> None:
    """Each subset size is >= 2 examples or None (the whole split) (profiles, chapter sizes, DataConfig)."""
    for name, value in sizes.items():
        if value is not None and value < 2:
            raise ValueError(f"{name} must be >= 2 or None (the whole split), got {value}")


def get_profile(name: str | None = None, env: Mapping[str, str] | None = None) -> Profile:
    """The GPU profile when CUDA is present, else the CPU one (or BERTMEM_PROFILE); BERTMEM_* override fields."""
    env = os.environ if env is None else env
    quiet_progress_import()  # before transformers imports tqdm.auto and warns with this machine's paths
    quiet_bitsandbytes_notice()  # transformers and peft import bitsandbytes when it is installed
    name = (name or env.get(ENV_PREFIX + "PROFILE") or ("gpu" if torch.cuda.is_available() else "cpu")).lower()
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}: use one of {PROFILES} (or unset {ENV_PREFIX}PROFILE)")
    values = dict(_DEFAULTS[name])
    for old, new in RENAMED_ENV.items():
        if old in env:
            raise ValueError(f"{old} is now {new}: rename it in your environment")
    for field in dataclasses.fields(Profile):
        raw = env.get(ENV_PREFIX + field.name.upper())
        if raw is None or field.name == "name":
            continue
        try:
            sized = field.name in ("train_size", "eval_size")
            values[field.name] = parse_size(raw) if sized else _CASTS[field.name](raw)
        except ValueError as err:
            raise ValueError(f"{ENV_PREFIX}{field.name.upper()}={raw!r} is not a valid {field.name}: {err}") from None
    return Profile(**values)


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and torch; return a torch Generator for data loaders (all chapters)."""
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def quiet_progress_import() -> None:
    """Import tqdm.auto once with its "IProgress not found" warning silenced: text bars are what we want (all)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import tqdm.auto  # noqa: F401  (cached: later imports, e.g. by transformers, do not warn again)


def _no_kernel_notice(record: logging.LogRecord) -> bool:
    """False for bitsandbytes' notice that optional 4-bit CPU kernels (which the book never uses) are missing."""
    return "kernels-community" not in record.getMessage()


COLAB_OUTPUTS = Path("/content/bertmem-runs")  # Colab's file browser shows /content; /tmp is out of sight


def output_folder(name: str, colab_root: Path = COLAB_OUTPUTS) -> Path:
    """Where a chapter writes a run: a folder in Colab's file browser on Colab, a fresh temporary one elsewhere."""
    if "google.colab" in sys.modules:
        folder = colab_root / name
        folder.mkdir(parents=True, exist_ok=True)
        return folder
    import tempfile

    return Path(tempfile.mkdtemp(prefix=f"bertmem-{name}-"))


def quiet_bitsandbytes_notice() -> None:
    """Drop that one notice, whoever imports bitsandbytes (transformers, peft, chapter 8) (all chapters).

    It comes at import or at the first CPU operation, so a filter stays on its logger; other messages pass.
    """
    logger = logging.getLogger("bitsandbytes.backends.cpu.ops")
    if _no_kernel_notice not in logger.filters:
        logger.addFilter(_no_kernel_notice)


def text_bar_in_notebook(bar_class) -> bool:
    """True in a Jupyter kernel where tqdm.auto fell back to a text bar (no ipywidgets): an executed notebook."""
    return "ipykernel" in sys.modules and not bar_class.__module__.startswith("tqdm.notebook")


def progress(iterable: Iterable, desc: str, enabled: bool = True, **kwargs):
    """A `tqdm.auto` bar: a live widget in Jupyter with ipywidgets, a text bar in a terminal (all chapters).

    In a kernel without ipywidgets (how the book's notebooks are executed) every redraw would stay in the saved
    output as one more line, so the bar there shows only its final line. Given an iterable it returns a
    generator over it (see `counted`); given None, the bar itself, to update by hand.
    """
    quiet_progress_import()
    from tqdm.auto import tqdm

    kwargs.setdefault("mininterval", 5.0)  # a terminal redraws at most every 5 s
    if iterable is not None:
        kwargs.setdefault("total", len(iterable) if hasattr(iterable, "__len__") else None)
    if not text_bar_in_notebook(tqdm):
        bar = tqdm(None, desc=desc, disable=not enabled, **kwargs)
    else:
        class FinalLineBar(tqdm):  # never drawn while running (delay), drawn once when the loop ends
            def close(self):
                stays = self.leave or (self.leave is None and self.pos == 0)
                if not self.disable and stays:
                    self.last_print_t = self.start_t + self.delay  # as if shown: close() prints the final line
                super().close()

        bar = FinalLineBar(None, desc=desc, disable=not enabled, delay=float("inf"), **kwargs)
    return bar if iterable is None else counted(iterable, bar)


def counted(iterable: Iterable, bar):
    """Yield the items, counting each on the bar; close it at the end (all chapters).

    The bar never touches the iterable itself: tqdm.auto's bar (tqdm_asyncio) calls iter() on it when made,
    so a DataLoader would start one iterator more, thrown away, that draws a seed from its generator or
    torch's global one (and starts its workers): a run with a bar would see another shuffle order or other
    dropout masks than one without. Call `close()` after a `break` to print the final line at once.
    """
    try:
        for item in iterable:
            yield item
            bar.update(1)
    finally:
        bar.close()
