"""The same recipe through Hugging Face Accelerate: one GPU, many GPUs (DDP/FSDP), DeepSpeed (chapters 5b and 7)."""

from __future__ import annotations

import time

import torch

from bertmem.core.devices import cuda_available, model_device, use_deterministic_algorithms
from bertmem.core.runtime import progress as progress_bar
from bertmem.loop.accumulation import optimizer_steps
from bertmem.loop.baseline import TrainResult, evaluate
from bertmem.loop.combined import make_optimizer_and_scheduler, prepare_model
from bertmem.loop.config import RunConfig, TrainConfig
from bertmem.loop.optim import rank_bytes
from bertmem.loop.precision import choose_precision
from bertmem.model.loading import find_encoder_layers

ACCELERATE_PRECISION = {"fp32": "no", "bf16": "bf16", "fp16": "fp16"}


def accelerator_for(config: TrainConfig, device: str | None = None, **kwargs):
    """An `Accelerator` with the config's accumulation and precision on `device`; kwargs pass through (ch. 5b)."""
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState

    AcceleratorState._reset_state()  # a second run in one process may change precision (the process group stays)
    GradientState._reset_state()
    wanted = device or ("cuda" if cuda_available() else "cpu")  # Accelerate places the model
    device_type = "cuda" if cuda_available() and not wanted.startswith("cpu") else "cpu"
    choice = choose_precision(config.precision, device_type, verbose=False)
    return Accelerator(gradient_accumulation_steps=config.accumulation_steps,
                       mixed_precision=ACCELERATE_PRECISION[choice.precision], cpu=device_type == "cpu", **kwargs)


def fsdp_launched() -> bool:
    """This process was started by `accelerate launch --use_fsdp` (chapter 7)."""
    import os

    return os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true"


def fsdp_requested_on_cpu(accelerator) -> bool:
    """`accelerate launch --use_fsdp` on CPU processes: Accelerate falls back to plain MULTI_CPU (DDP) there."""
    from accelerate.utils import DistributedType

    return fsdp_launched() and accelerator.distributed_type == DistributedType.MULTI_CPU


def shard_with_fsdp2(model: torch.nn.Module) -> torch.nn.Module:
    """FSDP2 by hand: `fully_shard` every encoder layer, then the rest of the model (chapter 7, CPU processes)."""
    from torch.distributed.fsdp import fully_shard


    for layer in find_encoder_layers(model)[1]:
        fully_shard(layer)
    fully_shard(model)
    return model


def check_deepspeed_clipping(accelerator, config: TrainConfig) -> None:
    """Refuse a recipe whose clipping DeepSpeed would not apply (chapter 5b).

    Under DeepSpeed the engine clips with its config's `gradient_clipping` and `clip_grad_norm_` does nothing;
    Accelerate fills an "auto" there with 1.0, not with the recipe's `max_grad_norm`.
    """
    plugin = getattr(accelerator.state, "deepspeed_plugin", None)
    if plugin is None:
        return
    clipping = plugin.deepspeed_config.get("gradient_clipping")
    if clipping == "auto" or (clipping or None) != config.max_grad_norm:
        flag = "none" if not clipping else clipping  # --max-grad-norm takes a number > 0, or none
        other = "" if clipping == "auto" else f", or pass --max-grad-norm {flag}"
        raise ValueError(f"the DeepSpeed config clips gradients at {clipping!r} and the recipe at "
                         f"{config.max_grad_norm}; DeepSpeed applies only its own value: set gradient_clipping "
                         f"in the DeepSpeed config to {config.max_grad_norm or 0} (0: no clipping){other}")


