"""The fine-tuning loop: AdamW, warmup + decay, accumulation, precision, LLRD, checkpoints (chapters 0, 2–5)."""

from __future__ import annotations

import functools
import math
import time
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import DataLoader

from .accumulation import WEIGHTINGS, backward_with_backoff, check_dataset_fits, optimizer_steps, windows
from .models import enable_gradient_checkpointing
from .baseline import TrainResult, evaluate, evaluate_into  # noqa: F401  (chapter 0's pieces, re-exported for callers)
from .batching import dataset_size
from .footprint import OPTIMIZER_NAMES, apply_lora, freeze_lower_layers, has_lora, make_optimizer
from .devices import model_device, require_device, synchronize
from .interrupts import stops_on_sigterm
from .precision import REQUESTS, autocast_context, check_finite, choose_precision
from .resume import RunState, run_settings  # noqa: F401  (run_settings: re-exported)
from .run_config import RunConfig
from .profile import Profile, seed_everything
from .profile import progress as progress_bar


def _off_if_zero(raw: str) -> float | None:
    """--max-grad-norm 0 turns clipping off."""
    value = float(raw)
    return None if value == 0 else value


RUN_FIELDS = {"device": "device=...", "progress": "progress=...", "checkpoint_every": "checkpoint_every=...",  # moved
              "resume": "resume=...", "checkpoint_dir": "output_dir=... with checkpoint_every=... or resume=True"}


@dataclass(frozen=True)
class TrainConfig:
    """The recipe: what the model learns and how, validated at construction (chapters 0, 2-5, 8).

    Every field with help text is also a flag of `bertmem train` (generated, `bertmem.flags`). Where and
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

    @classmethod
    def from_profile(cls, profile: Profile, **overrides) -> "TrainConfig":
        """The profile's recipe for a run of its own: epochs, learning rate, precision 'auto'."""
        values = dict(epochs=profile.epochs, learning_rate=profile.learning_rate, precision="auto")
        return cls(**{**values, **overrides})

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


def make_optimizer_and_scheduler(model: torch.nn.Module, config: TrainConfig, total_steps: int):
    """AdamW (or chapter 8's choice; one group or chapter 4's layer-wise groups), warmup/decay (chapter 0)."""
    from transformers import get_linear_schedule_with_warmup

    from .llrd import layerwise_param_groups

    if config.layerwise_decay is None:
        params = [p for p in model.parameters() if p.requires_grad]
    else:
        params = layerwise_param_groups(model, config.learning_rate, config.layerwise_decay, config.weight_decay)
    fused = config.optimizer == "adamw" and use_fused_adamw(config, model)
    optimizer = make_optimizer(params, config.optimizer, config.learning_rate, config.weight_decay, fused=fused)
    warmup = math.ceil(config.warmup_ratio * total_steps)
    return optimizer, get_linear_schedule_with_warmup(optimizer, warmup, total_steps)


def encoder_levers(config: TrainConfig) -> list[str]:
    """The recipe's levers that must find the encoder's layers: LoRA, frozen layers, layer-wise decay (ch. 4, 8)."""
    return [name for name in ("lora_r", "freeze_layers", "layerwise_decay") if getattr(config, name)]


def prepare_trainable(model: torch.nn.Module, config: TrainConfig) -> None:
    """Chapter 8's levers, once, before the optimizer exists: LoRA adapters, then frozen lower layers.

    In that order, adapters inside the frozen layers stay frozen too. They, and layer-wise decay, find the
    encoder through a transformers classifier's `base_model_prefix`; a model without one is refused, not
    trained with the wrong parameters frozen or grouped.
    """
    if encoder_levers(config) and not hasattr(model, "base_model_prefix"):  # e.g. chapter 9's ChunkedClassifier
        raise ValueError(f"{', '.join(encoder_levers(config))} need a transformers classifier (its "
                         f"base_model_prefix says where the encoder is); {type(model).__name__} has none: train "
                         "without them")
    if config.lora_r is not None and not has_lora(model):  # a model resumed or trained again keeps its own
        apply_lora(model, config.lora_r)
    if config.freeze_layers:
        freeze_lower_layers(model, config.freeze_layers)


def use_fused_adamw(config: TrainConfig, model: torch.nn.Module) -> bool:
    """Whether AdamW runs its fused kernel: asked for, or (None) whenever the device and dtypes allow (chapter 5)."""
    params = [p for p in model.parameters() if p.requires_grad]
    supported = (params[0].device.type in ("cuda", "cpu", "xpu", "mps")
                 and all(p.dtype in (torch.float32, torch.float16, torch.bfloat16) for p in params))
    if config.fused_optimizer and not supported:
        raise ValueError(f"fused AdamW is not available for {params[0].device.type} parameters of these dtypes: "
                         "set fused_optimizer=None or False")
    return supported if config.fused_optimizer is None else bool(config.fused_optimizer)


