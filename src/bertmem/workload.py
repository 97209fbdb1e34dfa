"""What each chapter trains, and about how long that takes on a GPU, from a FLOP count (setup cells, intro).

Each chapter that fine-tunes takes its data and recipe from `chapter_settings`; `chapter_minutes` counts its runs:
training costs 6 · parameters · tokens FLOPs and evaluation 2 · parameters · tokens (Kaplan et al., 2020). Training
runs at the throughput a BERT-class fine-tune was measured to reach on the card in the precision used (published
measurements, where there are any; else an assumed share of the datasheet peak); evaluation runs in fp32, as
`evaluate` does. Each chapter also pays for its CPU-side work (imports, estimates, demonstrations, tokenizing: the
GPU profile's dry run, measured) and for loading bert-base once per fine-tune. Tokens are counted at the full
`max_length` (every review padded to the limit). The first run on a fresh runtime adds the install and the
downloads (`FIRST_RUN_MINUTES`). It is an estimate, never a measurement: the pages say so.
"""

from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from typing import NamedTuple

import torch

from .loaders import DataConfig
from .profile import Profile
from .train import TrainConfig

# Assumed share of the datasheet peak that a BERT fine-tune reaches (kernels, data loading, optimizer, Python);
# each card carries its own value, this is the one the book assumes for all three until a GPU run measures them.
UTILISATION = 0.3
# Loading bert-base (440 MB of weights) from the local cache and moving it to the GPU, once per fine-tune; an
# assumption (the CPU-side work below is measured with MiniLM, which loads in about a second).
MODEL_LOAD_SECONDS = 10.0
# A fresh Colab runtime, once: the install cell (pip adds bertmem and bitsandbytes) and the downloads (bert-base,
# 440 MB; an IMDb or rotten_tomatoes split, under 100 MB). An assumption, stated apart from the chapters' minutes.
FIRST_RUN_MINUTES = 2.0


@dataclass(frozen=True)
class Card:
    """A GPU's memory and dense datasheet peaks in TFLOP/s per precision (no sparsity, no TF32) (setup cells)."""

    name: str
    memory_gib: float
    peak_tflops: dict[str, float]
    source: str
    utilisation: float = UTILISATION  # the assumed share of the peak reached (an assumption, stated on the page)
    # TFLOP/s a BERT-class fine-tune was measured to reach on this card, by precision, and where it was published
    measured_tflops: dict[str, float] = field(default_factory=dict)
    measured_source: str = ""

    def __post_init__(self) -> None:
        if "fp32" not in self.peak_tflops or min(self.peak_tflops.values()) <= 0:
            raise ValueError(f"{self.name}: peak_tflops needs a positive 'fp32' entry, got {self.peak_tflops}")
        if not 0 < self.utilisation <= 1:
            raise ValueError(f"{self.name}: utilisation must be in (0, 1], got {self.utilisation}")

    def low_precision(self) -> str:
        """The precision `auto` picks on this card: bf16 where it has bf16 tensor cores, else fp16."""
        return "bf16" if "bf16" in self.peak_tflops else "fp16"

    def training_tflops(self, precision: str) -> float:
        """What a BERT fine-tune reaches: the published measurement, else the datasheet peak × utilisation."""
        precision = self.low_precision() if precision == "auto" else precision
        if precision in self.measured_tflops:
            return self.measured_tflops[precision]
        return self.tflops(precision) * self.utilisation

    def tflops(self, precision: str) -> float:
        """The dense peak for a precision ('auto' = this card's 16-bit format)."""
        precision = self.low_precision() if precision == "auto" else precision
        if precision not in self.peak_tflops:
            raise ValueError(f"{self.name} has no {precision} peak; choose one of {sorted(self.peak_tflops)}")
        return self.peak_tflops[precision]


CARDS = {  # NVIDIA datasheets (references.bib: nvidia2018t4, nvidia2023l4, nvidia2020a100)
    # T4, measured: fp16, 0.30 s per batch of 32 × 128 tokens for ModernBERT-base (149 M parameters) = 6·P·T/t =
    # 12.2 TFLOP/s (earino2026t4); fp32, 54.8 sequences of 128 tokens per second for bert-base (110 M) at batch 8,
    # forward and backward = 4.6 TFLOP/s (liu2022gact's speed results).
    "T4": Card("Colab T4", 16, {"fp32": 8.1, "fp16": 65.0}, "nvidia2018t4",
               measured_tflops={"fp16": 12.2, "fp32": 4.6}, measured_source="earino2026t4,liu2022gact"),
    "L4": Card("L4", 24, {"fp32": 30.3, "fp16": 121.0, "bf16": 121.0}, "nvidia2023l4"),
    "A100": Card("A100 40GB", 40, {"fp32": 19.5, "fp16": 312.0, "bf16": 312.0}, "nvidia2020a100"),
}


