"""Will it fit on a real card? The planner against GPU memory that others measured and published (ch. 1, 5).

The rows (`recorded/published_gpu_memory.csv`, sources in `SOURCES`) were read from public pages; none was
measured here. Each is compared in its own terms: a peak of allocated tensors against the planner's tensor peak;
what nvidia-smi showed for the process against tensor peak × (1 + allocator margin) + the CUDA context; a
"fits" or "out of memory" against the card's memory. `fit_margin` chooses the allocator margin on the rows
marked `fit` and the others are held out; `benchmarks/planner.py` prints the whole table."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from importlib.resources import files
from typing import Iterable

from bertmem.core.units import MIB
from bertmem.memory.cards import CARDS, CONTEXT_MIB
from bertmem.memory.estimate import estimate_step_memory, model_work
from bertmem.memory.planner import (
        PlanRequest,  # the planner's own overheads, with the row's context and this margin
    )

SOURCES = {
    "HF-PERF-TRAIN-GPU-ONE": ("Hugging Face, Efficient Training on a Single GPU (transformers v4.21 docs, 2022)",
                              "https://huggingface.co/docs/transformers/v4.21.0/en/perf_train_gpu_one"),
    "LAMBDA-DLBENCH": ("Lambda, deeplearning-benchmark: PyTorch BERT SQuAD logs (2020-2023)",
                       "https://github.com/lambdal/deeplearning-benchmark"),
    "NV-DLE-PYT-BERT": ("NVIDIA DeepLearningExamples, BERT for PyTorch (2020 README)",
                        "https://github.com/NVIDIA/DeepLearningExamples/tree/master/PyTorch/LanguageModeling/BERT"),
    "NV-DLE-TF1-BERT": ("NVIDIA DeepLearningExamples, BERT for TensorFlow (TF 20.06)",
                        "https://github.com/NVIDIA/DeepLearningExamples/tree/master/TensorFlow/LanguageModeling/BERT"),
    "NV-DLE-TF2-BERT": ("NVIDIA DeepLearningExamples, BERT for TensorFlow 2 (TF 21.02)",
                        "https://github.com/NVIDIA/DeepLearningExamples/tree/master/TensorFlow2/LanguageModeling/"
                        "BERT"),
    "GOOG-BERT-README": ("Google Research, BERT README: out-of-memory issues (2018)",
                         "https://github.com/google-research/bert#out-of-memory-issues"),
    "HF-BERT-SDPA-DOC": ("Hugging Face, BERT model documentation: SDPA training benchmark (2024)",
                         "https://gist.github.com/hackyon/2bfcfb59666fab23655f6e62bc0752ba"),
    "KT-T4-NOTEBOOK": ("KyriakosTop, BERT-base on SST-2: FP32 vs QLoRA on a T4 (2025)",
                       "https://github.com/KyriakosTop/bert-distilbert-compression/blob/main/notebooks/"
                       "n8_bert_qlora_gpu_t4.ipynb"),
    "GACT-ICML-T4": ("Liu et al., GACT (ICML 2022): benchmark result files, run_glue on SST-2 (2022; T4 inferred)",
                     "https://github.com/LiuXiaoxuanPKU/GACT-ICML/tree/3196c29b8fbced051d2b374adefb12aac6408812/"
                     "benchmark/nlp/actnn-transformer-test/text_classification"),
}
ROLES = ("fit", "held-out", "check", "other-framework", "excluded")
POST_TABLE = [  # the blog post's table (IMDb, RTX 3090), as printed there: not reproducible from it
    {"variant": "fp32 baseline", "memory (GB)": 10.2, "time per epoch (min)": 42, "F1": 0.923},
    {"variant": "accumulation ×4", "memory (GB)": 6.1, "time per epoch (min)": 48, "F1": 0.921},
    {"variant": "mixed precision + accumulation", "memory (GB)": 4.3, "time per epoch (min)": 35, "F1": 0.925},
    {"variant": "full recipe", "memory (GB)": 3.8, "time per epoch (min)": 32, "F1": 0.927},
]


@dataclass(frozen=True)
class PublishedRow:
    """One published measurement: the step's configuration, what was measured, and how this book uses it."""

    source: str
    card: str
    card_mib: int | None
    framework: str
    model: str
    batch: int
    seq_len: int
    precision: str
    optimizer: str
    gradient_checkpointing: bool
    attention: str
    grads_kept: bool  # zero_grad() zeroed gradients in place (PyTorch < 2.0): they stay allocated between steps
    cuda_modules: str  # "eager" or "lazy" kernel loading: which CUDA context (blank: before lazy loading)
    measured: str  # allocated_peak, process_used, process_used_upper, fits, oom
    value_mib: float | None
    role: str
    note: str

    @property
    def label(self) -> str:
        """The configuration in a few words."""
        extras = [self.optimizer] + (["checkpointing"] if self.gradient_checkpointing else [])
        return (f"{self.model.removesuffix('-uncased')} {self.batch}×{self.seq_len} {self.precision} "
                f"{' '.join(extras)}")


