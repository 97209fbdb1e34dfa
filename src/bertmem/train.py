"""The fine-tuning loop: AdamW, warmup + decay, accumulation, precision, LLRD, checkpoints (chapters 0, 2–5)."""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable

import numpy as np
import torch
from torch.utils.data import DataLoader

from .accumulation import WEIGHTINGS, backward_with_backoff, check_dataset_fits, windows
from .models import enable_gradient_checkpointing
from .checkpoint import (capture_rng, check_resume_settings, load_checkpoint, load_model_state, restore_rng,
                         save_checkpoint)
from .data import dataset_fingerprint
from .devices import model_device, move_to, require_device, resolve_device, synchronize
from .interrupts import TrainingInterrupted, stops_on_sigterm
from .precision import REQUESTS, MixedPrecision, check_finite, choose_precision
from .profile import progress as progress_bar
from .profile import seed_everything


@dataclass
class TrainConfig:
    """Settings of the baseline loop, validated at construction (chapter 0)."""

    epochs: int = 1
    learning_rate: float = 5e-5
    weight_decay: float = 0.01
    warmup_ratio: float = 0.1
    seed: int = 0
    device: str | None = None  # None: wherever the model already is (place it once, chapter 0)
    max_steps: int | None = None  # stop early after this many optimizer steps (tests, demos)
    progress: bool = True
    layerwise_decay: float | None = None  # chapter 4: None = one AdamW group; 1.0 = groups without decay
    accumulation_steps: int = 1  # chapter 2: micro-batches per optimizer step
    loss_weighting: str = "examples"  # chapter 2: "examples" or "tokens" (token-level losses)
    max_grad_norm: float | None = 1.0  # clip once per optimizer step (after unscaling); None = no clipping
    precision: str = "fp32"  # chapter 3: "auto", "fp32", "bf16" or "fp16" (+ GradScaler)
    guard_non_finite: bool = True  # chapter 3: stop with a diagnosis on NaN/inf the scaler does not handle
    gradient_checkpointing: bool = False  # chapter 5: recompute each layer in backward instead of saving it
    fused_optimizer: bool | None = None  # chapter 5: fused AdamW kernel; None = where the device supports it
    checkpoint_dir: str | None = None  # chapter 5: folder for checkpoint.pt (saved on Ctrl-C and each epoch)
    checkpoint_every: int | None = None  # chapter 5: also save every N optimizer steps
    resume: bool = False  # chapter 5: continue from checkpoint_dir/checkpoint.pt
    oom_backoff: bool = False  # chapter 5: on out-of-memory halve the micro-batch, double the accumulation

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
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1 or None, got {self.max_steps}")
        every = self.checkpoint_every
        if every is not None and (not isinstance(every, int) or every < 1):
            raise ValueError(f"checkpoint_every must be an int >= 1 or None, got {self.checkpoint_every!r}")
        if (self.checkpoint_every is not None or self.resume) and not self.checkpoint_dir:
            raise ValueError("checkpoint_every and resume need checkpoint_dir: the folder that holds checkpoint.pt")
        if self.device is not None:
            try:
                torch.device(self.device)
            except RuntimeError as err:
                raise ValueError(f"device {self.device!r} is not a torch device: use 'cpu' or 'cuda'") from err


@dataclass
class TrainResult:
    """What a run produced: per-step history, per-epoch metrics and timing; plots itself (chapter 0)."""

    # per optimizer step: step, epoch, loss, lr, step_time_s (and grad_norm, loss_scale when they apply)
    history: list[dict[str, float]] = field(default_factory=list)
    epochs: list[dict[str, float]] = field(default_factory=list)  # epoch, train_time_s, examples_per_s, metrics
    precision: str = "fp32"
    skipped_steps: int = 0  # optimizer steps the fp16 loss scaler skipped after an overflow
    backoffs: list[dict[str, int]] = field(default_factory=list)  # out-of-memory back-offs (chapter 5)
    num_processes: int = 1  # data-parallel processes (Accelerate, chapter 7)
    rank: int = 0  # this process's index among them
    rank_bytes: dict[str, int] | None = None  # this process's parameter/optimizer bytes (Accelerate, chapter 7)

    @property
    def final_metrics(self) -> dict[str, float]:
        """Metrics of the last evaluated epoch (empty when no evaluation ran)."""
        return self.epochs[-1] if self.epochs else {}

    @property
    def losses(self) -> list[float]:
        """The training loss of every optimizer step."""
        return [h["loss"] for h in self.history]

    def plot(self, ax=None, smooth: int = 10, label: str | None = None):
        """Loss per optimizer step, raw and smoothed by a running mean over `smooth` steps."""
        import matplotlib.pyplot as plt

        ax = ax or plt.subplots(figsize=(7, 3.5))[1]
        steps = [h["step"] for h in self.history]
        line, = ax.plot(steps, self.losses, alpha=0.3, label=None)
        if len(self.losses) >= smooth > 1:
            kernel = np.ones(smooth) / smooth
            ax.plot(steps[smooth - 1:], np.convolve(self.losses, kernel, mode="valid"), color=line.get_color(),
                    label=label or f"running mean ({smooth} steps)")
            ax.legend()
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("training loss (cross-entropy, nats)")
        ax.grid(alpha=0.3)
        return ax