def matmul_tflops(dtype: torch.dtype = torch.bfloat16, device: str = "cpu", n: int | None = None,
                  repeats: int = 3) -> float:
    """Measured dense matmul throughput in TFLOP/s: the denominator of model-FLOPs utilisation (chapter 5)."""
    n = n or (8192 if device.startswith("cuda") else 1024)
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    a @ b  # warm-up
    best = float("inf")
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        start = time.perf_counter()
        a @ b
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - start)
    return 2 * n**3 / best / 1e12


def model_flops_utilisation(num_params: int, tokens: int, seconds: float, peak_tflops: float) -> float:
    """6 · parameters · tokens / time, as a share of the peak (Kaplan et al.'s training FLOPs) (chapter 5)."""
    if seconds <= 0 or peak_tflops <= 0:
        raise ValueError(f"seconds and peak_tflops must be > 0, got {seconds} and {peak_tflops}")
    return 6 * num_params * tokens / seconds / (peak_tflops * 1e12)


def card_for(gpu_name: str | None) -> Card | None:
    """The card a CUDA device name names as a whole word ('Tesla T4', 'NVIDIA L4'; not 'L40S'), else None."""
    import re

    for key, card in CARDS.items():
        if gpu_name and re.search(rf"\b{key}\b", gpu_name, flags=re.IGNORECASE):
            return card
    return None


class ChapterSettings(NamedTuple):
    """A chapter's data, recipe and training seeds under a profile: what its fine-tunes start from (ch. 3-6, 8, 9)."""

    data: DataConfig
    recipe: TrainConfig
    seeds: tuple[int, ...]  # training seeds: one run (or bench round) per seed


# Per chapter and profile: DataConfig and TrainConfig fields and the training seeds; a field not given is the
# profile's (precision: fp32; seeds: (0,)). Chapter 5's micro_batch is its bench's effective batch, which the
# accumulating variants split. The CPU sizes keep each chapter to minutes on 2 cores, the GPU sizes keep each
# chapter within 10 minutes on a T4 (tests/test_workload.py checks the arithmetic).
_SIZES = {
    "cpu": {"03": dict(train_size=400, eval_size=300, max_length=128),
            "04": dict(dataset="rotten_tomatoes", train_size=600, eval_size=400, seeds=(0, 1, 2)),
            # 48 optimizer steps at 2e-4 with warmup on one-sentence reviews (chapter 8's set, 64 tokens): every
            # seed learns (IMDb at 128 tokens took twice as long, and one seed of the full recipe fell to 0.67)
            "05": dict(dataset="rotten_tomatoes", train_size=768, eval_size=500, max_length=64, micro_batch=16,
                       seeds=(0, 1), learning_rate=2e-4),
            "06-warmup": dict(dataset="rotten_tomatoes", train_size=320, eval_size=300, max_length=64,
                              precision="auto"),
            "06-truncation": dict(dataset="imdb", train_size=600, eval_size=400, max_length=128, precision="auto"),
            "08": dict(dataset="rotten_tomatoes", train_size=768, eval_size=400, max_length=64, precision="auto",
                       micro_batch=16, seeds=(0, 1, 2)),
            # windows of 64 tokens stand in for BERT's 512; eval_size counts long test reviews (> 64 tokens);
            # fp32: at 64 tokens, MiniLM's nine fine-tunes took longer under bf16 autocast (285 s against 226 s)
            "09": dict(dataset="imdb", train_size=512, eval_size=200, max_length=64, seeds=(0, 1, 2),
                       learning_rate=2e-4)},
    "gpu": {"03": dict(train_size=1000, eval_size=500),
            "04": dict(train_size=800, eval_size=400, precision="auto", seeds=(0, 1, 2)),
            "05": dict(train_size=256, eval_size=160, micro_batch=16, seeds=(0, 1)),  # 16 steps: within 10 min
            "06-warmup": dict(dataset="rotten_tomatoes", train_size=320, eval_size=300, max_length=64,
                              precision="auto"),
            "06-truncation": dict(dataset="imdb", train_size=600, eval_size=400, max_length=128, precision="auto"),
            "08": dict(dataset="rotten_tomatoes", train_size=2000, eval_size=1000, max_length=64, precision="auto",
                       micro_batch=16, seeds=(0, 1, 2)),
            "09": dict(train_size=320, eval_size=160, max_length=512, precision="auto", seeds=(0, 1, 2))},
}
_SIZES["full"] = {**_SIZES["gpu"], "03": {}, "04": dict(precision="auto", seeds=(0, 1, 2)),
                  "05": dict(micro_batch=32, seeds=(0, 1, 2))}


