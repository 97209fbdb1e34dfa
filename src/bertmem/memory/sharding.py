"""Memory per device when data parallelism shards the training state: DDP, ZeRO-1/2/3, FSDP (chapter 7)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from bertmem.model.loading import classifier_from_config

STRATEGIES = ("ddp", "zero1", "zero2", "zero3", "fsdp")
SHARDED = {  # which of (weights, gradients, optimizer state) are split across the devices
    "ddp": (False, False, False),
    "zero1": (False, False, True),
    "zero2": (False, True, True),
    "zero3": (True, True, True),
    "fsdp": (True, True, True),  # FULL_SHARD / FSDP2 fully_shard; reshard_after_forward=False is ZeRO-2-like
}


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter of weights, gradients and optimizer state (chapter 7).

    The default is this book's recipe: fp32 weights and gradients under autocast, AdamW's two fp32 moments
    (16 bytes). ZeRO's paper counts fp16 weights and gradients plus an fp32 master copy and moments:
    StateBytes(2, 2, 12), also 16 bytes in all.
    """

    weights: int = 4
    gradients: int = 4
    optimizer: int = 8

    def __post_init__(self) -> None:
        if min(self.weights, self.gradients, self.optimizer) < 0:
            raise ValueError(f"bytes per parameter must be >= 0, got {self}")


def per_device_bytes(
    num_params: int,
    activation_bytes: int,
    devices: int,
    strategy: str = "ddp",
    state: StateBytes = StateBytes(),
    gathered_params: int = 0,
    gradient_buckets: bool = False,
) -> dict[str, float]:
    """What one of `devices` data-parallel devices holds, by category (chapter 7).

    Sharded parts are divided by the device count (Rajbhandari et al., 2020). Under
    ZeRO-3/FSDP a device also holds one wrapped unit's full weights while it computes
    (`gathered_params`, e.g. one encoder layer). Activations are per device: each runs
    its own micro-batch. `gradient_buckets`: PyTorch DDP's default
    (`gradient_as_bucket_view=False`) keeps its all-reduce buckets as a second copy of
    the gradients; the ZeRO paper's accounting leaves them out.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    if devices < 1 or num_params < 1 or activation_bytes < 0 or gathered_params < 0:
        raise ValueError(
            "need devices >= 1, num_params >= 1 and non-negative byte counts, got "
            f"devices={devices}, num_params={num_params}, "
            f"activation_bytes={activation_bytes}"
        )
    shard_w, shard_g, shard_o = SHARDED[strategy]  # which parts this strategy divides
    out = {
        "weights": num_params * state.weights / (devices if shard_w else 1),
        "gradients": num_params * state.gradients / (devices if shard_g else 1),
        "optimizer_state": num_params * state.optimizer / (devices if shard_o else 1),
        "activations": float(activation_bytes),
    }
    if shard_w and devices > 1:  # ZeRO-3/FSDP gathers one unit's weights at a time
        out["gathered_weights"] = float(min(gathered_params, num_params) * state.weights)
    if strategy == "ddp" and gradient_buckets and devices > 1:
        out["gradient_buckets"] = float(num_params * state.gradients)
    out["total"] = sum(out.values())
    return out


# DeepSpeed's ZeRO-1/2 gradient buffer: `reduce_bucket_size` elements of the parameters' dtype, allocated whole
# whatever the model's size, once more with `overlap_comm` (double buffering). Read in
# deepspeed/runtime/zero/stage_1_and_2.py (`setup_buckets`; CPU offload forces `contiguous_gradients`) and
# deepspeed/runtime/zero/config.py (reduce_bucket_size 5e8; overlap_comm defaults to True only at stage 3),
# DeepSpeed commit edaa72212 (2026).
DEEPSPEED_REDUCE_BUCKET = 5 * 10**8


def reduce_buffer_bytes(bucket_elements: int = DEEPSPEED_REDUCE_BUCKET, half_bytes: int = 2,
                        overlap_comm: bool = False) -> float:
    """The GPU bytes of DeepSpeed ZeRO-1/2's contiguous gradient buffer(s), independent of the model (chapter 7)."""
    if bucket_elements < 0:
        raise ValueError(f"bucket_elements must be >= 0, got {bucket_elements}")
    return float(bucket_elements * half_bytes * (2 if overlap_comm else 1))