def published_rows(roles: Iterable[str] = ROLES) -> list[PublishedRow]:
    """The recorded rows with one of `roles` (chapters 1, 5)."""
    wanted = set(roles)
    text = files("bertmem.recorded").joinpath("published_gpu_memory.csv").read_text(encoding="utf-8")
    rows = []
    for raw in csv.DictReader(text.splitlines()):
        if raw["role"] not in wanted:
            continue
        rows.append(PublishedRow(
            source=raw["source"], card=raw["card"], card_mib=int(raw["card_mib"]) if raw["card_mib"] else None,
            framework=raw["framework"], model=raw["model"], batch=int(raw["batch"]), seq_len=int(raw["seq_len"]),
            precision=raw["precision"], optimizer=raw["optimizer"],
            gradient_checkpointing=raw["gradient_checkpointing"] == "yes", attention=raw["attention"],
            grads_kept=raw["grads_kept"] == "yes", cuda_modules=raw["cuda_modules"] or "eager",
            measured=raw["measured"], value_mib=float(raw["value_mib"]) if raw["value_mib"] else None,
            role=raw["role"], note=raw["note"]))
    return rows


def tensor_peak_mib(row: PublishedRow) -> float:
    """The planner's tensor peak for the row's step; gradients kept between steps count in full (chapter 1)."""

    report = estimate_step_memory(row.model, row.batch, row.seq_len, precision=row.precision,
                                  attention=row.attention, optimizer=row.optimizer,
                                  gradient_checkpointing=row.gradient_checkpointing)
    peak = report.step_peak
    if row.grads_kept:  # the moment of the peak may hold only some gradients; zeroed ones never left
        peak += report.gradients - report.peak_breakdown.get("gradients", 0)
    return peak / MIB


def planner_mib(row: PublishedRow, peak_mib: float, margin: float) -> float:
    """The planner's answer in the row's own terms: tensors only, or tensors + margin + context (MiB)."""
    if row.measured == "allocated_peak":
        return peak_mib

    overheads = PlanRequest(allocator_margin=margin, cuda_context_bytes=CONTEXT_MIB[row.cuda_modules] * MIB)
    return overheads.needed_bytes(round(peak_mib * MIB)) / MIB


def fit_margin(pairs: list[tuple[PublishedRow, float]], grid_step: float = 0.005) -> float:
    """The allocator margin with the smallest worst relative error over (row, tensor peak) pairs (ch. 5)."""
    usable = [(row, peak) for row, peak in pairs if row.measured == "process_used"]
    if not usable:
        raise ValueError("fit_margin needs rows measured as process_used (nvidia-smi of the training process)")

    def worst(margin: float) -> float:
        return max(abs(planner_mib(row, peak, margin) / row.value_mib - 1) for row, peak in usable)

    return min((round(i * grid_step, 6) for i in range(int(0.6 / grid_step) + 1)), key=worst)


def verdict(row: PublishedRow, planned_mib: float) -> str:
    """How the planner's answer compares with the row (ratio, or agreement on fits / out of memory)."""
    if row.measured in ("allocated_peak", "process_used"):
        return f"{planned_mib / row.value_mib:.2f}"
    if row.measured == "process_used_upper":
        return "agrees" if planned_mib <= row.value_mib else "says more than the card held"
    says_fits = row.card_mib is not None and planned_mib <= row.card_mib
    if row.measured == "fits":
        return "agrees" if says_fits else "says it does not fit"
    return "says it fits" if says_fits else "agrees"


def comparison(rows: list[PublishedRow], margin: float, peaks: dict | None = None) -> list[dict]:
    """One table row per published row: configuration, measured, planner, ratio or agreement (ch. 1, 5)."""
    table = []
    for row in rows:
        peak = (peaks or {}).get(row) or tensor_peak_mib(row)
        planned = planner_mib(row, peak, margin)
        table.append({"source": row.source, "card": row.card, "step": row.label, "measured": row.measured,
                      "published (MiB)": row.value_mib if row.value_mib is not None else row.measured,
                      "planner (MiB)": round(planned), "planner / published": verdict(row, planned),
                      "role": row.role})
    return table


def published_throughput(roles: Iterable[str] = ("compare",)) -> list[dict]:
    """Published BERT fine-tuning throughputs (sequences/s) with one of `roles` (chapter 5)."""
    text = files("bertmem.recorded").joinpath("published_gpu_throughput.csv").read_text(encoding="utf-8")
    return [row for row in csv.DictReader(text.splitlines()) if row["role"] in set(roles)]


def throughput_comparison(rows: list[dict] | None = None) -> list[dict]:
    """The time model's sequences/s (the matmul count, `bertmem.memory.estimate.model_work`, at the rate the
    chapter minutes use: a card's measured rate where `CARDS` has one, else its assumed share of the peak)
    against each published throughput, and the share of the datasheet peak the published run reached
    (chapter 5)."""

    table = []
    for row in rows if rows is not None else published_throughput():
        flops = model_work(row["model"]).example_flops(int(row["seq_len"]))
        card = CARDS[row["card_key"]]
        peak = card.tflops(row["precision"]) * 1e12
        rate = card.training_tflops(row["precision"]) * 1e12
        published = float(row["sequences_per_s"])
        table.append({"source": row["source"], "card": row["card"],
                      "step": f"{row['model'].removesuffix('-uncased')} {row['batch']}×{row['seq_len']} "
                              f"{row['precision']}",
                      "published (seq/s)": published, "model (seq/s)": rate / flops,
                      "model / published": rate / flops / published,
                      "published share of peak": published * flops / peak})
    return table
