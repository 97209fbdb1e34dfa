"""The fine-tuning loop: AdamW, warmup + decay, accumulation, precision, LLRD, checkpoints (chapters 0, 2–5)."""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch.utils.data import DataLoader

from .accumulation import WEIGHTINGS, backward_with_backoff, check_dataset_fits, optimizer_steps, windows
from .models import enable_gradient_checkpointing
from .checkpoint import (capture_rng, check_resume_settings, dataset_fingerprint, load_checkpoint, load_model_state,
                         restore_rng, save_checkpoint)
from .baseline import TrainResult, evaluate  # noqa: F401  (chapter 0's pieces, re-exported for callers)
from .batching import dataset_size, epoch_batches
from .footprint import OPTIMIZER_NAMES, apply_lora, freeze_lower_layers, has_lora, make_optimizer
from .devices import model_device, require_device, synchronize
from .interrupts import TrainingInterrupted, interruption, stops_on_sigterm
from .precision import REQUESTS, MixedPrecision, check_finite, choose_precision
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
    learning_rate: float = field(default=5e-5, metadata={"help": "peak learning rate", "flag": "--lr"})
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


def prepare_trainable(model: torch.nn.Module, config: TrainConfig) -> None:
    """Chapter 8's levers, once, before the optimizer exists: LoRA adapters, then frozen lower layers.

    In that order, adapters inside the frozen layers stay frozen too.
    """
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


def run_settings(config: TrainConfig, train_loader, micro_size: int, extra: dict | None = None) -> dict[str, Any]:
    """What a checkpoint must match to resume: the recipe, the batch and the data's identity (chapter 5)."""
    dataset = getattr(train_loader, "dataset", None)
    settings = dict(asdict(config), micro_batch_size=micro_size, train_examples=dataset_size(train_loader),
                    data_fingerprint=dataset_fingerprint(dataset if dataset is not None else train_loader))
    settings.update(extra or {})
    return settings


