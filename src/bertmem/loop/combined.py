"""The combined loop: AdamW, warmup + decay, accumulation, precision, LLRD, checkpoints (chapter 5).

Each piece is a function an earlier chapter shows: the accumulation window (2), the autocast step (3), the
layer-wise groups (4); `train` composes them."""

from __future__ import annotations

import functools
import math
import time
from typing import Any, Callable, NamedTuple

import torch
from torch.nn.utils import clip_grad_norm_
from torch.utils.data import DataLoader

from bertmem.core.devices import model_device, require_device, synchronize, use_deterministic_algorithms
from bertmem.core.interrupts import stops_on_sigterm
from bertmem.core.runtime import progress as progress_bar
from bertmem.core.runtime import seed_everything
from bertmem.data.batching import dataset_size
from bertmem.loop.accumulation import backward_with_backoff, check_dataset_fits, optimizer_steps, windows
from bertmem.loop.baseline import TrainResult, evaluate_into
from bertmem.loop.class_weights import check_weighted
from bertmem.loop.config import RunConfig, TrainConfig
from bertmem.loop.optim import layerwise_param_groups, make_optimizer, rank_bytes
from bertmem.loop.precision import autocast_context, check_finite, choose_precision
from bertmem.loop.resume import RunState
from bertmem.model.adapters import apply_lora, freeze_lower_layers, has_lora
from bertmem.model.loading import enable_gradient_checkpointing


class Levers(NamedTuple):
    """The functions a chapter shows and its runs call: chapter 8's levers, chapter 4's groups; a chapter passes
    its own definitions so that an edit to them changes its results (ch. 4, 8)."""

    apply_lora: Callable[..., int] = apply_lora
    freeze_lower_layers: Callable[..., int] = freeze_lower_layers
    make_optimizer: Callable[..., torch.optim.Optimizer] = make_optimizer
    layerwise_param_groups: Callable[..., list[dict]] = layerwise_param_groups


PACKAGE_LEVERS = Levers()  # the package's own: what every run uses unless it is given others


def make_optimizer_and_scheduler(
    model: torch.nn.Module,
    config: TrainConfig,
    total_steps: int,
    levers: Levers = PACKAGE_LEVERS,
):
    """The optimizer over one group or chapter 4's layer-wise groups, and the schedule:
    linear warmup over `warmup_ratio` of the optimizer steps, then linear decay to 0."""
    from transformers import get_linear_schedule_with_warmup  # slow: imported per run

    if config.layerwise_decay is None:
        params = [p for p in model.parameters() if p.requires_grad]
    else:
        params = levers.layerwise_param_groups(
            model, config.learning_rate, config.layerwise_decay, config.weight_decay
        )
    fused = config.optimizer == "adamw" and use_fused_adamw(config, model)
    optimizer = levers.make_optimizer(
        params, config.optimizer, config.learning_rate, config.weight_decay, fused=fused
    )
    warmup = math.ceil(config.warmup_ratio * total_steps)  # counted in optimizer steps
    return optimizer, get_linear_schedule_with_warmup(optimizer, warmup, total_steps)


def encoder_levers(config: TrainConfig) -> list[str]:
    """The recipe's levers that must find the encoder's layers: LoRA, frozen layers, layer-wise decay (ch. 4, 8)."""
    return [name for name in ("lora_r", "freeze_layers", "layerwise_decay") if getattr(config, name)]


def prepare_trainable(model: torch.nn.Module, config: TrainConfig, levers: Levers = PACKAGE_LEVERS) -> None:
    """Chapter 8's levers, once, before the optimizer exists: LoRA adapters, then frozen lower layers.

    In that order, adapters inside the frozen layers stay frozen too. They, and layer-wise decay, find the
    encoder through a transformers classifier's `base_model_prefix`; a model without one is refused, not
    trained with the wrong parameters frozen or grouped.
    """
    check_weighted(model, config.class_weights)  # asked for, and hooked (A1)
    if encoder_levers(config) and not hasattr(model, "base_model_prefix"):  # e.g. chapter 9's ChunkedClassifier
        raise ValueError(f"{', '.join(encoder_levers(config))} need a transformers classifier (its "
                         f"base_model_prefix says where the encoder is); {type(model).__name__} has none: train "
                         "without them")
    if config.lora_r is not None and not has_lora(model):  # a model resumed or trained again keeps its own
        levers.apply_lora(model, config.lora_r)
    if config.freeze_layers:
        levers.freeze_lower_layers(model, config.freeze_layers)


def prepare_model(model: torch.nn.Module, config: TrainConfig, device: str | None = None,
                  levers: Levers = PACKAGE_LEVERS) -> torch.nn.Module:
    """What every backend, the bench and the estimate do before the optimizer: place the model (when a device is
    given), chapter 8's levers, gradient checkpointing (chapters 5, 8). Returns the model."""
    if device is not None:  # asked for a device: place the model there once; helpers follow it
        model.to(require_device(device))
    prepare_trainable(model, config, levers)
    if config.gradient_checkpointing:
        enable_gradient_checkpointing(model)
    return model


