"""The one GPU table: each card's memory, datasheet peaks and measured speed, and the CUDA context (ch. 1, 5).

What the planner budgets for (`--memory t4`), what the chapters' minutes are computed from, and what the
published throughputs are compared with all read `CARDS`; nothing else holds a card's numbers."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from bertmem.core.units import MIB

# The CUDA context (driver, kernels, library handles), which no PyTorch counter sees. Before CUDA 11.7 every
# kernel was loaded at start-up: 1343 MiB on the V100 of HF-PERF (its own measurement). With lazy loading,
# PyTorch's default since 1.13 (pytorch/pytorch#86509, which measured 274 MiB lazy against 636 MiB eager):
# 426 MiB with PyTorch 2.10 and CUDA 13 (unslothai/unsloth-zoo#1053, nvidia-smi, RTX 6000 Ada).
CONTEXT_MIB = {"eager": 1343, "lazy": 426}



# Assumed share of the datasheet peak that a BERT fine-tune reaches (kernels, data loading, optimizer, Python);
# each card carries its own value, this is the one the book assumes for all three until a GPU run measures them.
UTILISATION = 0.3


@dataclass(frozen=True)
class Card:
    """A GPU's memory and dense datasheet peaks in TFLOP/s per precision (no sparsity, no TF32) (setup cells)."""

    name: str
    memory_mib: int | None  # total device memory as nvidia-smi reports it; None: not needed
    peak_tflops: dict[str, float]
    source: str
    utilisation: float = UTILISATION  # the assumed share of the peak reached (an assumption, stated on the page)
    # TFLOP/s a BERT-class fine-tune was measured to reach on this card, by precision, and where it was published
    measured_tflops: dict[str, float] = field(default_factory=dict)
    measured_source: str = ""
    # what each measured rate rests on, in a phrase the pages quote (`bertmem.book.time_check.rate_note`)
    measured_basis: dict[str, str] = field(default_factory=dict)
    memory_source: str = ""  # where the nvidia-smi total was read
    pattern: str = ""  # how a CUDA device name names this card (a regular expression); default: its key as a word

    def __post_init__(self) -> None:
        if "fp32" not in self.peak_tflops or min(self.peak_tflops.values()) <= 0:
            raise ValueError(f"{self.name}: peak_tflops needs a positive 'fp32' entry, got {self.peak_tflops}")
        if set(self.measured_basis) != set(self.measured_tflops):
            raise ValueError(f"{self.name}: say what each measured rate rests on (measured_basis), got "
                             f"{sorted(self.measured_basis)} for {sorted(self.measured_tflops)}")
        if not 0 < self.utilisation <= 1:
            raise ValueError(f"{self.name}: utilisation must be in (0, 1], got {self.utilisation}")

    def low_precision(self) -> str:
        """The precision `auto` picks on this card: bf16 where it has bf16 tensor cores, else fp16."""
        return "bf16" if "bf16" in self.peak_tflops else "fp16"

    def rate_measured(self, precision: str) -> bool:
        """Whether `training_tflops` gives a published measurement for this precision ('auto' included)."""
        return (self.low_precision() if precision == "auto" else precision) in self.measured_tflops

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


