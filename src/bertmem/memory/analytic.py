"""Memory counted by hand: the closed-form step of a BERT encoder, and 8-bit optimizer state's bytes (ch. 1, 8).

No model runs here: these are the formulas the chapters derive, checked against the measurements of
`memory.measure` and the estimates of `memory.estimate`."""

from __future__ import annotations

import math

import torch

from bertmem.loop.optim import make_optimizer
from bertmem.memory.measure import MemoryReport, optimizer_state_bytes
from bertmem.model.known import usable_positions


def analytic_step_memory(config, batch_size: int, seq_len: int, attention: str = "eager",
                         optimizer: str = "adamw", device: str = "cuda", num_params: int | None = None) -> MemoryReport:
    """The closed-form fp32 count for a BERT classifier step, checked against measurements (chapter 1).

    Per layer (b batch, s tokens, h hidden, i intermediate, a heads, w = 4 bytes, m bytes per dropout-mask
    value: 1 on CUDA (bool), 4 on CPU (float)):
    bsh·(8w + 2m) + 2·bsi·w + 16·bs (LayerNorm statistics)
    + eager or math-path attention: b·a·s²·(2w + m)  (softmax output, dropout mask, dropped probabilities)
    + fused attention: b·a·s'·4 (log-sum-exp; s' = s rounded up to 32 on CUDA) and, on CUDA, the b·s²·w float
      bias that each layer makes from the boolean padding mask.
    """
    _check_sizes(batch_size, seq_len, config)
    if attention not in ("eager", "sdpa"):
        raise ValueError(f"attention must be 'eager' or 'sdpa', got {attention!r}")
    if device not in ("cuda", "cpu"):
        raise ValueError(f"device must be 'cuda' or 'cpu', got {device!r}")
    b, s, w, m = batch_size, seq_len, 4, (1 if device == "cuda" else 4)
    h, i, a, L = config.hidden_size, config.intermediate_size, config.num_attention_heads, config.num_hidden_layers
    per_layer = b * s * h * (8 * w + 2 * m) + 2 * b * s * i * w + 16 * b * s
    if attention == "eager":
        per_layer += b * a * s * s * (2 * w + m)
    else:
        per_layer += b * a * (round_up(s, 32) if device == "cuda" else s) * 4
        per_layer += b * s * s * w if device == "cuda" else 0
    embeddings = b * s * h * (w + m) + 2 * b * s * 8 + 2 * b * s * 4  # LN input, dropout mask, 2 id tensors, LN stats
    head = b * s * h * w + b * h * (2 * w + m) + b * config.num_labels * w + b * 8 + 4
    n = num_params if num_params is not None else count_bert_parameters(config)
    state = {"adamw": 8 * n, "sgd": 4 * n, "none": 0}.get(optimizer)
    if state is None:
        raise ValueError(f"optimizer must be 'adamw', 'sgd' or 'none', got {optimizer!r}")
    return MemoryReport(parameters=4 * n, gradients=4 * n, optimizer_state=state,
                        activations=L * per_layer + embeddings + head, device=device, estimated=True,
                        notes=["closed-form fp32 formula (chapter 1)"])


def count_bert_parameters(config) -> int:
    """Parameters of BertForSequenceClassification for a config, in closed form (chapter 1)."""
    h, i, L, v = config.hidden_size, config.intermediate_size, config.num_hidden_layers, config.vocab_size
    embeddings = (v + config.max_position_embeddings + config.type_vocab_size) * h + 2 * h
    layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h  # q, k, v, o; 2 LayerNorms; FFN
    head = h * h + h + h * config.num_labels + config.num_labels
    return embeddings + L * layer + head


def _check_sizes(batch_size: int, seq_len: int, config) -> None:
    """Positive sizes and a sequence that fits the position embeddings."""
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    if not isinstance(seq_len, int) or seq_len < 1:
        raise ValueError(f"seq_len must be a positive int, got {seq_len!r}")
    limit = usable_positions(config)
    if limit is not None and seq_len > limit:
        table = config.max_position_embeddings
        raise ValueError(f"seq_len={seq_len} exceeds the {limit} positions of the model's position table "
                         f"(max_position_embeddings={table}): pass a config with max_position_embeddings >= "
                         f"{seq_len + table - limit} (e.g. config.max_position_embeddings = {seq_len + table - limit}; "
                         "the extra positions are untrained, fine for a memory experiment)")


def round_up(value: int, multiple: int) -> int:
    """Smallest multiple of `multiple` that is >= value."""
    return int(math.ceil(value / multiple) * multiple)


BNB_BLOCK = 256  # values per fp32 scale (absmax) in bitsandbytes' block-wise 8-bit state
BNB_MIN_8BIT_SIZE = 4096  # smaller tensors keep fp32 moments (bitsandbytes' min_8bit_size)


def adamw8bit_state_like(param: torch.Tensor) -> dict[str, torch.Tensor]:
    """Tensors shaped like bitsandbytes' 8-bit AdamW state for one parameter, for estimates (chapter 8).

    Both moments in uint8 plus one fp32 scale per block of 256 values, or fp32 moments for tensors under
    4096 values; the two 256-entry quantization maps are shared by all parameters (see `quantization_maps`).
    """
    if param.numel() < BNB_MIN_8BIT_SIZE:
        return {"state1": torch.zeros_like(param, dtype=torch.float32),
                "state2": torch.zeros_like(param, dtype=torch.float32)}
    blocks = math.ceil(param.numel() / BNB_BLOCK)
    return {"state1": torch.zeros_like(param, dtype=torch.uint8),
            "state2": torch.zeros_like(param, dtype=torch.uint8),
            "absmax1": torch.zeros(blocks, dtype=torch.float32, device=param.device),
            "absmax2": torch.zeros(blocks, dtype=torch.float32, device=param.device)}


def quantization_maps(device) -> dict[str, torch.Tensor]:
    """bitsandbytes' two shared 256-entry quantization maps (first and second moment)."""
    return {name: torch.zeros(256, dtype=torch.float32, device=device) for name in ("qmap1", "qmap2")}


def state_bytes_per_value(shape: int | tuple[int, ...], name: str = "adamw8bit") -> float:
    """Optimizer-state bytes per value of one tensor of this shape after a step (chapter 8)."""

    param = torch.nn.Parameter(torch.zeros(shape))
    numel = param.numel()
    param.grad = torch.full_like(param, 1e-3)
    optimizer = make_optimizer([param], name, lr=1e-3)
    optimizer.step()
    return optimizer_state_bytes(optimizer) / numel
