"""Small, seeded demonstration runs the chapters show on tiny models and random batches (tests use them too)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import torch

from bertmem.core.devices import move_to
from bertmem.loop.accumulation import backward_window, split_batch
from bertmem.loop.combined import train
from bertmem.loop.config import RunConfig, TrainConfig
from bertmem.loop.precision import DTYPES, mixed_precision_step
from bertmem.model.loading import tiny_classifier


def synthetic_batch(examples: int, length: int = 16, generator: torch.Generator | None = None,
                    vocab: int = 1000) -> dict[str, torch.Tensor]:
    """Random token ids whose label is the parity of token 1: learnable, no data needed (chapters 2, 3, 6)."""
    generator = generator or torch.Generator().manual_seed(0)
    ids = torch.randint(5, vocab, (examples, length), generator=generator)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids[:, 1] % 2}


def synthetic_batches(count: int, examples: int, length: int = 16, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """`count` synthetic batches from one seeded generator (chapter 6)."""
    generator = torch.Generator().manual_seed(seed)
    return [synthetic_batch(examples, length, generator) for _ in range(count)]


def accumulated_gradient(model: torch.nn.Module, micro_batches: list[dict], naive: bool = False) -> torch.Tensor:
    """Flat gradient over micro-batches: weighted, or the post's loss / N (ch. 2)."""
    model.zero_grad(set_to_none=True)
    if naive:
        for micro in micro_batches:
            (model(**move_to(micro, model.device)).loss / len(micro_batches)).backward()
    else:
        backward_window(model, micro_batches)
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def adamw_step_change(micro_sizes: list[int], lr: float, seed: int = 0) -> torch.Tensor:
    """A tiny BERT's change after one AdamW step over split examples (ch. 2)."""
    tiny = tiny_classifier(seed=seed, dropout=0.0)
    full = synthetic_batch(sum(micro_sizes), generator=torch.Generator().manual_seed(seed + 1))
    before = torch.cat([p.detach().flatten().clone() for p in tiny.parameters()])
    optimizer = torch.optim.AdamW(tiny.parameters(), lr=lr, weight_decay=0.0)
    backward_window(tiny, split_batch(full, micro_sizes))
    optimizer.step()
    return torch.cat([p.detach().flatten() for p in tiny.parameters()]) - before


def scaled_run(
    precision: str,
    steps: int = 40,
    ffn_scale: float = 1.0,
    init_scale: float = 2.0**16,
    growth_interval: int = 10,
    micro_sizes: tuple[int, ...] = (8, 8),
    lr: float = 1e-3,
    clip: float | None = None,
) -> tuple[list[float], list[float]]:
    """A tiny BERT trained by chapter 3's `mixed_precision_step`: scale trace, losses.

    `ffn_scale` multiplies each layer's first feed-forward matrix: large values
    overflow fp16 in the forward pass (chapters 3, 6).
    """
    if precision not in ("fp32", "bf16", "fp16"):
        raise ValueError(
            f"precision must be 'fp32', 'bf16' or 'fp16', got {precision!r}"
        )
    tiny = tiny_classifier(seed=0)
    with torch.no_grad():
        for layer in tiny.bert.encoder.layer:
            layer.intermediate.dense.weight.mul_(ffn_scale)
    optimizer = torch.optim.AdamW(tiny.parameters(), lr=lr)
    scaler = torch.amp.GradScaler(
        "cpu",
        init_scale=init_scale,
        growth_interval=growth_interval,
        enabled=precision == "fp16",
    )
    generator, scales, losses = torch.Generator().manual_seed(0), [], []
    for _ in range(steps):
        data = synthetic_batch(sum(micro_sizes), generator=generator)
        window = split_batch(data, list(micro_sizes))
        losses.append(
            mixed_precision_step(
                tiny, window, optimizer, scaler, DTYPES[precision], max_grad_norm=clip
            )
        )
        scales.append(scaler.get_scale())
    return scales, losses


def tiny_training_run(batches: list[dict], **overrides):
    """`train` on a seeded tiny BERT for 6 epochs at lr 1e-3, no clipping or warmup unless overridden (ch. 6)."""

    settings = dict(epochs=6, learning_rate=1e-3, max_grad_norm=None, warmup_ratio=0.0)
    return train(tiny_classifier(seed=0), batches, TrainConfig(**{**settings, **overrides}),
                 run=RunConfig(progress=False))


def classifier_change(model: torch.nn.Module, param_groups: Callable, batch: dict) -> float:
    """Largest change of the classifier weights after one AdamW step with these parameter groups (chapter 4)."""
    model.train()
    optimizer = torch.optim.AdamW(param_groups(model))
    before = model.classifier.weight.detach().clone()
    model(**move_to(batch, model.device)).loss.backward()
    optimizer.step()
    return (model.classifier.weight - before).abs().max().item()


def launch_two_processes(strategy: str, output_dir: Path, model: str, dataset: str, port: int = 29517,
                         timeout: int = 600) -> list[dict]:
    """`bertmem train --backend accelerate` on two CPU processes (DDP or FSDP2); each rank's JSON (chapter 7)."""
    if strategy not in ("ddp", "fsdp"):
        raise ValueError(f"strategy must be 'ddp' or 'fsdp', got {strategy!r}")
    flags = ["--multi_gpu"] if strategy == "ddp" else ["--use_fsdp", "--fsdp_version", "2"]
    command = [sys.executable, "-m", "accelerate.commands.launch", *flags, "--num_processes", "2",
               "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
               "--main_process_port", str(port), "-m", "bertmem", "train", "--backend", "accelerate",
               "--model", model, "--dataset", dataset, "--train-size", "64", "--eval-size", "16",
               "--max-length", "64", "--micro-batch", "4", "--max-steps", "4", "--precision", "fp32",
               "--device", "cpu", "--no-progress", "--no-save-model", "--output-dir", str(output_dir)]
    env = dict(os.environ, OMP_NUM_THREADS="1")  # two processes on two cores
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    if done.returncode:
        raise RuntimeError(f"accelerate launch ({strategy}) failed:\n{done.stderr[-3000:]}")
    return [json.loads((Path(output_dir) / f"rank{r}.json").read_text()) for r in (0, 1)]