@torch.no_grad()
def evaluate(model: torch.nn.Module, loader: Iterable[dict], device: str | None = None,
             show_progress: bool = False) -> dict[str, float]:
    """Accuracy, macro-F1 (scikit-learn) and mean loss over a loader, on the model's device (chapter 0)."""
    from sklearn.metrics import accuracy_score, f1_score

    device = resolve_device(model, device)
    model.eval()
    preds, labels, losses, counts = [], [], [], []
    for batch in progress_bar(loader, "eval", enabled=show_progress, leave=False):
        batch = move_to(batch, device)
        out = model(**batch)
        preds.append(out.logits.argmax(-1).cpu())
        labels.append(batch["labels"].cpu())
        losses.append(float(out.loss) * len(batch["labels"]))
        counts.append(len(batch["labels"]))
    y_pred, y_true = torch.cat(preds).numpy(), torch.cat(labels).numpy()
    return {"accuracy": float(accuracy_score(y_true, y_pred)),
            "macro_f1": float(f1_score(y_true, y_pred, average="macro")),
            "eval_loss": sum(losses) / sum(counts)}


def make_optimizer_and_scheduler(model: torch.nn.Module, config: TrainConfig, total_steps: int):
    """AdamW (one group, or chapter 4's layer-wise groups) plus linear warmup/decay (chapter 0)."""
    from transformers import get_linear_schedule_with_warmup

    from .llrd import layerwise_param_groups

    if config.layerwise_decay is None:
        params = [p for p in model.parameters() if p.requires_grad]
    else:
        params = layerwise_param_groups(model, config.learning_rate, config.layerwise_decay, config.weight_decay)
    optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay,
                                  fused=use_fused_adamw(config, model))
    warmup = math.ceil(config.warmup_ratio * total_steps)
    return optimizer, get_linear_schedule_with_warmup(optimizer, warmup, total_steps)


def use_fused_adamw(config: TrainConfig, model: torch.nn.Module) -> bool:
    """Whether AdamW runs its fused kernel: asked for, or (None) whenever the device and dtypes allow (chapter 5)."""
    params = [p for p in model.parameters() if p.requires_grad]
    supported = (params[0].device.type in ("cuda", "cpu", "xpu", "mps")
                 and all(p.dtype in (torch.float32, torch.float16, torch.bfloat16) for p in params))
    if config.fused_optimizer and not supported:
        raise ValueError(f"fused AdamW is not available for {params[0].device.type} parameters of these dtypes: "
                         "set fused_optimizer=None or False")
    return supported if config.fused_optimizer is None else bool(config.fused_optimizer)


def dataset_size(loader) -> int:
    """Examples in a loader: len(dataset) for a DataLoader, else the labels of a list of batches."""
    dataset = getattr(loader, "dataset", None)
    return len(dataset) if dataset is not None else sum(len(b["labels"]) for b in loader)


def epoch_batches(loader, epoch: int, skip: int = 0):
    """The loader's batches for `epoch`, without the first `skip` (already trained on) (chapter 5)."""
    sampler = getattr(loader, "batch_sampler", None)
    if hasattr(sampler, "set_epoch"):
        sampler.set_epoch(epoch)
    return itertools.islice(iter(loader), skip, None)


def run_settings(config: TrainConfig, train_loader, micro_size: int, extra: dict | None = None) -> dict[str, Any]:
    """What a checkpoint must match to resume: the recipe, the batch and the data's identity (chapter 5)."""
    dataset = getattr(train_loader, "dataset", None)
    settings = dict(asdict(config), micro_batch_size=micro_size, train_examples=dataset_size(train_loader),
                    data_fingerprint=dataset_fingerprint(dataset if dataset is not None else train_loader))
    settings.update(extra or {})
    return settings