def largest_parameter(config) -> int:
    """The largest weight tensor's element count (BERT: the word embeddings), counted on the meta device (ch. 7)."""
    with torch.device("meta"):
        return max(p.numel() for p in classifier_from_config(config).parameters())


def offload_bytes(num_params: int, activation_bytes: int, half_bytes: int = 2,
                  bucket_elements: int = DEEPSPEED_REDUCE_BUCKET, overlap_comm: bool = False,
                  largest_param: int = 0, accumulation: bool = False) -> dict[str, float]:
    """ZeRO-Offload on one GPU: what stays on the GPU and what moves to CPU memory (chapter 7).

    The 16-bit weights stay on the GPU; the 16-bit gradients gather in DeepSpeed's gradient buffer, allocated at its
    full size (`reduce_buffer_bytes`, not capped at the model: with the default bucket it outweighs a bert-base's
    16-bit weights), and go to the CPU when it fills or the backward pass ends, through a staging buffer the size of
    the largest parameter (`largest_param`) on each side. The CPU holds the fp32 master weights, fp32 gradients and
    both Adam moments (Ren et al., 2021), a 16-bit copy of the weights to send back, and with gradient accumulation
    the 16-bit gradients accumulated so far (stage_1_and_2.py: `param_buffer_of_bit16_for_cpu_offload_groups`,
    `temp_grad_buffer_for_{cpu,gpu}_offload`, `accumulated_grads_in_cpu`).
    """
    if num_params < 1 or activation_bytes < 0 or largest_param < 0:
        raise ValueError(f"need num_params >= 1 and non-negative byte counts, got {num_params}, {activation_bytes}, "
                         f"{largest_param}")
    staging = float(largest_param * half_bytes)
    gpu = {"weights (16-bit)": num_params * half_bytes,
           "gradient buffer (16-bit)": reduce_buffer_bytes(bucket_elements, half_bytes, overlap_comm),
           "staging buffer (16-bit)": staging, "activations": float(activation_bytes)}
    cpu = {"master weights (fp32)": num_params * 4.0, "gradients (fp32)": num_params * 4.0,
           "optimizer state": num_params * 8.0, "weights to send back (16-bit)": float(num_params * half_bytes),
           "staging buffer (16-bit)": staging}
    if accumulation:
        cpu["accumulated gradients (16-bit)"] = float(num_params * half_bytes)
    return {"gpu": {**gpu, "total": sum(gpu.values())}, "cpu": {**cpu, "total": sum(cpu.values())}}


def sharding_table(num_params: int, activation_bytes: int, device_counts=(1, 2, 4, 8),
                   state: StateBytes = StateBytes(), gathered_params: int = 0) -> list[dict[str, float]]:
    """Total bytes per device for every strategy and device count, as table rows (chapter 7).

    DDP appears twice: PyTorch's default (gradient buckets as a second gradient copy) and with
    `gradient_as_bucket_view=True` (the gradients are views into the buckets).
    """
    rows = []
    for strategy, buckets in [("ddp", True), ("ddp", False), *((s, False) for s in STRATEGIES[1:])]:
        ddp_name = "ddp (default)" if buckets else "ddp, gradient_as_bucket_view"
        name = ddp_name if strategy == "ddp" else strategy
        row: dict = {"strategy": name}
        for n in device_counts:
            row[n] = per_device_bytes(num_params, activation_bytes, n, strategy, state, gathered_params,
                                      gradient_buckets=buckets)["total"]
        rows.append(row)
    return rows