def prepare_run(model: torch.nn.Module, train_loader, config: TrainConfig, run: RunConfig):
    """Checks, seed, device, chapter 8's levers, checkpointing; (device, micro-batch size, steps per epoch, total)."""
    if len(train_loader) == 0:
        raise ValueError("the training loader yields no batches: the dataset is empty")
    micro_size = getattr(train_loader, "batch_size", None) or len(next(iter(train_loader))["labels"])
    check_dataset_fits(dataset_size(train_loader), micro_size * config.accumulation_steps)
    seed_everything(config.seed)
    if run.device is not None:  # asked for a device: place the model there once; helpers follow it
        model.to(require_device(run.device))
    prepare_trainable(model, config)
    if config.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    steps_per_epoch, total = optimizer_steps(len(train_loader), config.accumulation_steps, config.epochs,
                                             config.max_steps)
    return model_device(model), micro_size, steps_per_epoch, total


@stops_on_sigterm  # SIGTERM saves a checkpoint like Ctrl-C does
def train(model: torch.nn.Module, train_loader: DataLoader, config: TrainConfig,
          eval_loader: DataLoader | None = None, settings: dict[str, Any] | None = None, *,
          run: RunConfig | None = None) -> TrainResult:
    """Fine-tune with every lever of chapters 2-5 in one loop (chapter 5).

    `run`: device, progress bars, checkpoints (`RunConfig`); `settings`: what the caller
    knows (model id, dataset …), kept in checkpoints and compared on resume.
    """
    run = run or RunConfig()
    device, micro_size, per_epoch, total = prepare_run(model, train_loader, config, run)
    optimizer, scheduler = make_optimizer_and_scheduler(model, config, total)
    params = [p for p in model.parameters() if p.requires_grad]
    choice = choose_precision(config.precision, device.type, verbose=config.precision == "auto")
    autocast = functools.partial(autocast_context, choice.precision, device.type)
    scaler = torch.amp.GradScaler(device.type, enabled=choice.use_scaler)  # fp16 only
    result = TrainResult(precision=choice.precision)
    parts = dict(model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler)
    state = RunState.begin(run, config, train_loader, micro_size, result, parts, settings)
    for epoch in state.epochs(config.epochs, total):
        model.train()
        batches = state.batches(epoch)  # resumed mid-epoch: the rest of it
        desc, done = f"epoch {epoch}/{config.epochs}", state.done // config.accumulation_steps
        bar = progress_bar(None, desc, run.progress, total=per_epoch, initial=done)
        with state.saved_on_interrupt():  # Ctrl-C, SIGTERM: save the last step
            for window in windows(batches, config.accumulation_steps):
                started = time.perf_counter()
                loss, splits = backward_with_backoff(model, window, device, config.loss_weighting, state.splits,
                                                     config.oom_backoff, scale=scaler.scale, autocast=autocast)
                record = {"step": state.step + 1, "epoch": epoch, "loss": loss}
                scaler.unscale_(optimizer)  # true gradients, before clipping
                if config.max_grad_norm is not None:
                    record["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm))
                if config.guard_non_finite and not choice.use_scaler:
                    check_finite(state.step + 1, loss, model, optimizer)
                scale = scaler.get_scale()
                scaler.step(optimizer)  # skipped when an fp16 gradient is inf or NaN
                scaler.update()
                if scaler.get_scale() >= scale:  # stepped: the schedule moves on
                    scheduler.step()
                else:
                    result.skipped_steps += 1
                if choice.use_scaler:
                    record["loss_scale"] = scaler.get_scale()
                optimizer.zero_grad(set_to_none=True)
                synchronize(device)  # a GPU's queued kernels belong to this step's time
                record.update(step_time_s=time.perf_counter() - started, lr=scheduler.get_last_lr()[0])
                result.history.append(record)
                bar.set_postfix(loss=f"{loss:.3f}", refresh=False)
                bar.update(1)
                state.on_step(window, splits)  # where the run stands; checkpoints
                if state.step >= total:
                    break
            bar.close()
            record = state.epoch_record(epoch)
            if eval_loader is not None:  # a stop here resumes to evaluate
                record.update(evaluate_into(result, model, eval_loader, run.progress))
            result.epochs.append(record)
            state.on_epoch(epoch)  # a checkpoint at every epoch's end
    return result