@stops_on_sigterm  # SIGTERM saves a checkpoint like Ctrl-C does
def train(model: torch.nn.Module, train_loader: DataLoader, config: TrainConfig,
          eval_loader: DataLoader | None = None, settings: dict[str, Any] | None = None) -> TrainResult:
    """Fine-tune: micro-batch windows (ch. 2), autocast + scaler (ch. 3), layer-wise LRs (ch. 4), checkpoints (ch. 5).

    `settings`: what the caller knows about the run (model id, dataset name …), stored in checkpoints and
    compared on resume together with the recipe and the data's fingerprint.
    """
    if len(train_loader) == 0:
        raise ValueError("the training loader yields no batches: the dataset is empty")
    micro_size = getattr(train_loader, "batch_size", None) or len(next(iter(train_loader))["labels"])
    check_dataset_fits(dataset_size(train_loader), micro_size * config.accumulation_steps)
    seed_everything(config.seed)
    if config.device is not None:  # asked for a device: place the model there once; helpers follow it
        model.to(require_device(config.device))
    device = model_device(model)
    if config.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    steps_per_epoch = math.ceil(len(train_loader) / config.accumulation_steps)
    total = config.epochs * steps_per_epoch
    total = min(total, config.max_steps) if config.max_steps else total
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
    if config.checkpoint_dir:
        settings = run_settings(config, train_loader, micro_size, extra_settings)
    if settings:
        settings["precision_used"] = choice.precision  # 'auto' can resolve differently on another card
    if config.resume:
        ckpt = load_checkpoint(config.checkpoint_dir)
        check_resume_settings(ckpt["settings"], settings, config.checkpoint_dir)
        load_model_state(model, ckpt["model"], config.checkpoint_dir)
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        if ckpt["scaler"] is not None:
            amp.scaler.load_state_dict(ckpt["scaler"])
        pos, rng, result.history, result.epochs = ckpt["position"], ckpt["rng"], ckpt["history"], ckpt["epochs"]
        amp.skipped_steps = pos["skipped"]

    last_saved: list[dict] = []  # the position most recently written (an interrupt need not write it twice)

    def checkpoint(position: dict, rng_state: dict) -> None:
        try:
            save_checkpoint(config.checkpoint_dir, model=model, optimizer=optimizer, scheduler=scheduler,
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
        boundary_rng = capture_rng() if config.checkpoint_dir else None
        # counted by hand: a bar that wraps the iterator counts an item only when asked for the next one
        bar = progress_bar(None, f"epoch {epoch}/{config.epochs}", enabled=config.progress, total=steps_per_epoch,
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
                if config.checkpoint_dir:
                    boundary = dict(boundary, micro_batches=done, step=step, seen=seen, splits=splits,
                                    elapsed_s=before + time.perf_counter() - start)
                    boundary_rng = capture_rng()
                    if config.checkpoint_every and step % config.checkpoint_every == 0:
                        checkpoint(boundary, boundary_rng)
                if step >= total:
                    break
            bar.close()
            elapsed = before + time.perf_counter() - start
            record = {"epoch": epoch, "train_time_s": elapsed, "examples": seen, "examples_per_s": seen / elapsed}
            if eval_loader is not None:  # interrupted here: the resumed run skips the trained batches, evaluates
                record.update(evaluate(model, eval_loader, show_progress=config.progress))
            result.epochs.append(record)
            pos = {"epoch": epoch + 1, "micro_batches": 0, "step": step, "seen": 0, "splits": splits,
                   "elapsed_s": 0.0, "generator": generator.get_state() if generator is not None else None}
            if config.checkpoint_dir:
                boundary, boundary_rng = pos, capture_rng()
                checkpoint(pos, boundary_rng)
        except KeyboardInterrupt as stop:
            written = bool(last_saved) and last_saved[0] is boundary
            raise interruption(stop, boundary, boundary_rng, checkpoint, config, written) from None
    result.skipped_steps = amp.skipped_steps
    return result


def interruption(stop: KeyboardInterrupt, boundary: dict, rng_state, checkpoint, config: TrainConfig,
                 written: bool = False) -> TrainingInterrupted:
    """Save the last finished optimizer step (unless `written`) and say where it is (Ctrl-C or SIGTERM) (ch. 5)."""
    name = getattr(stop, "signal_name", "SIGINT")
    label = "Ctrl-C" if name == "SIGINT" else name
    if not config.checkpoint_dir:
        return TrainingInterrupted(f"interrupted by {label} after optimizer step {boundary['step']}; no checkpoint "
                                   "was kept (set checkpoint_dir, or --checkpoint-every, to keep progress)", name)
    if not written:
        checkpoint(boundary, rng_state)
    return TrainingInterrupted(f"interrupted by {label}: saved a checkpoint at optimizer step {boundary['step']} "
                               f"in {config.checkpoint_dir}; run again with resume=True (--resume) to continue", name)
