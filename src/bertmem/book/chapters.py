"""What each chapter trains, and about how long that takes on a GPU, from a FLOP count (setup cells, intro).

Each chapter that fine-tunes takes its data and recipe from `chapter_settings`; `chapter_minutes` counts its runs:
training costs the matmul FLOPs of each run's model with its own levers (`bertmem.memory.estimate.model_work`:
LoRA's adapters, frozen layers; gradient checkpointing's second forward) and evaluation its forward pass's. Training
runs at the throughput a BERT-class fine-tune was measured to reach on the card in the precision used (published
measurements, where there are any; else an assumed share of the datasheet peak); evaluation runs in fp32, as
`evaluate` does. Each chapter also pays for its CPU-side work (imports, estimates, demonstrations, tokenizing: the
GPU profile's dry run, measured) and for loading bert-base once per fine-tune. Tokens are counted at the full
`max_length` (every review padded to the limit). The first run on a fresh runtime adds the install and the downloads
(`FIRST_RUN_MINUTES`). It is an estimate, never a measurement: the pages say so. Beside it, a setup cell on a CPU
prints the chapter's minutes under the CPU profile as recorded when the book was last executed (recorded/cpu-
profile-minutes.json, written by scripts/sync_chapter_minutes.py)."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import NamedTuple

import torch

from bertmem.core.devices import device_capability, device_name, on_cuda
from bertmem.data.loaders import DataConfig
from bertmem.experiments.bench import CHAIN_OF, BenchConfig, variant_settings
from bertmem.experiments.levers import lever_recipes
from bertmem.loop.config import TrainConfig
from bertmem.memory.cards import CARDS, Card, card_for
from bertmem.memory.estimate import model_config, model_work
from bertmem.memory.speed import ModelWork
from bertmem.profiles import ENV_PREFIX, Profile, get_profile

# Loading bert-base (440 MB of weights) from the local cache and moving it to the GPU, once per fine-tune; an
# assumption (the CPU-side work below is measured with MiniLM, which loads in about a second).
MODEL_LOAD_SECONDS = 10.0
# A fresh Colab runtime, once: the install cell (pip adds bertmem and bitsandbytes) and the downloads (bert-base,
# 440 MB; an IMDb or rotten_tomatoes split, under 100 MB). An assumption, stated apart from the chapters' minutes.
FIRST_RUN_MINUTES = 2.0


class ChapterSettings(NamedTuple):
    """A chapter's data, recipe and training seeds under a profile: what its fine-tunes start from (ch. 3-6, 8, 9)."""

    data: DataConfig
    recipe: TrainConfig
    seeds: tuple[int, ...]  # training seeds: one run (or bench round) per seed