@stops_on_sigterm  # SIGTERM saves a checkpoint like Ctrl-C does
def train(model: torch.nn.Module, train_loader: DataLoader, config: TrainConfig,
          eval_loader: DataLoader | None = None, settings: dict[str, Any] | None = None, *,
          run: RunConfig | None = None) -> TrainResult:
    """Fine-tune: micro-batch windows (ch. 2), autocast + scaler (ch. 3), layer-wise LRs (ch. 4), checkpoints (ch. 5).

    `run`: device, progress bars and checkpoints (`RunConfig`; default: the model's device, bars, no
    checkpoints; with `checkpoint_every` or `resume`, checkpoint.pt lives in `run.output_dir`).
    `settings`: what the caller knows about the run (model id, dataset name …), stored in checkpoints and
    compared on resume together with the recipe and the data's fingerprint.
    """
    run = run or RunConfig()
    folder = run.checkpoint_dir
    if len(train_loader) == 0:
        raise ValueError("the training loader yields no batches: the dataset is empty")
    micro_size = getattr(train_loader, "batch_size", None) or len(next(iter(train_loader))["labels"])
    check_dataset_fits(dataset_size(train_loader), micro_size * config.accumulation_steps)
    seed_everything(config.seed)
    if run.device is not None:  # asked for a device: place the model there once; helpers follow it
        model.to(require_device(run.device))
    device = model_device(model)
    prepare_trainable(model, config)
    if config.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    steps_per_epoch, total = optimizer_steps(len(train_loader), config.accumulation_steps, config.epochs,
                                             config.max_steps)
    optimizer, scheduler = make_optimizer_and_scheduler(model, config, total)
    params = [p for p in model.parameters() if p.requires_grad]
    choice = choose_precision(config.precision, device.type, verbose=config.precision == "auto")
    amp = MixedPrecision(choice)
    result = TrainResult(precision=choice.precision)
    generator = getattr(train_loader, "generator", None)  # a shuffled DataLoader's order comes from it
    pos = {"epoch": 1, "micro_batches": 0, "step": 0, "seen": 0, "splits": 1, "skipped": 0, "elapsed_s": 0.0,
           "generator": generator.get_state() if generator is not None else None}
    rng = None
    extra_settings, settings = settings, {}
    if folder:
        settings = run_settings(config, train_loader, micro_size, extra_settings)
    if settings:
        settings["precision_used"] = choice.precision  # 'auto' can resolve differently on another card
    if run.resume:
        ckpt = load_checkpoint(folder)
        check_resume_settings(ckpt["settings"], settings, folder)
        load_model_state(model, ckpt["model"], folder)
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        if ckpt["scaler"] is not None:
            amp.scaler.load_state_dict(ckpt["scaler"])
        pos, rng, result.history, result.epochs = ckpt["position"], ckpt["rng"], ckpt["history"], ckpt["epochs"]
        amp.skipped_steps = pos["skipped"]

    last_saved: list[dict] = []  # the position most recently written (an interrupt need not write it twice)

    def checkpoint(position: dict, rng_state: dict) -> None:
        try:
            save_checkpoint(folder, model=model, optimizer=optimizer, scheduler=scheduler,
                            scaler=amp.scaler if choice.use_scaler else None, rng=rng_state,
                            position=dict(position, skipped=amp.skipped_steps), history=result.history,
                            epochs=result.epochs, settings=settings)
        except TrainingInterrupted:  # a SIGTERM that waited for the save: the file is complete
            last_saved[:] = [position]
            raise
        last_saved[:] = [position]

    step, splits = pos["step"], pos["splits"]
    for epoch in range(pos["epoch"], config.epochs + 1):
        if step >= total:
            break
        model.train()
        if generator is not None and pos["generator"] is not None:
            generator.set_state(pos["generator"])  # the order this epoch had when it first ran
        start, done, seen = time.perf_counter(), pos["micro_batches"], pos["seen"]
        before = pos.get("elapsed_s", 0.0)  # this epoch's training time before an interruption
        batches = epoch_batches(train_loader, epoch, skip=done)
        if rng is not None:
            restore_rng(rng)  # after the loader drew its seeds: the run continues exactly
            rng = None
        boundary = dict(pos, epoch=epoch, micro_batches=done, step=step, seen=seen, splits=splits)
        boundary_rng = capture_rng() if folder else None
        # counted by hand: a bar that wraps the iterator counts an item only when asked for the next one
        bar = progress_bar(None, f"epoch {epoch}/{config.epochs}", enabled=run.progress, total=steps_per_epoch,
                           initial=done // config.accumulation_steps)
        try:
            for window in windows(batches, config.accumulation_steps):
                step_start = time.perf_counter()
                loss, new_splits = backward_with_backoff(model, window, device, config.loss_weighting, splits,
                                                         config.oom_backoff, scale=amp.scale, autocast=amp.autocast)
                if new_splits != splits:
                    result.backoffs.append({"step": step + 1, "splits": new_splits})
                    splits = new_splits
                record = {"step": step + 1, "epoch": epoch, "loss": loss}
                amp.unscale_(optimizer)  # no-op without a scaler; before clipping, once per optimizer step
                if config.max_grad_norm is not None:  # on the summed, unscaled gradient
                    record["grad_norm"] = float(torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm))
                if config.guard_non_finite and not choice.use_scaler:
                    check_finite(step + 1, loss, model, optimizer)
                if amp.step(optimizer):
                    scheduler.step()
                if choice.use_scaler:
                    record["loss_scale"] = amp.scale_history[-1]
                optimizer.zero_grad(set_to_none=True)
                synchronize(device)  # a GPU's queued kernels belong to this step's time
                record["step_time_s"] = time.perf_counter() - step_start  # compute only: no data loading
                step, done = step + 1, done + len(window)
                seen += sum(len(micro["labels"]) for micro in window)
                record["lr"] = scheduler.get_last_lr()[0]
                result.history.append(record)
                bar.set_postfix(loss=f"{loss:.3f}", refresh=False)  # shown at the next timed redraw
                bar.update(1)
                if folder:
                    boundary = dict(boundary, micro_batches=done, step=step, seen=seen, splits=splits,
                                    elapsed_s=before + time.perf_counter() - start)
                    boundary_rng = capture_rng()
                    if run.checkpoint_every and step % run.checkpoint_every == 0:
                        checkpoint(boundary, boundary_rng)
                if step >= total:
                    break
            bar.close()
            elapsed = before + time.perf_counter() - start
            record = {"epoch": epoch, "train_time_s": elapsed, "examples": seen, "examples_per_s": seen / elapsed}
            if eval_loader is not None:  # interrupted here: the resumed run skips the trained batches, evaluates
                record.update(evaluate(model, eval_loader, show_progress=run.progress))
            result.epochs.append(record)
            pos = {"epoch": epoch + 1, "micro_batches": 0, "step": step, "seen": 0, "splits": splits,
                   "elapsed_s": 0.0, "generator": generator.get_state() if generator is not None else None}
            if folder:
                boundary, boundary_rng = pos, capture_rng()
                checkpoint(pos, boundary_rng)
        except KeyboardInterrupt as stop:
            written = bool(last_saved) and last_saved[0] is boundary
            raise interruption(stop, boundary, boundary_rng, checkpoint, folder, written) from None
    result.skipped_steps = amp.skipped_steps
    return result