def use_fused_adamw(config: TrainConfig, model: torch.nn.Module) -> bool:
    """Whether AdamW runs its fused kernel: asked for, or (None) whenever the device and dtypes allow (chapter 5)."""
    params = [p for p in model.parameters() if p.requires_grad]
    supported = (params[0].device.type in ("cuda", "cpu", "xpu", "mps")
                 and all(p.dtype in (torch.float32, torch.float16, torch.bfloat16) for p in params))
    if config.fused_optimizer and not supported:
        raise ValueError(f"fused AdamW is not available for {params[0].device.type} parameters of these dtypes: "
                         "set fused_optimizer=None or False")
    return supported if config.fused_optimizer is None else bool(config.fused_optimizer)


def prepare_run(model: torch.nn.Module, train_loader, config: TrainConfig, run: RunConfig,
                levers: Levers = PACKAGE_LEVERS):
    """Checks, seed, deterministic kernels (ch. 5b), device, chapter 8's levers, checkpointing; (device, micro-batch
    size, steps per epoch, total)."""
    if len(train_loader) == 0:
        raise ValueError("the training loader yields no batches: the dataset is empty")
    micro_size = getattr(train_loader, "batch_size", None) or len(next(iter(train_loader))["labels"])
    check_dataset_fits(dataset_size(train_loader), micro_size * config.accumulation_steps)
    seed_everything(config.seed)
    use_deterministic_algorithms(config.deterministic)  # every backend sets it up here; before the first matmul
    prepare_model(model, config, run.device, levers)
    steps_per_epoch, total = optimizer_steps(len(train_loader), config.accumulation_steps, config.epochs,
                                             config.max_steps)
    return model_device(model), micro_size, steps_per_epoch, total


def optimizer_step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, scheduler, scaler: torch.amp.GradScaler,
                   config: TrainConfig, record: dict, result: TrainResult) -> None:
    """Once per window: unscale, clip, check, step; the schedule moves only when the
    step was taken (chapter 5). `record` gains the gradient norm, the learning rate and
    (fp16) the loss scale; a step the scaler skips is counted in `result`."""
    scaler.unscale_(optimizer)  # true gradients, before clipping
    if config.max_grad_norm is not None:
        record["grad_norm"] = float(clip_grad_norm_(model.parameters(), config.max_grad_norm))
    # fp16's scaler skips a step with inf or NaN gradients itself
    if config.guard_non_finite and not scaler.is_enabled():
        check_finite(record["step"], record["loss"], model, optimizer)
    scale = scaler.get_scale()
    scaler.step(optimizer)  # skipped when an fp16 gradient is inf or NaN
    scaler.update()
    if scaler.get_scale() >= scale:  # stepped: the schedule moves on
        scheduler.step()
    else:
        result.skipped_steps += 1
    if scaler.is_enabled():
        record["loss_scale"] = scaler.get_scale()
    record["lr"] = scheduler.get_last_lr()[0]
    optimizer.zero_grad(set_to_none=True)


@stops_on_sigterm  # SIGTERM saves a checkpoint like Ctrl-C does
def train(model: torch.nn.Module, train_loader: DataLoader, config: TrainConfig,
          eval_loader: DataLoader | None = None, settings: dict[str, Any] | None = None, *,
          run: RunConfig | None = None, levers: Levers = PACKAGE_LEVERS) -> TrainResult:
    """Fine-tune with every lever of chapters 2-5 in one loop (chapter 5).

    `run`: device, progress, checkpoints; `settings`: what the caller knows (model id,
    dataset …), kept in checkpoints and compared on resume; `levers`: ch. 4 and 8's.
    """
    run = run or RunConfig()
    device, micro_size, per_epoch, total = prepare_run(model, train_loader, config, run, levers)
    optimizer, scheduler = make_optimizer_and_scheduler(model, config, total, levers)
    choice = choose_precision(config.precision, device.type, verbose=config.precision == "auto")
    autocast = functools.partial(autocast_context, choice.precision, device.type)
    scaler = torch.amp.GradScaler(device.type, enabled=choice.use_scaler)  # fp16 only
    result = TrainResult(precision=choice.precision)
    parts = dict(model=model, optimizer=optimizer, scheduler=scheduler, scaler=scaler)
    state = RunState.begin(run, config, train_loader, micro_size, result, parts, settings)
    for epoch in state.epochs(config.epochs, total):
        model.train()
        batches = state.batches(epoch)  # resumed mid-epoch: the rest of it
        desc = f"epoch {epoch}/{config.epochs}"
        done = state.done // config.accumulation_steps  # resumed: steps taken
        bar = progress_bar(None, desc, run.progress, total=per_epoch, initial=done)
        with state.saved_on_interrupt():  # Ctrl-C, SIGTERM: save the last step
            for window in windows(batches, config.accumulation_steps):
                started = time.perf_counter()
                loss, splits = backward_with_backoff(model, window, device, config.loss_weighting, state.splits,
                                                     config.oom_backoff, scale=scaler.scale, autocast=autocast)
                record = {"step": state.step + 1, "epoch": epoch, "loss": loss}
                optimizer_step(model, optimizer, scheduler, scaler, config, record, result)
                synchronize(device)  # a GPU's queued kernels belong to this step's time
                record["step_time_s"] = time.perf_counter() - started
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
    result.rank_bytes = rank_bytes(model, optimizer)  # what this optimizer holds
    return result