# Per chapter and profile: DataConfig and TrainConfig fields and the training seeds; a field not given is the
# profile's (precision: fp32; seeds: (0,)). Chapter 5's micro_batch is its bench's effective batch, which the
# accumulating variants split. The CPU sizes keep each chapter to minutes on 2 cores, the GPU sizes keep each
# chapter within 10 minutes on a T4 (tests/test_workload.py checks the arithmetic).
# The CPU sizes were cut once to keep CI within 40 minutes on 2 cores: every
# chapter's runs still learn at these sizes (chapter 5's bench needs its 48 optimizer steps; at 24 and 32 steps a
# seed of the full recipe stayed near chance).
_SIZES = {
    "cpu": {"00": dict(train_size=600, eval_size=400),
            "03": dict(train_size=400, eval_size=300, max_length=128),
            "04": dict(dataset="rotten_tomatoes", train_size=400, eval_size=300, seeds=(0, 1, 2)),
            # 48 optimizer steps at 2e-4 with warmup on one-sentence reviews (chapter 8's set, 64 tokens): every
            # seed learns (IMDb at 128 tokens took twice as long, and one seed of the full recipe fell to 0.67)
            "05": dict(dataset="rotten_tomatoes", train_size=768, eval_size=400, max_length=64, micro_batch=16,
                       seeds=(0, 1), learning_rate=2e-4),
            "06-warmup": dict(dataset="rotten_tomatoes", train_size=320, eval_size=300, max_length=64,
                              precision="auto"),
            "06-truncation": dict(train_size=400, eval_size=300, max_length=128, precision="auto"),
            "08": dict(dataset="rotten_tomatoes", train_size=640, eval_size=300, max_length=64, precision="auto",
                       micro_batch=16, seeds=(0, 1, 2)),
            # windows of 64 tokens stand in for BERT's 512; eval_size counts long test reviews (> 64 tokens);
            # fp32: at 64 tokens, MiniLM's nine fine-tunes took longer under bf16 autocast on a CPU without native bf16
            # (285 s against 226 s); with AVX512-BF16 bf16 may be faster: the choice keeps runs comparable across CPUs
            "09": dict(train_size=384, eval_size=160, max_length=64, seeds=(0, 1, 2),
                       learning_rate=2e-4)},
    "gpu": {"03": dict(train_size=1000, eval_size=500),
            "04": dict(train_size=800, eval_size=400, precision="auto", seeds=(0, 1, 2)),
            "05": dict(train_size=256, eval_size=160, micro_batch=16, seeds=(0, 1)),  # 16 steps: within 10 min
            "06-warmup": dict(dataset="rotten_tomatoes", train_size=320, eval_size=300, max_length=64,
                              precision="auto"),
            "06-truncation": dict(train_size=600, eval_size=400, max_length=128, precision="auto"),
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


# Runs whose point needs texts longer than their token limit read the profile's `long_dataset` (BERTMEM_LONG_DATASET),
# whatever BERTMEM_DATASET says: why, as their setup lines print it.
LONG_TEXT_RUNS = {"06-truncation": "truncation matters only for texts longer than its token limit",
                  "09": "windows matter only for texts longer than one window"}


def chapter_dataset(chapter: str, profile: Profile) -> str:
    """The dataset a chapter's run reads: the profile's when the reader chose one (BERTMEM_DATASET, recorded in
    `profile.overridden`; a Profile built by hand chooses with `overridden={"dataset"}`), else the chapter's own
    default; long texts for the runs that need them (chapters 0-9)."""
    if chapter in LONG_TEXT_RUNS:
        return profile.long_dataset
    if "dataset" in profile.overridden:
        return profile.dataset
    return _SIZES[profile.name].get(chapter, {}).get("dataset", profile.dataset)


def chapter_settings(chapter: str, profile: Profile) -> ChapterSettings:
    """A chapter's data, recipe and seeds under a profile (chapters 3-6, 8, 9).

    The profile's sizes cap the chapter's, so BERTMEM_* overrides shrink every chapter, and a dataset the reader
    chose reaches every chapter but the long-text runs (`chapter_dataset`); a chapter's own micro-batch (one
    optimizer step's examples) never exceeds the profile's effective batch.
    """
    table = _SIZES[profile.name]
    if chapter not in table and chapter != "00":
        raise ValueError(f"no settings for chapter {chapter!r}: choose '00' or one of {sorted(table)}")
    entry = table.get(chapter, {})
    data = profile.data_config(
        dataset=chapter_dataset(chapter, profile),
        train_size=_capped(entry.get("train_size"), profile.train_size),
        eval_size=_capped(entry.get("eval_size"), profile.eval_size),
        max_length=min(entry.get("max_length", profile.max_length), profile.max_length),
        micro_batch=min(entry["micro_batch"], profile.effective_batch) if "micro_batch" in entry
        else profile.micro_batch)
    recipe = TrainConfig(learning_rate=entry.get("learning_rate", profile.learning_rate),
                         precision=entry.get("precision", "fp32"))
    return ChapterSettings(data, recipe, entry.get("seeds", (0,)))


def chapter_bench(settings: ChapterSettings, profile: Profile, **overrides) -> BenchConfig:
    """A chapter's bench: its data, seeds, learning rate and epochs, an optimizer step of its micro-batch times
    its accumulation steps; the profile's model and device (chapter 5). `variant_settings` goes back."""
    data, recipe, seeds = settings
    values = dict(model_id=profile.model_id, device=profile.device, dataset=data.dataset,
                  train_size=data.train_size, eval_size=data.eval_size, max_length=data.max_length,
                  data_seed=data.data_seed, effective_batch=data.micro_batch * recipe.accumulation_steps,
                  learning_rate=recipe.learning_rate, epochs=recipe.epochs, seeds=seeds)
    return BenchConfig(**{**values, **overrides})


# The cards the introduction's table of chapter minutes times (a Colab T4 first; all three are in `CARDS`).
MINUTES_CARDS = ("T4", "L4", "A100")


@dataclass(frozen=True)
class Run:
    """One fine-tune of a chapter: its data, precision, epochs, how many times it runs (seeds, variants), and
    what its matmul count depends on: gradient checkpointing, LoRA's rank, frozen layers, another model."""

    data: DataConfig
    precision: str = "fp32"
    epochs: int = 1
    repeats: int = 1
    evaluations: int | None = None  # passes over the evaluation set per run; None: one per epoch
    checkpointing: bool = False  # the forward runs again in backward
    lora_r: int | None = None
    freeze_layers: int = 0
    model_id: str | None = None  # None: the profile's model


def recipe_run(data: DataConfig, recipe: TrainConfig, repeats: int = 1) -> Run:
    """A fine-tune of `recipe` on `data`, as the minutes count it (chapters 5 and 8)."""
    return Run(data, recipe.precision, epochs=recipe.epochs, repeats=repeats,
               checkpointing=recipe.gradient_checkpointing, lora_r=recipe.lora_r, freeze_layers=recipe.freeze_layers)


def bench_runs(bench: BenchConfig) -> list[Run]:
    """Chapter 5's bench as runs: every variant once per seed, in its own precision, checkpointing and levers
    (the planned micro-batch splits the full recipe's work differently; its FLOPs are the same)."""
    return [recipe_run(*variant_settings(bench, CHAIN_OF.get(variant, variant))[1:], repeats=len(bench.seeds))
            for variant in bench.variants]


def lever_runs(settings: ChapterSettings, model_id: str) -> list[Run]:
    """Chapter 8's runs: every lever once per seed, and LoRA once more at the full fine-tuning rate (its failure
    mode)."""
    data, recipe, seeds = settings
    recipes = lever_recipes(recipe, model_config(model_id).num_hidden_layers)
    lora = next(r for r in recipes.values() if r.lora_r)
    return ([recipe_run(data, r, repeats=len(seeds)) for r in recipes.values()]
            + [recipe_run(data, dataclasses.replace(lora, learning_rate=recipe.learning_rate))])


# The settings each chapter's runs read (`chapter_settings` keys); chapters 1, 2 and 7 read a few dozen examples of
# the profile's dataset, A1 the reader's own file.
CHAPTER_RUNS = {"00": ("00",), "03": ("03",), "04": ("04",), "05": ("05",), "06": ("06-warmup", "06-truncation"),
                "08": ("08",), "09": ("09",)}


def chapter_runs(profile: Profile) -> dict[str, list[Run]]:
    """The fine-tunes each chapter executes under a profile, as its notebook runs them (intro, setup cells)."""
    settings = {key: chapter_settings(key, profile) for keys in CHAPTER_RUNS.values() for key in keys}
    data = {c: s.data for c, s in settings.items()}
    precision = {c: s.recipe.precision for c, s in settings.items()}
    rounds = {c: len(s.seeds) for c, s in settings.items()}  # the bench runs every variant once per seed
    return {
        "00": [Run(data["00"], epochs=profile.epochs, evaluations=profile.epochs + 1)],  # + before training
        "01": [], "02": [], "05b": [],  # 05b: a tiny random BERT and a command-line smoke test
        "03": [Run(data["03"], "fp32"), Run(data["03"], "auto")],
        "04": [Run(data["04"], precision["04"], epochs=profile.epochs, repeats=3 * rounds["04"])],  # three α
        "05": bench_runs(chapter_bench(settings["05"], profile)),
        "06": [Run(data["06-warmup"], precision["06-warmup"], epochs=2, repeats=2),
               Run(data["06-truncation"], precision["06-truncation"], repeats=2)],
        # A3 reads a recorded GPU run and times one step; A4 and A5 train nothing
        "07": [], "09b": [], "A3": [], "A4": [], "A5": [],  # 09b: estimates only
        # the demo file's 640 training and 160 held-out rows: one run, then three more for the class weights
        "A1": [Run(DataConfig(dataset="tickets", train_size=640, eval_size=160, max_length=profile.max_length),
                   "auto", repeats=4)],
        "08": lever_runs(settings["08"], profile.model_id),
        # three cuts per seed; then each seed's head model (already loaded) reads the long test reviews in
        # windows (about three windows of 512 per review longer than 512 tokens: three more evaluations each)
        # and a third as many held-out long reviews for its attention scorer (one more)
        "09": [Run(data["09"], precision["09"], repeats=3 * rounds["09"]),
               Run(data["09"], precision["09"], epochs=0, evaluations=4 * rounds["09"])]
        # the long-context encoder: one seed at twice the window
        + ([Run(dataclasses.replace(data["09"], max_length=2 * data["09"].max_length), precision["09"],
                model_id=profile.long_model_id)] if profile.long_model_id else []),
    }


def _dataset_rows(name: str, split_size: int | None, evaluation: bool = False) -> int:
    """Rows a run sees: the subset size, or the whole split (training, or the split evaluation uses)."""
    whole = {"imdb": (25_000, 25_000), "rotten_tomatoes": (8_530, 1_066), "sst2": (67_349, 872)}
    return split_size if split_size is not None else whole.get(name, (25_000, 25_000))[evaluation]


def run_work(run: Run, model_id: str) -> ModelWork:
    """What one training example of a run costs: its model's matmul count (`model_id` unless the run names
    another) with its LoRA adapters or frozen layers (intro, setup cells)."""
    return model_work(run.model_id or model_id, run.lora_r, run.freeze_layers)


def run_seconds(run: Run, work: ModelWork, card: Card, utilisation: float | None = None) -> float:
    """FLOPs of one Run (training's matmul count at its precision, evaluation's forward in fp32, all repeats) over
    the card's rate. `utilisation` replaces the card's measured or assumed rates by that share of the datasheet
    peaks.
    """
    precision = run.precision
    def rate(p: str) -> float:
        return 1e12 * (card.training_tflops(p) if utilisation is None else card.tflops(p) * utilisation)

    evaluations = run.epochs if run.evaluations is None else run.evaluations  # train() evaluates every epoch
    data = run.data
    train_examples = _dataset_rows(data.dataset, data.train_size) * run.epochs
    eval_examples = _dataset_rows(data.dataset, data.eval_size, evaluation=True) * evaluations
    train_seconds = train_examples * work.example_flops(data.max_length, run.checkpointing) / rate(precision)
    eval_seconds = eval_examples * work.example_forward_flops(data.max_length) / rate("fp32")  # no autocast
    return run.repeats * (train_seconds + eval_seconds + MODEL_LOAD_SECONDS)


def cpu_work_minutes() -> dict[str, float]:
    """Each chapter's CPU-side minutes: its GPU-profile dry run (tiny sizes, MiniLM), as recorded (intro, setup)."""
    from importlib.resources import files

    recorded = json.loads(files("bertmem").joinpath("recorded", "cpu-work.json").read_text(encoding="utf-8"))
    return {chapter: seconds / 60 for chapter, seconds in recorded["seconds"].items()}


def chapter_minutes(profile: Profile, card: Card, utilisation: float | None = None) -> dict[str, float]:
    """Estimated minutes per chapter: its fine-tunes (FLOPs of each run's own model and levers, and a model load
    each), its CPU-side work and one more model load for its own setup and measurements (intro, setup cells)."""
    cpu = cpu_work_minutes()
    return {chapter: cpu.get(chapter, 1.0) + MODEL_LOAD_SECONDS / 60
            + sum(run_seconds(r, run_work(r, profile.model_id), card, utilisation) for r in runs) / 60
            for chapter, runs in chapter_runs(profile).items()}


def data_line(chapter: str, profile: Profile) -> str:
    """What this chapter reads under this profile: dataset, sizes, tokens, micro-batch (setup cells)."""
    if chapter == "A1":
        return "data: your own file (MY_FILE), or a generated demo file of 800 support tickets in 12 classes"
    if chapter == "A3":
        return "data: a recorded GPU run; one step on random token ids at the end"
    if chapter == "A4":
        return "data: files this page writes (800 generated support tickets, a corpus of small messy files)"
    if chapter == "09b":
        return "data: none (estimates for a CUDA device: no model trained, no weights, nothing allocated)"
    if chapter == "A5":
        return "data: published GPU memory readings (estimates only: no model trained, nothing allocated)"
    if chapter == "05b":
        return (f"data: random token ids for a tiny BERT; the command line's smoke test reads 64 + 32 "
                f"{profile.dataset} examples")
    if chapter not in CHAPTER_RUNS:
        return f"data: a few dozen {profile.dataset} examples at up to {profile.max_length} tokens"
    parts = []
    for key in CHAPTER_RUNS[chapter]:
        data = chapter_settings(key, profile).data
        sizes = f"{data.train_size or 'all'} train / {data.eval_size or 'all'} test examples"
        batch = "effective batch" if key == "05" else "micro-batch"  # chapter 5's variants split it
        part = f"{data.dataset}, {sizes}, {data.max_length} tokens, {batch} {data.micro_batch}"
        if key in LONG_TEXT_RUNS:
            part += f" (long texts: {LONG_TEXT_RUNS[key]}; {ENV_PREFIX}LONG_DATASET chooses them)"
        parts.append(part)
    return "data: " + "; ".join(parts)


def estimate_phrase(chapter: str, profile: Profile, card: Card) -> str:
    """'about 4 min, estimated from …': a chapter's minutes on a card under a profile (setup cells)."""
    minutes = chapter_minutes(profile, card)[chapter]
    basis = ("a BERT fine-tune's published throughput on it" if card.measured_tflops
             else f"{card.utilisation:.0%} of the datasheet peak")
    length = f"about {minutes:.0f} min" if minutes >= 0.5 else "under a minute"
    return f"{length}, estimated from a FLOP count at {basis}, plus this chapter's CPU-side work and model loads"


def cpu_profile_minutes() -> dict[str, float]:
    """Each chapter's minutes under the CPU profile on a 2-core CPU, when the book was last executed (setup cells;
    scripts/sync_chapter_minutes.py records them with the introduction's table)."""
    from importlib.resources import files

    recorded = files("bertmem").joinpath("recorded", "cpu-profile-minutes.json").read_text(encoding="utf-8")
    return json.loads(recorded)["minutes"]


def here_line(chapter: str, profile: Profile, gpu_name: str | None) -> str:
    """How long this chapter takes on this machine: recorded for the book's own CPU-profile settings on a CPU,
    estimated on a GPU with a datasheet entry (setup cells)."""
    if gpu_name is not None:
        card = card_for(gpu_name)
        if card is None:
            return f"here ({profile.name} profile, {gpu_name}): no estimate, this GPU has no datasheet entry here"
        return f"here ({profile.name} profile, {gpu_name}): {estimate_phrase(chapter, profile, card)}"
    recorded = cpu_profile_minutes().get(chapter)
    if profile.device == "cpu" and profile.name == "cpu" and not profile.overridden and recorded is not None:
        return f"here (cpu profile, on a CPU): {recorded:.1f} min when the book was last executed on a 2-core CPU"
    settings = f"{profile.name} profile" + (", settings from the environment" if profile.overridden else "")
    return (f"here ({settings}, {profile.device}): not measured; the book records minutes for its own "
            "cpu-profile settings on a CPU only")


def setup_line(chapter: str, profile: Profile, gpu_name: str | None = None) -> str:
    """The setup cell's lines: what this chapter reads, how long it takes here, and on a Colab T4 (estimated)."""
    if gpu_name is None and on_cuda(profile.device) and device_capability(profile.device) is not None:
        gpu_name = device_name(torch.device(profile.device))  # CUDA-only calls live in bertmem.core.devices
    reads = data_line(chapter, profile)
    first = f"a fresh runtime adds about {FIRST_RUN_MINUTES:.0f} min once for the install and downloads"
    if gpu_name is not None and card_for(gpu_name) is CARDS["T4"]:  # here is a T4: one line says it
        return f"{reads}\n{here_line(chapter, profile, gpu_name)}; {first}"
    gpu = profile if profile.name != "cpu" else get_profile("gpu", env={})  # a T4 runs the GPU profile
    t4 = f"on a {CARDS['T4'].name} ({gpu.name} profile): {estimate_phrase(chapter, gpu, CARDS['T4'])}; {first}"
    lines = [reads, here_line(chapter, profile, gpu_name), t4]
    if profile.name == "cpu":  # the numbers below are this CPU's: what a T4 would run instead
        lines.append(t4_numbers_line(chapter, gpu))
    return "\n".join(lines)


def t4_numbers_line(chapter: str, gpu: Profile) -> str:
    """What this chapter's live numbers would come from on a T4: the GPU profile's model and data, and fp16 where
    a CPU run uses bf16 (setup cells)."""
    if chapter in ("09b", "A4", "A5"):  # CUDA estimates; files the page writes; published readings
        return "on a T4 the same: nothing this page runs depends on the profile or the card"
    reads = data_line(chapter, gpu).removeprefix("data: ")
    return (f"on a T4 the live runs read {gpu.model_id}: {reads}; fp16 with loss scaling wherever a run here "
            "uses bf16 (a T4 has no bf16)")
