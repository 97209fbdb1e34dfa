"""The planner against a real allocator: one steady-state training step per shape (A3).

On a CUDA GPU each row records `torch.cuda.max_memory_allocated` (tensors), `max_memory_reserved` (the caching
allocator's blocks), the card's used memory from NVML (what nvidia-smi shows, the CUDA context included) and the
book's timeline peak on the real tensors. `add_estimates` puts the planner's FakeTensor estimate and its overhead
model (allocator margin, CUDA context) beside them, on any machine: the estimate needs shapes, not a GPU.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from bertmem.core.devices import (MEMORY_CAP_ENV, card_used_bytes, empty_cache, peak_reserved_bytes,
                                  require_device, reserved_bytes, synchronize)
from bertmem.core.units import MIB
from bertmem.loop.optim import make_optimizer
from bertmem.memory.estimate import estimate_step_memory, model_config
from bertmem.memory.measure import measure_step_memory
from bertmem.memory.planner import PlanRequest, random_batch
from bertmem.model.loading import classifier_from_config, enable_gradient_checkpointing


@dataclass(frozen=True)
class StepShape:
    """One configuration of a training step: model, micro-batch, tokens, precision, attention, checkpointing."""

    model_id: str
    batch: int
    seq_len: int
    precision: str
    attention: str
    checkpointing: bool = False

    def label(self) -> str:
        """'bert-base-uncased 8×512 bf16 sdpa +ckpt': one line for a table."""
        return (f"{self.model_id} {self.batch}×{self.seq_len} {self.precision} {self.attention}"
                + (" +ckpt" if self.checkpointing else ""))


BASE = "bert-base-uncased"
# batch × length × precision × attention × checkpointing around the GPU profile (8 × 512) and chapter 5's bench
# (32 × 512 fp32 eager against 8 × 512 half precision sdpa), plus bert-large for a second model size
CALIBRATION_SHAPES = (
    StepShape(BASE, 8, 512, "fp32", "eager"), StepShape(BASE, 8, 512, "fp32", "sdpa"),
    StepShape(BASE, 8, 512, "fp16", "eager"), StepShape(BASE, 8, 512, "fp16", "sdpa"),
    StepShape(BASE, 8, 512, "bf16", "sdpa"), StepShape(BASE, 8, 512, "bf16", "sdpa", True),
    StepShape(BASE, 32, 128, "fp32", "eager"), StepShape(BASE, 32, 128, "bf16", "sdpa"),
    StepShape(BASE, 16, 512, "bf16", "eager"), StepShape(BASE, 32, 512, "fp32", "eager"),
    StepShape(BASE, 32, 512, "fp16", "sdpa", True), StepShape(BASE, 16, 256, "fp32", "sdpa", True),
    StepShape("bert-large-uncased", 8, 512, "bf16", "sdpa"),
)


def random_classifier(model_id: str, attention: str, seed: int = 0, config=None):
    """A classifier built from the model's configuration with seeded random weights: the same shapes and cost as
    the pretrained one (A3)."""
    torch.manual_seed(seed)
    return classifier_from_config(config if config is not None else model_config(model_id), attention)


TINY = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2, "intermediate_size": 128}  # dry runs
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")


def config_for(model_id: str, overrides: dict | None):
    """The model's vendored configuration, with `overrides` (a dry run's tiny sizes) (A3)."""
    config = model_config(model_id)
    for key, value in (overrides or {}).items():
        setattr(config, key, value)
    if hasattr(config, "reference_compile"):  # ModernBERT in older transformers: no torch.compile mid-measure
        config.reference_compile = False
    for tied in ("embedding_size", "pooler_hidden_size"):  # ELECTRA's embeddings, DeBERTa's pooler follow the width
        if overrides and "hidden_size" in overrides and getattr(config, tied, None):
            setattr(config, tied, overrides["hidden_size"])
    return config


def model_folder(model_id: str, overrides: dict | None, tokenizer: Path, folder: Path) -> Path:
    """A model folder as from_pretrained reads it: random weights from the configuration, the tokenizer's files
    (a lent GPU has no Hub) (A3)."""
    if not any((tokenizer / name).is_file() for name in ("vocab.txt", "tokenizer.json")):
        raise SystemExit(f"{tokenizer} holds no tokenizer (vocab.txt or tokenizer.json): pass --tokenizer the folder "
                         "of bert-base-uncased's tokenizer, or the MiniLM package's model folder (the same vocabulary)")
    random_classifier(model_id, "sdpa", config=config_for(model_id, overrides)).save_pretrained(folder)
    for name in TOKENIZER_FILES:  # the tokenizer's files only: a model folder's weights stay behind
        if (tokenizer / name).is_file():
            shutil.copy(tokenizer / name, folder / name)
    return folder


T4_USABLE_MIB = 15360  # a T4's memory as nvidia-smi shows it; the cap plus this process's context makes it
CONTEXT_RANGE_MIB = (200, 4096)  # a CUDA context outside this was not measured right (NVML unread, memory in flux)


def cap_for(card_mib: int, context_bytes: int) -> int:
    """The allocator cap that, with this process's CUDA context, fills a card of `card_mib` (a T4 on a bigger
    card); refuses a context outside `CONTEXT_RANGE_MIB` (A3)."""
    low, high = CONTEXT_RANGE_MIB
    if not low * MIB <= context_bytes <= high * MIB:
        raise ValueError(f"a CUDA context of {context_bytes / MIB:.0f} MiB is outside {low}-{high} MiB: NVML was "
                         "not read right, or memory was still being released; run again in a fresh process")
    return card_mib * MIB - context_bytes


def as_t4(device: torch.device | None = None) -> dict[str, int]:
    """Make this process run as a T4 would, as far as a cap can: the allocator capped so that it and the CUDA
    context (measured after cuBLAS and SDPA have loaded) fill a T4's memory, `cuda_free_bytes` answering within
    the cap, flash and cuDNN attention off (a T4 has neither) (A3, `gpu_check.py --as-t4`). Before any other CUDA
    work in the process."""
    device = device or torch.device("cuda", 0)
    idle = card_used_bytes(device)
    if idle is None:
        raise RuntimeError("NVML cannot be read here: the CUDA context cannot be measured, so no cap is set")
    a = torch.randn(256, 256, device=device, dtype=torch.float16)
    torch.nn.functional.scaled_dot_product_attention(a[None, None], a[None, None], a[None, None])  # load kernels
    (a @ a).sum().item()
    context = card_used_bytes(device) - idle - torch.cuda.memory_reserved(device)
    cap = cap_for(T4_USABLE_MIB, context)
    torch.cuda.set_per_process_memory_fraction(cap / torch.cuda.get_device_properties(device).total_memory, device)
    os.environ[MEMORY_CAP_ENV] = str(cap)
    torch.backends.cuda.enable_flash_sdp(False)
    torch.backends.cuda.enable_cudnn_sdp(False)
    return {"t4_cap_bytes": cap, "context_bytes": context}


def fresh_process_row(command: list[str], row_file: Path, timeout_s: int, label: dict[str, Any]) -> dict[str, Any]:
    """Run `command` (a child that writes one JSON row to `row_file`) in a fresh process: its row with the
    seconds it took, or `label` with the error (the child's last lines, or the timeout) (A3, `benchmarks/`)."""
    start = time.perf_counter()
    row_file.unlink(missing_ok=True)
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
        row = (json.loads(row_file.read_text()) if done.returncode == 0 and row_file.exists()
               else {**label, "error": (done.stderr.strip() or done.stdout.strip())[-1500:]})
    except subprocess.TimeoutExpired:
        row = {**label, "error": f"cut off after {timeout_s} s"}
    return {**row, "process (s)": round(time.perf_counter() - start, 1)}


def measure_shape(shape: StepShape, device: str = "cuda", config=None) -> dict[str, Any]:
    """One steady-state step of `shape` on `device`: AdamW as the book's loop builds it (fused on a GPU), a first
    step to create its state, then the measured one (A3)."""
    where = require_device(device)
    model = random_classifier(shape.model_id, shape.attention, config=config).to(where).train()
    if shape.checkpointing:
        enable_gradient_checkpointing(model)
    batch = random_batch(model, shape.batch, shape.seq_len)
    optimizer = make_optimizer(model.parameters(), fused=where.type == "cuda")
    measure_step_memory(model, batch, optimizer, shape.precision)  # creates the AdamW state every later step holds
    # measure_step_memory starts its own peak window on CUDA (reset_peak_memory: max_memory_reserved too)
    report = measure_step_memory(model, batch, optimizer, shape.precision)
    synchronize(where)
    row = {**asdict(shape), "label": shape.label(), "parameters": report.parameters,
           "allocated peak": report.peak, "reserved peak": peak_reserved_bytes(where),
           "reserved now": reserved_bytes(where), "card used now": card_used_bytes(where),
           "timeline peak": report.step_peak, "timeline peak phase": report.peak_phase,
           "activations": report.activations}
    del model, optimizer, batch, report
    gc.collect()
    empty_cache(where)  # the next shape starts with an empty cache, as a fresh run would
    return row


def add_estimates(rows: list[dict[str, Any]], idle_used: int | None, request: PlanRequest = PlanRequest(),
                  config_for=model_config, kernels: str = "cuda") -> list[dict[str, Any]]:
    """Each measured row with the planner's estimate beside it: the tensor peak against the allocator's (the
    timeline's where there is no allocator, on a CPU), and the planner's whole need (peak + margin + CUDA
    context) against the card's used memory at the peak (A3).

    `idle_used`: the card's used memory before this process touched CUDA (NVML), so the process's own share is
    what is left. The card total at the peak is the context (used now − reserved now) plus the reserved peak.
    `kernels`: whose kernel choices the estimate follows, a GPU's ('cuda') or this CPU's ('cpu').
    """
    out = []
    for row in rows:
        estimate = estimate_step_memory(config_for(row["model_id"]), row["batch"], row["seq_len"],
                                        precision=row["precision"], attention=row["attention"],
                                        gradient_checkpointing=row["checkpointing"], device=kernels)
        allocator = row.get("allocated peak") is not None
        measured = row["allocated peak"] if allocator else row["timeline peak"]
        new = dict(row, **{"estimated peak": estimate.step_peak, "estimated peak phase": estimate.peak_phase,
                           "measured peak": measured, "measured by": "allocator" if allocator else "timeline",
                           "estimate error": estimate.step_peak / measured - 1,
                           "planner needs": request.needed_bytes(estimate.step_peak)})
        if row.get("card used now") is not None and row.get("reserved now") is not None and idle_used is not None:
            context = row["card used now"] - idle_used - row["reserved now"]
            new["context"] = context
            new["process at peak"] = context + row["reserved peak"]
            new["planner error"] = new["planner needs"] / new["process at peak"] - 1
            # the share of the estimate the planner must add: the allocator's slack plus what the estimate misses
            new["margin needed"] = row["reserved peak"] / estimate.step_peak - 1
            new["allocator slack"] = row["reserved peak"] / row["allocated peak"] - 1
        out.append(new)
    return out
