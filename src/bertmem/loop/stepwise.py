"""A fine-tune around a step function a page shows: chapter 3's `mixed_precision_step` drives the chapter's
precision runs through this harness, so an edit to the page's step changes the page's table (chapter 3)."""

from __future__ import annotations

import time
from typing import Callable

import torch
from torch.utils.data import DataLoader

from bertmem.loop.accumulation import windows
from bertmem.loop.baseline import TrainResult, evaluate_into
from bertmem.loop.combined import make_optimizer_and_scheduler, prepare_run
from bertmem.loop.config import RunConfig, TrainConfig
from bertmem.loop.precision import choose_precision

# step(model, micro_batches, optimizer, scaler, dtype, max_grad_norm) -> the window's loss
Step = Callable[..., float]


def train_with_step(step: Step, model: torch.nn.Module, train_loader: DataLoader, config: TrainConfig,
                    eval_loader: DataLoader | None = None, run: RunConfig | None = None) -> TrainResult:
    """Fine-tune by calling `step` once per optimizer step, with `train`'s optimizer, schedule and windows (ch. 3).

    The optimizer and its warmup schedule come from `make_optimizer_and_scheduler`; the scaler is on for fp16
    only. A step the scaler skipped (its scale fell) does not move the schedule, and is counted. What the step does
    with the window is the step's: the recipe's loss weighting, out-of-memory back-off and non-finite guard are
    `train`'s, and a recipe that asks for them is refused here. History keeps each step's loss only.
    """
    if config.oom_backoff or config.loss_weighting != "examples":
        raise ValueError("train_with_step runs the step it is given: oom_backoff and loss_weighting are train's; "
                         "use train for them")
    run = run or RunConfig(progress=False)
    device, _, _, total = prepare_run(model, train_loader, config, run)
    choice = choose_precision(config.precision, device.type, verbose=False)
    optimizer, scheduler = make_optimizer_and_scheduler(model, config, total)
    scaler = torch.amp.GradScaler(device.type, enabled=choice.use_scaler)
    result = TrainResult(precision=choice.precision)
    for epoch in range(1, config.epochs + 1):
        if len(result.history) >= total:  # max_steps reached in an earlier epoch
            break
        model.train()
        started, seen = time.perf_counter(), 0
        for window in windows(train_loader, config.accumulation_steps):
            scale = scaler.get_scale()
            loss = step(model, window, optimizer, scaler, choice.dtype, config.max_grad_norm)
            if scaler.get_scale() < scale:  # the scaler skipped this step
                result.skipped_steps += 1
            else:
                scheduler.step()
            seen += sum(len(micro["labels"]) for micro in window)
            result.history.append({"step": len(result.history) + 1, "epoch": epoch, "loss": loss})
            if len(result.history) >= total:
                break
        elapsed = time.perf_counter() - started
        record = {"epoch": epoch, "train_time_s": elapsed, "examples": seen, "examples_per_s": seen / elapsed}
        if eval_loader is not None:
            record.update(evaluate_into(result, model, eval_loader, run.progress))
        result.epochs.append(record)
    return result
