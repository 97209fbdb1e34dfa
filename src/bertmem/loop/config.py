"""How and where a run happens: model, device, output folder, checkpoints, progress (chapters 4, 5, 8, A1).

One of the three configuration dataclasses: what the data is lives in `DataConfig` (`bertmem.data.loaders`),
the recipe in `TrainConfig` (`bertmem.loop.combined`); none of this one changes what the model learns."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

from bertmem.core.flags import RefusesRenamed
from bertmem.loop.accumulation import WEIGHTINGS
from bertmem.loop.optim import OPTIMIZER_NAMES
from bertmem.loop.precision import REQUESTS
from bertmem.model.loading import ATTENTION_IMPLEMENTATIONS, MINILM_ID

BACKENDS = ("plain", "accelerate", "trainer")
TINY_MODEL = "tiny-bert"  # a 2-layer random BERT with MiniLM's vocabulary: tests and quick checks


@dataclass(frozen=True)
class RunConfig(RefusesRenamed):
    """How and where a run happens: model, kernels, device, loop, output folder, checkpoints (ch. 4, 5, 8, A1).

    Every field with help text is also a flag of `bertmem train` (generated, `bertmem.core.flags`).
    """

    model_id: str = field(default=MINILM_ID, metadata={
        "help": "Hub id, local model folder, or 'tiny-bert'", "flag": "--model"})
    attention: str = field(default="sdpa", metadata={
        "help": "attention kernel: sdpa (fused) or eager", "choices": ATTENTION_IMPLEMENTATIONS})
    device: str | None = field(default=None, metadata={
        "help": "cpu or cuda: where the model is placed, once; batches follow it"})  # chapter 0
    backend: str = field(default="plain", metadata={
        "help": "training loop; accelerate: run under `accelerate launch` for several processes",
        "choices": BACKENDS})
    progress: bool = field(default=True, metadata={"help": "show progress bars"})
    output_dir: str | None = field(default=None, metadata={
        "help": "folder for metrics.json, config.json, loss.png (and checkpoints, the model)"})
    checkpoint_every: int | None = field(default=None, metadata={  # None: no checkpoints at all
        "help": "keep OUTPUT_DIR/checkpoint.pt: every N optimizer steps, each epoch and on Ctrl-C (chapter 5)"})
    resume: bool = field(default=False, metadata={
        "help": "continue from OUTPUT_DIR/checkpoint.pt (and keep checkpointing there)"})
    save_model: bool = field(default=False, metadata={"help": "save the fine-tuned model to OUTPUT_DIR/model"})
    overwrite: bool = field(default=False, metadata={
        "help": "replace the results of a previous run in OUTPUT_DIR"})  # else such a folder is refused
    RENAMED = {"model": "model_id"}

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.attention not in ATTENTION_IMPLEMENTATIONS:
            raise ValueError(f"attention must be one of {ATTENTION_IMPLEMENTATIONS}, got {self.attention!r}")
        every = self.checkpoint_every
        if every is not None and (not isinstance(every, int) or every < 1):
            raise ValueError(f"checkpoint_every must be an int >= 1 or None, got {every!r}")
        for wanted, name in ((self.save_model, "save_model"), (every is not None, "checkpoint_every"),
                             (self.resume, "resume")):
            if wanted and not self.output_dir:
                raise ValueError(f"{name} needs output_dir: the folder that holds the model and checkpoint.pt")
        if self.checkpoint_dir and self.backend != "plain":
            raise ValueError(f"checkpoint_every and resume are features of bertmem's own loop (backend 'plain'), not "
                             f"of backend {self.backend!r}: drop them, or use the backend's own checkpoints")
        if self.device is not None:
            try:
                torch.device(self.device)
            except RuntimeError as err:
                raise ValueError(f"device {self.device!r} is not a torch device: use 'cpu' or 'cuda'") from err

    @property
    def checkpoint_dir(self) -> str | None:
        """Where checkpoint.pt lives: the output folder when the run keeps or resumes checkpoints (chapter 5)."""
        return self.output_dir if self.checkpoint_every is not None or self.resume else None



def _off_if_zero(raw: str) -> float | None:
    """--max-grad-norm 0 turns clipping off."""
    value = float(raw)
    return None if value == 0 else value


RUN_FIELDS = {"device": "device=...", "progress": "progress=...", "checkpoint_every": "checkpoint_every=...",  # moved
              "resume": "resume=...", "checkpoint_dir": "output_dir=... with checkpoint_every=... or resume=True"}


@dataclass(frozen=True)
class TrainConfig:
    """The recipe: what the model learns and how, validated at construction (chapters 0, 2-5, 8).

    Every field with help text is also a flag of `bertmem train` (generated, `bertmem.core.flags`). Where and
    how the loop runs (device, progress bars, checkpoints) is `RunConfig`'s concern.
    """

    epochs: int = field(default=1, metadata={"help": "passes over the training data"})
    learning_rate: float = field(default=5e-5, metadata={"help": "peak learning rate", "aliases": ("--lr",)})
    weight_decay: float = field(default=0.01, metadata={"help": "AdamW's decoupled weight decay"})
    warmup_ratio: float = field(default=0.1, metadata={"help": "share of the steps spent warming up"})
    seed: int = field(default=0, metadata={
        "help": "training seed: classifier head, dropout, data order (which examples: --data-seed)"})
    max_steps: int | None = field(default=None, metadata={"help": "stop after this many optimizer steps"})
    layerwise_decay: float | None = field(default=None, metadata={
        "help": "layer-wise LR decay in (0, 1], e.g. 0.95 (chapter 4)"})  # None: one AdamW group
    accumulation_steps: int = field(default=1, metadata={"help": "micro-batches per optimizer step (chapter 2)"})
    loss_weighting: str = field(default="examples", metadata={
        "help": "weigh micro-batch losses by examples or labelled tokens (chapter 2)", "choices": WEIGHTINGS})
    max_grad_norm: float | None = field(default=1.0, metadata={
        "help": "clip the gradient norm, once per optimizer step; 0 turns clipping off",
        "parse": _off_if_zero})
    precision: str = field(default="fp32", metadata={
        "help": "auto picks bf16 or fp16 + GradScaler where they are fast (chapter 3)", "choices": REQUESTS})
    guard_non_finite: bool = True  # chapter 3: stop with a diagnosis on NaN/inf the scaler does not handle
    gradient_checkpointing: bool = field(default=False, metadata={
        "help": "recompute each layer in backward instead of keeping its activations (chapter 5)"})
    fused_optimizer: bool | None = None  # chapter 5: fused AdamW kernel; None = where the device supports it
    oom_backoff: bool = field(default=False, metadata={
        "help": "on out-of-memory halve the micro-batch, double the accumulation (chapter 5)"})
    optimizer: str = field(default="adamw", metadata={
        "help": "adamw (8 bytes of state per parameter), adamw8bit (about 2) or adafactor (factored, "
                "no first moment) (chapter 8)", "choices": OPTIMIZER_NAMES})
    lora_r: int | None = field(default=None, metadata={
        "help": "train LoRA adapters of this rank and the head, not the encoder (chapter 8)"})
    freeze_layers: int = field(default=0, metadata={
        "help": "freeze the embeddings and this many bottom encoder layers (chapter 8)"})

    def __new__(cls, *args: Any, **kwargs: Any) -> "TrainConfig":
        """Refuse run settings by name, saying where they live now (chapter 5): not a bare 'unexpected keyword'."""
        moved = [RUN_FIELDS[name] for name in RUN_FIELDS if name in kwargs]
        if moved:
            raise TypeError("how and where a run happens is RunConfig's, not the recipe's: pass "
                            f"run=RunConfig({', '.join(moved)}) to train")
        return super().__new__(cls)


    def __post_init__(self) -> None:
        if not isinstance(self.epochs, int) or self.epochs < 1:
            raise ValueError(f"epochs must be an int >= 1, got {self.epochs!r}")
        if not (math.isfinite(self.learning_rate) and self.learning_rate > 0):
            raise ValueError(f"learning_rate must be a finite number > 0, got {self.learning_rate}")
        if not (math.isfinite(self.weight_decay) and self.weight_decay >= 0):
            raise ValueError(f"weight_decay must be a finite number >= 0, got {self.weight_decay}")
        if not 0 <= self.warmup_ratio < 1:
            raise ValueError(f"warmup_ratio must be in [0, 1), got {self.warmup_ratio}")
        if not isinstance(self.accumulation_steps, int) or self.accumulation_steps < 1:
            raise ValueError(f"accumulation_steps must be an int >= 1, got {self.accumulation_steps!r}")
        if self.loss_weighting not in WEIGHTINGS:
            raise ValueError(f"loss_weighting must be one of {WEIGHTINGS}, got {self.loss_weighting!r}")
        if self.max_grad_norm is not None and not (math.isfinite(self.max_grad_norm) and self.max_grad_norm > 0):
            raise ValueError(f"max_grad_norm must be a finite number > 0 or None, got {self.max_grad_norm}")
        if self.precision not in REQUESTS:
            raise ValueError(f"precision must be one of {REQUESTS}, got {self.precision!r}")
        if self.layerwise_decay is not None and not 0 < self.layerwise_decay <= 1:
            raise ValueError(f"layerwise_decay must be in (0, 1] or None, got {self.layerwise_decay}")
        if self.optimizer not in OPTIMIZER_NAMES:
            raise ValueError(f"optimizer must be one of {OPTIMIZER_NAMES}, got {self.optimizer!r}")
        if self.lora_r is not None and (not isinstance(self.lora_r, int) or self.lora_r < 1):
            raise ValueError(f"lora_r must be an int >= 1 or None (full fine-tuning), got {self.lora_r!r}")
        if not isinstance(self.freeze_layers, int) or self.freeze_layers < 0:
            raise ValueError(f"freeze_layers must be an int >= 0, got {self.freeze_layers!r}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1 or None, got {self.max_steps}")