# Device memory as nvidia-smi reports each card's total (its datasheet's GB are decimal and a little more): what
# `--memory t4` plans for, and what a plain `bertmem plan` assumes on any machine. The totals were read from
# nvidia-smi outputs others published (`memory_source`); T4, L4, A10, A100 40GB/80GB and H100 from one list of them
# (modal-labs/modal-client#2797). Peaks are dense (no sparsity), 16-bit with fp32 accumulation, as training uses.
MODAL_TOTALS = "https://github.com/modal-labs/modal-client/pull/2797"
CARDS = {  # NVIDIA datasheets and whitepapers (references.bib: the `source` of each card)
    # T4, measured, in matmul FLOPs (`bertmem.model.matmuls`, the count the time estimate divides): fp16, 0.30 s
    # per batch of 32 × 128 tokens for ModernBERT-base = 32 × 88.0 GFLOP / 0.30 s = 9.39 TFLOP/s (earino2026t4;
    # counted as padded batches with full attention products, which transformers 5's SDPA and eager ModernBERT
    # compute at 128 tokens, its window's width: the run's version is not given); fp32, 54.8 sequences of 128
    # tokens per second for bert-base at batch 8, forward and backward = 54.8 × 67.0 GFLOP = 3.67 TFLOP/s
    # (liu2022gact's speed results). tests/test_workload.py derives both from the count.
    "T4": Card("Colab T4", 15360, {"fp32": 8.1, "fp16": 65.0}, "nvidia2018t4",
               measured_tflops={"fp16": 9.39, "fp32": 3.67}, measured_source="earino2026t4,liu2022gact",
               measured_basis={
                   "fp16": "one blog run's time per batch for ModernBERT-base (32 × 128 tokens on a Kaggle T4; "
                           "its library versions not given)",
                   "fp32": "GACT's bert-base at micro-batch 8 on a card inferred to be a T4, timed over forward "
                           "and backward without optimizer.step, as every GACT run the book takes is; the time "
                           "check holds that run too (it agrees there by construction)"},
               memory_source=MODAL_TOTALS),
    "L4": Card("L4", 23034, {"fp32": 30.3, "fp16": 121.0, "bf16": 121.0}, "nvidia2023l4", memory_source=MODAL_TOTALS),
    "A10": Card("A10", 23028, {"fp32": 31.2, "fp16": 125.0, "bf16": 125.0}, "nvidia2021a10",
                memory_source=MODAL_TOTALS),
    "RTX3090": Card("RTX 3090", 24576, {"fp32": 35.6, "fp16": 71.0, "bf16": 71.0}, "nvidia2020ga102",
                    memory_source="https://github.com/noonghunna/club-3090/issues/1128",
                    pattern=r"RTX\s*3090\b(?!\s*(?:Ti|Laptop))"),  # the Ti has other peaks
    "RTX4090": Card("RTX 4090", 24564, {"fp32": 82.6, "fp16": 165.2, "bf16": 165.2}, "nvidia2022ada",
                    memory_source="https://github.com/RLinf/RLinf/issues/255",
                    pattern=r"RTX\s*4090\b(?!\s*(?:Laptop|D\b))"),  # the laptop part: 16 GB, lower peaks
    # before "A100": an 80 GB device ("NVIDIA A100-SXM4-80GB") also names the A100 as a word
    "A100-80GB": Card("A100 80GB", 81920, {"fp32": 19.5, "fp16": 312.0, "bf16": 312.0}, "nvidia2020a100",
                      memory_source=MODAL_TOTALS, pattern=r"\bA100\b.*\b80\s*GB"),
    "A100": Card("A100 40GB", 40960, {"fp32": 19.5, "fp16": 312.0, "bf16": 312.0}, "nvidia2020a100",
                 memory_source=MODAL_TOTALS),
    "H100": Card("H100 80GB (SXM)", 81559, {"fp32": 67.0, "fp16": 989.5, "bf16": 989.5}, "nvidia2022h100",
                 memory_source=MODAL_TOTALS, pattern=r"\bH100\b(?!.*\b(?:PCIe|NVL)\b)"),  # PCIe, NVL: other peaks
    # The card of appendix A3's measurements; not offered for planning (its memory is not in the table). The H200's
    # datasheet gives the H100 SXM's dense rates.
    "H200": Card("H200", None, {"fp32": 67.0, "fp16": 989.5, "bf16": 989.5}, "nvidia2024h200",
                 pattern=r"\bH200\b(?!.*\bNVL\b)"),  # the NVL part: other peaks
    # Kaggle's and older cloud cards. V100 (SXM2) and P100 (PCIe) peaks from their datasheets (a PCIe V100 is
    # timed with the SXM2's, a little above its own). The P100 has no tensor cores and no bf16: its datasheet's
    # 18.7 TFLOP/s fp16 accumulates in fp16, and with fp32 accumulation, as this table's peaks are, fp16 runs at
    # its fp32 rate. The published memory rows and most throughput rows are V100 16GB; some throughput rows are
    # 32GB (`bertmem.book.published`). A 32 GB device name also names the V100 as a word.
    "V100-32GB": Card("V100 32GB", 32768, {"fp32": 15.7, "fp16": 125.0}, "nvidia2017v100",
                      memory_source="https://github.com/Wan-Video/Wan2.1/issues/5",
                      pattern=r"\bV100\b.*\b32\s*GB"),
    "V100": Card("V100 16GB", 16384, {"fp32": 15.7, "fp16": 125.0}, "nvidia2017v100",
                 memory_source="https://github.com/1CatAI/1Cat-vLLM/issues/85"),
    "P100": Card("P100 16GB", 16384, {"fp32": 9.3, "fp16": 9.3}, "nvidia2016p100",
                 memory_source="https://github.com/wookayin/gpustat/issues/130"),
    # 48 GB workstation and data-centre cards (RTX A6000: ECC off, as it ships; L40S: ECC on, as it ships)
    "A6000": Card("RTX A6000", 49140, {"fp32": 38.7, "fp16": 154.8, "bf16": 154.8}, "nvidia2020ga102",
                  memory_source="https://github.com/noonghunna/club-3090/issues/1047", pattern=r"RTX\s*A6000\b"),
    "L40S": Card("L40S", 46068, {"fp32": 91.6, "fp16": 362.05, "bf16": 362.05}, "nvidia2023l40s",
                 memory_source="https://github.com/gpustack/gpustack/issues/301"),
}


