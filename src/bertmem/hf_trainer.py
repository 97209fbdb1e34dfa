"""Hugging Face Trainer helpers: the accumulation check and its workaround (chapters 2 and 4)."""

from __future__ import annotations

import tempfile
from typing import Callable

import torch


def trainer_first_step(model_fn: Callable[[], torch.nn.Module], batch: dict[str, torch.Tensor],
                       micro_batch_size: int, accumulation_steps: int, workaround: bool = False,
                       seed: int = 0) -> dict[str, float]:
    """Loss and pre-clipping grad norm that `transformers.Trainer` logs for its first optimizer step (chapter 2).

    With workaround=True the Trainer is told the model does not take `num_items_in_batch`
    (`trainer.model_accepts_loss_kwargs = False`), which restores the mean over the effective batch.
    """
    from datasets import Dataset
    from transformers import Trainer, TrainingArguments

    n = len(batch["labels"])
    if micro_batch_size * accumulation_steps != n:
        raise ValueError(f"micro_batch_size × accumulation_steps must equal the batch ({n}), "
                         f"got {micro_batch_size} × {accumulation_steps}")
    data = Dataset.from_dict({k: v.tolist() for k, v in batch.items()})
    args = TrainingArguments(output_dir=tempfile.mkdtemp(), per_device_train_batch_size=micro_batch_size,
                             gradient_accumulation_steps=accumulation_steps, max_steps=1, logging_steps=1,
                             report_to="none", use_cpu=not torch.cuda.is_available(), disable_tqdm=True,
                             save_strategy="no", max_grad_norm=1e9, dataloader_drop_last=False)
    torch.manual_seed(seed)  # the same initial weights for every call
    trainer = Trainer(model=model_fn(), args=args, train_dataset=data)
    if workaround:
        trainer.model_accepts_loss_kwargs = False
    trainer.train()
    log = next(h for h in trainer.state.log_history if "grad_norm" in h)
    return {"loss": float(log["loss"]), "grad_norm": float(log["grad_norm"])}