def _capped(value: int | None, limit: int | None) -> int | None:
    """The smaller of a chapter's size and the profile's (None = no limit)."""
    if value is None:
        return limit
    return value if limit is None else min(value, limit)


def chapter_settings(chapter: str, profile: Profile) -> ChapterSettings:
    """A chapter's data, recipe and seeds under a profile (chapters 3-6, 8, 9).

    The profile's sizes cap the chapter's, so BERTMEM_* overrides shrink every chapter; a chapter's own
    micro-batch (one optimizer step's examples) never exceeds the profile's effective batch.
    """
    table = _SIZES[profile.name]
    if chapter not in table and chapter != "00":
        raise ValueError(f"no settings for chapter {chapter!r}: choose '00' or one of {sorted(table)}")
    entry = table.get(chapter, {})
    data = DataConfig.from_profile(
        profile, dataset=entry.get("dataset", profile.dataset),
        train_size=_capped(entry.get("train_size"), profile.train_size),
        eval_size=_capped(entry.get("eval_size"), profile.eval_size),
        max_length=min(entry.get("max_length", profile.max_length), profile.max_length),
        micro_batch=min(entry["micro_batch"], profile.effective_batch) if "micro_batch" in entry
        else profile.micro_batch)
    recipe = TrainConfig(learning_rate=entry.get("learning_rate", profile.learning_rate),
                         precision=entry.get("precision", "fp32"))
    return ChapterSettings(data, recipe, entry.get("seeds", (0,)))


@dataclass(frozen=True)
class Run:
    """One fine-tune of a chapter: its data, precision, epochs, and how many times it runs (seeds, variants)."""

    data: DataConfig
    precision: str = "fp32"
    epochs: int = 1
    repeats: int = 1
    evaluations: int | None = None  # passes over the evaluation set per run; None: one per epoch
    recompute: float = 1.0  # 4/3 with gradient checkpointing (the forward runs twice)


def chapter_runs(profile: Profile) -> dict[str, list[Run]]:
    """The fine-tunes each chapter executes under a profile, as its notebook runs them (intro, setup cells)."""
    settings = {c: chapter_settings(c, profile) for c in ("00", "03", "04", "05", "06-warmup", "06-truncation",
                                                          "08", "09")}
    data = {c: s.data for c, s in settings.items()}
    precision = {c: s.recipe.precision for c, s in settings.items()}
    rounds = {c: len(s.seeds) for c, s in settings.items()}  # the bench runs every variant once per seed
    return {
        "00": [Run(data["00"], epochs=profile.epochs, evaluations=profile.epochs + 1)],  # + before training
        "01": [], "02": [],
        "03": [Run(data["03"], "fp32"), Run(data["03"], "auto")],
        "04": [Run(data["04"], precision["04"], epochs=profile.epochs, repeats=3 * rounds["04"])],  # three α
        "05": [Run(data["05"], "fp32", repeats=2 * rounds["05"]), Run(data["05"], "auto", repeats=2 * rounds["05"]),
               Run(data["05"], "auto", repeats=2 * rounds["05"], recompute=4 / 3)],  # + smallest footprint
        "06": [Run(data["06-warmup"], precision["06-warmup"], epochs=2, repeats=2),
               Run(data["06-truncation"], precision["06-truncation"], repeats=2)],
        "07": [], "A1": [],
        # five levers per seed, and LoRA once more at the full fine-tuning rate (its failure mode)
        "08": [Run(data["08"], precision["08"], repeats=5 * rounds["08"] + 1)],
        # three cuts per seed; then each seed's head model (already loaded) reads the long test reviews in
        # windows (about three windows of 512 per review longer than 512 tokens: three more evaluations each)
        # and a third as many held-out long reviews for its attention scorer (one more)
        "09": [Run(data["09"], precision["09"], repeats=3 * rounds["09"]),
               Run(data["09"], precision["09"], epochs=0, evaluations=4 * rounds["09"])]
        # the long-context encoder: one seed at twice the window (counted with bert-base's parameters)
        + ([Run(dataclasses.replace(data["09"], max_length=2 * data["09"].max_length), precision["09"])]
           if profile.long_model_id else []),
    }


