"""Hugging Face Trainer: the accumulation check and its workaround, the recipe through Trainer (chapters 2, 4, 5)."""

from __future__ import annotations

import math
import tempfile
from typing import Callable

import torch

from bertmem.core.devices import cuda_available, model_device, use_deterministic_algorithms
from bertmem.loop.accumulation import optimizer_steps
from bertmem.loop.baseline import TrainResult
from bertmem.loop.combined import make_optimizer_and_scheduler, prepare_trainable
from bertmem.loop.config import RunConfig
from bertmem.loop.precision import choose_precision


def trainer_first_step(model_fn: Callable[[], torch.nn.Module], batch: dict[str, torch.Tensor],
                       micro_batch: int, accumulation_steps: int, workaround: bool = False,
                       seed: int = 0) -> dict[str, float]:
    """Loss and pre-clipping grad norm that `transformers.Trainer` logs for its first optimizer step (chapter 2).

    With workaround=True the Trainer is told the model does not take `num_items_in_batch`
    (`trainer.model_accepts_loss_kwargs = False`), which restores the mean over the effective batch.
    """
    from datasets import Dataset
    from transformers import Trainer, TrainingArguments

    n = len(batch["labels"])
    if micro_batch * accumulation_steps != n:
        raise ValueError(f"micro_batch × accumulation_steps must equal the batch ({n}), "
                         f"got {micro_batch} × {accumulation_steps}")
    data = Dataset.from_dict({k: v.tolist() for k, v in batch.items()})
    args = TrainingArguments(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=micro_batch,
                             gradient_accumulation_steps=accumulation_steps, max_steps=1, logging_steps=1,
                             report_to="none", use_cpu=not cuda_available(), disable_tqdm=True,
                             save_strategy="no", max_grad_norm=1e9, dataloader_drop_last=False)
    torch.manual_seed(seed)  # the same initial weights for every call
    trainer = Trainer(model=model_fn(), args=args, train_dataset=data)
    if workaround:
        trainer.model_accepts_loss_kwargs = False
    trainer.train()
    log = next(h for h in trainer.state.log_history if "grad_norm" in h)
    return {"loss": float(log["loss"]), "grad_norm": float(log["grad_norm"])}


def checkpointing_arguments(enabled: bool) -> dict:
    """TrainingArguments for activation checkpointing under its transformers-5 name (or the old one)."""
    from dataclasses import fields

    from transformers import TrainingArguments

    name = "activation_checkpointing" if "activation_checkpointing" in {f.name for f in fields(TrainingArguments)} \
        else "gradient_checkpointing"
    return {name: enabled, f"{name}_kwargs": {"use_reentrant": False}}


def train_with_trainer(model: torch.nn.Module, train_loader, config, output_dir: str | None = None, *,
                       run: RunConfig | None = None):
    """The recipe through `transformers.Trainer`: our loader, our (layer-wise) AdamW + schedule, the fix (chapter 5b).

    Returns a `TrainResult` built from the Trainer's log so the three ways of running compare directly.
    `run` (a `RunConfig`): device and progress bars; its checkpoints are `train`'s, not the Trainer's.
    The accumulation fix of chapter 2 (`model_accepts_loss_kwargs = False`) is applied.
    """
    from transformers import Trainer, TrainingArguments


    run = run or RunConfig()
    if run.checkpoint_dir or config.oom_backoff:
        raise ValueError("checkpoint_every/resume/oom_backoff belong to bertmem.loop.train; the Trainer has its "
                         "own save_strategy and resume_from_checkpoint")
    device_type = torch.device(run.device).type if run.device else model_device(model).type
    device_type = "cuda" if device_type == "cuda" else "cpu"
    choice = choose_precision(config.precision, device_type, verbose=False)
    _, total = optimizer_steps(len(train_loader), config.accumulation_steps, config.epochs, config.max_steps)
    args = TrainingArguments(output_dir=output_dir or tempfile.mkdtemp(),
                             per_device_train_batch_size=train_loader.batch_size or 1,
                             gradient_accumulation_steps=config.accumulation_steps, max_steps=total,
                             logging_steps=1, report_to="none", use_cpu=device_type == "cpu",
                             disable_tqdm=not run.progress,
                             save_strategy="no", seed=config.seed, bf16=choice.precision == "bf16",
                             fp16=choice.precision == "fp16", **checkpointing_arguments(config.gradient_checkpointing),
                             max_grad_norm=config.max_grad_norm or 0.0,
                             accelerator_config={"use_seedable_sampler": False})  # keep our loader's order
    prepare_trainable(model, config)  # chapter 8's levers, before the optimizer
    # train's and Accelerate's switch, not the Trainer's full_determinism (which also overwrites
    # CUBLAS_WORKSPACE_CONFIG and reseeds) (chapter 5b)
    use_deterministic_algorithms(config.deterministic)
    optimizer, scheduler = make_optimizer_and_scheduler(model, config, total)

    class LoaderTrainer(Trainer):  # train on exactly our batches, in our order
        def get_train_dataloader(self):
            return train_loader

    trainer = LoaderTrainer(model=model, args=args, optimizers=(optimizer, scheduler))
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)  # the log goes into the TrainResult, not to stdout
    trainer.model_accepts_loss_kwargs = False  # chapter 2: mean over the effective batch
    trainer.train()
    result = TrainResult(precision=choice.precision)
    for log in trainer.state.log_history:
        if "loss" in log:
            result.history.append({"step": len(result.history) + 1, "epoch": math.ceil(log["epoch"]),
                                   "loss": float(log["loss"]), "lr": float(log["learning_rate"]),
                                   "grad_norm": float(log.get("grad_norm", float("nan")))})
    return result
