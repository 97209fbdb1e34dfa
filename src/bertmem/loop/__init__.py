"""The training loop, one piece per chapter: the chapter-0 baseline, accumulation, precision, the optimizer and
layer-wise groups, checkpoint and resume, the combined loop (`train`), and the Accelerate and Trainer backends;
`RunConfig` and `TrainConfig`.
"""

from bertmem.loop.accelerate_loop import shard_with_fsdp2, train_with_accelerate
from bertmem.loop.accumulation import (
    backward_window,
    backward_with_backoff,
    count_items,
    is_out_of_memory,
    loss_weights,
    plan_for,
    split_batch,
    split_evenly,
    sync_context,
    windows,
)
from bertmem.loop.baseline import TrainResult, evaluate, evaluate_into, train_baseline
from bertmem.loop.combined import (
    PACKAGE_LEVERS,
    Levers,
    make_optimizer_and_scheduler,
    optimizer_step,
    prepare_model,
    prepare_run,
    prepare_trainable,
    train,
    use_fused_adamw,
)
from bertmem.loop.config import RunConfig, TrainConfig
from bertmem.loop.hf_trainer import train_with_trainer, trainer_first_step
from bertmem.loop.optim import (
    BASE_LEARNING_RATE,
    EMBEDDINGS,
    HEAD,
    OPTIMIZER_NAMES,
    SMALL_LEARNING_RATE,
    default_learning_rate,
    group_lr_scale,
    layer_assignment,
    layerwise_param_groups,
    make_optimizer,
    no_weight_decay,
    post_param_groups,
    rank_bytes,
)
from bertmem.loop.precision import (
    DTYPES,
    NonFiniteError,
    PrecisionChoice,
    autocast_context,
    check_finite,
    choose_precision,
    diagnose_scale_trace,
    mixed_precision_step,
    pure_half,
    skipped_steps,
    trace_op_dtypes,
)
from bertmem.loop.resume import RunState
from bertmem.loop.stepwise import train_with_step

__all__ = ["BASE_LEARNING_RATE", "DTYPES", "EMBEDDINGS", "HEAD", "Levers", "NonFiniteError", "OPTIMIZER_NAMES",
    "PACKAGE_LEVERS", "PrecisionChoice", "RunConfig", "RunState", "SMALL_LEARNING_RATE", "TrainConfig",
    "TrainResult", "autocast_context", "backward_window", "backward_with_backoff", "check_finite",
    "choose_precision", "count_items", "default_learning_rate", "diagnose_scale_trace", "evaluate", "evaluate_into",
    "group_lr_scale", "is_out_of_memory", "layer_assignment", "layerwise_param_groups", "loss_weights",
    "make_optimizer", "make_optimizer_and_scheduler", "mixed_precision_step", "no_weight_decay", "optimizer_step",
    "plan_for", "prepare_model", "prepare_run", "prepare_trainable", "pure_half", "post_param_groups", "rank_bytes",
    "shard_with_fsdp2", "skipped_steps", "split_batch", "split_evenly", "sync_context", "trace_op_dtypes", "train",
    "train_baseline", "train_with_accelerate", "train_with_step", "train_with_trainer", "trainer_first_step",
    "use_fused_adamw", "windows"]