def _dataset_rows(name: str, split_size: int | None, evaluation: bool = False) -> int:
    """Rows a run sees: the subset size, or the whole split (training, or the split evaluation uses)."""
    whole = {"imdb": (25_000, 25_000), "rotten_tomatoes": (8_530, 1_066), "sst2": (67_349, 872)}
    return split_size if split_size is not None else whole.get(name, (25_000, 25_000))[evaluation]


def run_seconds(run: Run, num_params: int, card: Card, utilisation: float | None = None) -> float:
    """FLOPs of one Run (training 6PT at its precision, evaluation 2PT in fp32, all repeats) over the card's rate.

    `utilisation` replaces the card's measured or assumed rates by that share of the datasheet peaks.
    """
    precision = run.precision
    def rate(p: str) -> float:
        return 1e12 * (card.training_tflops(p) if utilisation is None else card.tflops(p) * utilisation)

    evaluations = run.epochs if run.evaluations is None else run.evaluations  # train() evaluates every epoch
    data = run.data
    train_tokens = _dataset_rows(data.dataset, data.train_size) * data.max_length * run.epochs
    eval_tokens = (_dataset_rows(data.dataset, data.eval_size, evaluation=True) * data.max_length
                   * evaluations)
    train_seconds = 6 * num_params * train_tokens * run.recompute / rate(precision)
    eval_seconds = 2 * num_params * eval_tokens / rate("fp32")  # evaluate() runs without autocast
    return run.repeats * (train_seconds + eval_seconds + MODEL_LOAD_SECONDS)


def cpu_work_minutes() -> dict[str, float]:
    """Each chapter's CPU-side minutes: its GPU-profile dry run (tiny sizes, MiniLM), as recorded (intro, setup)."""
    from importlib.resources import files

    recorded = json.loads(files("bertmem").joinpath("recorded", "cpu-work.json").read_text(encoding="utf-8"))
    return {chapter: seconds / 60 for chapter, seconds in recorded["seconds"].items()}


def chapter_minutes(profile: Profile, num_params: int, card: Card, utilisation: float | None = None
                    ) -> dict[str, float]:
    """Estimated minutes per chapter: its fine-tunes (FLOPs and a model load each), its CPU-side work and one
    more model load for its own setup and measurements (intro, setup cells)."""
    cpu = cpu_work_minutes()
    return {chapter: cpu.get(chapter, 1.0) + MODEL_LOAD_SECONDS / 60
            + sum(run_seconds(r, num_params, card, utilisation) for r in runs) / 60
            for chapter, runs in chapter_runs(profile).items()}


def setup_line(chapter: str, profile: Profile, gpu_name: str | None = None) -> str:
    """The setup cell's sentence: this chapter's estimated minutes on this GPU (a T4 without one)."""
    from .devices import device_capability, device_name
    from .estimate import parameter_count
    from .profile import get_profile

    if gpu_name is None and profile.device.startswith("cuda") and device_capability(profile.device) is not None:
        gpu_name = device_name(torch.device(profile.device))  # CUDA-only calls live in bertmem.devices
    card = card_for(gpu_name)
    if card is None:  # no GPU, or one without a datasheet entry here: the reference card
        where = f"a {CARDS['T4'].name}" + (f" (no datasheet entry for {gpu_name})" if gpu_name else "")
        card = CARDS["T4"]
    else:
        where = gpu_name
    if profile.name == "cpu":  # CPU-profile sizes say nothing about a GPU: estimate the GPU profile's defaults
        profile = get_profile("gpu", env={})
    minutes = chapter_minutes(profile, parameter_count(profile.model_id), card)[chapter]
    basis = ("a BERT fine-tune's published throughput on it" if card.measured_tflops
             else f"{card.utilisation:.0%} of the datasheet peak")
    return (f"this chapter, {profile.name} profile: about {minutes:.0f} min on {where} (estimated from a FLOP count "
            f"at {basis}, plus this chapter's CPU-side work and model loads; a fresh runtime adds about "
            f"{FIRST_RUN_MINUTES:.0f} min once for the install and downloads)")