def train_with_accelerate(model: torch.nn.Module, train_loader, config: TrainConfig, eval_loader=None,
                          accelerator=None, *, run: RunConfig | None = None) -> TrainResult:
    """`train` written the Accelerate way: `prepare`, `accumulate`, `backward`, `clip_grad_norm_` (chapter 5b).

    The scheduler is stepped by hand once per optimizer step, so its length is the same for one or many
    processes. Accelerate divides each micro-batch loss by the accumulation steps (a mean of means): exact
    when the micro-batches of a window are equally large, unlike `train`'s example weighting (chapter 2).
    """
    from accelerate.utils import set_seed

    run = run or RunConfig()
    if run.checkpoint_dir or config.oom_backoff:
        raise ValueError("checkpoint/resume and oom_backoff are features of bertmem.loop.train; with Accelerate "
                         "use accelerator.save_state/load_state and choose the micro-batch yourself")
    # the device follows the model (or run.device): on a GPU machine a CPU model stays on the CPU, like train's
    accelerator = accelerator or accelerator_for(config, run.device or model_device(model).type)
    check_deepspeed_clipping(accelerator, config)
    set_seed(config.seed)
    use_deterministic_algorithms(config.deterministic)  # as train and the Trainer do (chapter 5b)
    prepare_model(model, config)  # chapter 8's levers and checkpointing, before the optimizer
    _, total = optimizer_steps(len(train_loader), config.accumulation_steps, config.epochs, config.max_steps,
                               processes=accelerator.num_processes)
    if fsdp_requested_on_cpu(accelerator):  # shard ourselves; Accelerate would wrap the model in DDP
        model = shard_with_fsdp2(model)
        optimizer, scheduler = make_optimizer_and_scheduler(model, config, total)
        optimizer, loader = accelerator.prepare(optimizer, train_loader)
    else:
        optimizer, scheduler = make_optimizer_and_scheduler(model, config, total)
        model, optimizer, loader = accelerator.prepare(model, optimizer, train_loader)
    # the book's name for the precision (Accelerate calls fp32 "no")
    result = TrainResult(precision={v: k for k, v in ACCELERATE_PRECISION.items()}[accelerator.mixed_precision])
    step, window_loss = 0, torch.zeros((), device=accelerator.device)
    for epoch in range(1, config.epochs + 1):
        model.train()
        if hasattr(loader, "set_epoch"):
            loader.set_epoch(epoch)
        start, seen = time.perf_counter(), 0
        bar = progress_bar(loader, f"epoch {epoch}/{config.epochs}",
                           enabled=run.progress and accelerator.is_main_process)
        for batch in bar:
            with accelerator.accumulate(model):
                loss = model(**batch).loss
                window_loss += loss.detach().float() / config.accumulation_steps
                accelerator.backward(loss)
                record = {"step": step + 1, "epoch": epoch}
                if accelerator.sync_gradients and config.max_grad_norm is not None:
                    norm = accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm)
                    record["grad_norm"] = float(getattr(norm, "full_tensor", lambda: norm)())  # DTensor under FSDP
                optimizer.step()
                if accelerator.sync_gradients and not accelerator.optimizer_step_was_skipped:
                    scheduler.step()
                optimizer.zero_grad(set_to_none=True)
            seen += len(batch["labels"]) * accelerator.num_processes
            if not accelerator.sync_gradients:
                continue
            step += 1
            record["loss"] = float(accelerator.reduce(window_loss, reduction="mean"))
            record["lr"] = scheduler.get_last_lr()[0]
            result.history.append(record)
            window_loss.zero_()
            if step >= total:
                break
        bar.close()  # after a break too: the final line now, not when the generator is collected
        elapsed = time.perf_counter() - start
        record = {"epoch": epoch, "train_time_s": elapsed, "examples": seen, "examples_per_s": seen / elapsed}
        result.rank_bytes = rank_bytes(model, optimizer)  # before evaluation: FSDP2 keeps the root unsharded after it
        if eval_loader is not None:
            record.update(evaluate(model, eval_loader, show_progress=False))  # on the model's device
            if hasattr(model, "reshard"):  # FSDP2: give the gathered root weights back
                model.reshard()
        result.epochs.append(record)
        if step >= total:
            break
    result.num_processes, result.rank = accelerator.num_processes, accelerator.process_index
    return result