def card_named(name: str) -> Card | None:
    """The card `--memory NAME` names (t4, a100-80gb, …), or None for a size such as 15GiB (plan, train)."""
    key = str(name).strip().lower()
    return next((card for k, card in CARDS.items() if k.lower() == key), None)


def card_precision(card: Card | None) -> tuple[str, str]:
    """What precision 'auto' plans for on a card, and why: its 16-bit format, or fp16 (a T4's) for a bare size."""
    if card is not None:
        return card.low_precision(), f"auto: {with_article(card.name)}'s 16-bit format"
    return "fp16", "auto: fp16, a T4's (name the card, e.g. --memory l4, to plan for its own)"


def with_article(name: str) -> str:
    """'a Colab T4', 'an A100 40GB', 'an H100', 'an L4': the article a card name takes when read aloud."""
    return ("an " if name[:1].upper() in "AEFHILMNORSX" else "a ") + name


def card_for(gpu_name: str | None) -> Card | None:
    """The card a CUDA device name names as a whole word ('Tesla T4', 'NVIDIA L4'; not 'L40S'), else None."""
    for key, card in CARDS.items():
        if gpu_name and re.search(card.pattern or rf"\b{key}\b", gpu_name, flags=re.IGNORECASE):
            return card
    return None
# What a CUDA process holds beyond the step's tensors, held against memory others measured on GPUs
# (`bertmem.book.published`, `make bench-planner`). The CUDA context, which no PyTorch counter sees: 426 MiB with
# lazy kernel loading, PyTorch's default since 1.13 (nvidia-smi, PyTorch 2.10 / CUDA 13; CONTEXT_MIB above).
# The caching allocator's rounding and fragmentation, workspaces and whatever else the estimate misses, as a
# share of the estimated peak: fitted to published nvidia-smi readings of training runs (fit rows; the held-out
# rows and the checks are printed by `make bench-planner`). The fit rows are bert-large at 512 tokens on a V100
# with PyTorch 1.x; none tests a large activation load on a T4. Both are parameters: pass what your card measures.
CUDA_CONTEXT_BYTES = CONTEXT_MIB["lazy"] * MIB
_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


# The cards `--memory NAME` accepts, by lower-case name: a view of `CARDS`, not a second table.
CARD_MEMORY = {key.lower(): card.memory_mib * MIB for key, card in CARDS.items() if card.memory_mib}
DEFAULT_CARD = "t4"


def parse_memory(text: str) -> int:
    """Bytes from '15GiB', '16 GB', '24000MB', a card name (t4, l4, a10, rtx3090, …, h100) or a plain number
    (chapter 5)."""
    if str(text).strip().lower() in CARD_MEMORY:
        return CARD_MEMORY[str(text).strip().lower()]
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", str(text))
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(f"cannot read memory size {text!r}: write e.g. 15GiB, 16GB, 24000MB or a card "
                         f"({', '.join(CARD_MEMORY)})")
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])
