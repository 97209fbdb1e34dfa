"""Below 16 bytes per parameter: LoRA, 8-bit and factored optimizer state, frozen layers (chapter 8).

fp32 weights, gradients and AdamW's two moments cost 4 + 4 + 8 = 16 bytes per parameter. Each lever here
changes one term: freezing and LoRA train fewer parameters (no gradient, no optimizer state for the rest),
8-bit AdamW stores its moments in one byte each (plus a scale per block), Adafactor keeps a factored second
moment (one row and one column per matrix) and no first moment.
"""

from __future__ import annotations

import math
from typing import Iterable

import torch
from torch import nn

from .models import find_encoder_layers
from .profile import quiet_bitsandbytes_notice

OPTIMIZER_NAMES = ("adamw", "adamw8bit", "adafactor")
# The attention projections LoRA adapts in each BERT-family architecture, by the names its modules use
# (Hu et al. 2021 adapt the query and value projections).
LORA_TARGETS = ({"query", "value"}, {"q_lin", "v_lin"}, {"query_proj", "value_proj"})
LORA_RANK = 8  # the book's default rank, as in Hu et al. (2022)'s RoBERTa experiments
# Adapters start at zero and move the model only through a low-rank product, so they take larger steps than
# full fine-tuning: Hu et al. (2022) train RoBERTa-base's adapters at 4e-4 to 5e-4, where Devlin et al.
# (2019) fine-tune all of BERT at 2e-5 to 5e-5. The bench and chapter 8 use ten times the recipe's rate.
LORA_LR_FACTOR = 10


def freeze_lower_layers(model: nn.Module, layers: int) -> int:
    """Freeze the embeddings and the bottom `layers` encoder layers; return the parameters frozen (ch. 8)."""
    _, blocks = find_encoder_layers(model)
    if not 0 <= layers <= len(blocks):
        raise ValueError(f"freeze_layers must be in [0, {len(blocks)}] for this {len(blocks)}-layer encoder, "
                         f"got {layers}")
    if layers == 0:
        return 0
    frozen = [p for block in list(blocks)[:layers] for p in block.parameters()]
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    owner = _embeddings_module(model, embeddings)
    frozen += list(owner.parameters()) if owner is not None else []
    for param in frozen:
        param.requires_grad_(False)
    return sum(p.numel() for p in {id(p): p for p in frozen}.values())


def _embeddings_module(model: nn.Module, word_embeddings: nn.Module | None) -> nn.Module | None:
    """The module holding the word, position and type embeddings (and their LayerNorm)."""
    for name, module in model.named_modules():
        if name.endswith("embeddings") and any(m is word_embeddings for m in module.modules()):
            return module
    return word_embeddings


def lora_target_modules(model: nn.Module) -> list[str]:
    """The module names LoRA adapts in this encoder: its query and value projections (chapter 8)."""
    names = {name.rsplit(".", 1)[-1] for name, module in model.named_modules() if isinstance(module, nn.Linear)}
    for targets in LORA_TARGETS:
        if targets <= names:
            return sorted(targets)
    raise ValueError(f"no query/value projections found among {sorted(names)[:12]}: pass target_modules "
                     "naming the attention projections of this architecture")


def is_head(model: nn.Module, name: str) -> bool:
    """True for a parameter of the classification head: outside the encoder, or its pooler (chapter 8)."""
    encoder = getattr(model, "base_model_prefix", "") + "."
    return not name.startswith(encoder) or name.startswith(encoder + "pooler.")


def apply_lora(model: nn.Module, r: int = 8, alpha: int | None = None, dropout: float = 0.1,
               target_modules: Iterable[str] | None = None) -> int:
    """Add LoRA adapters in place; train only them and the head; return the trainable parameters (ch. 8).

    The head is everything outside the pretrained encoder (`base_model_prefix`): BERT's classifier,
    DistilBERT's pre-classifier and classifier, DeBERTa's pooler and classifier; and BERT's pooler, which
    sits inside the encoder but feeds only the classifier: a checkpoint trained without it (the CPU
    profile's sentence-transformers MiniLM) has an untrained one. The model stays a transformers model (peft's
    `inject_adapter_in_model`), so the loop, evaluation and predictions see no difference; `merge_lora`
    folds the adapters back for saving.
    """
    quiet_bitsandbytes_notice()  # peft imports bitsandbytes
    from peft import LoraConfig, inject_adapter_in_model

    if not isinstance(r, int) or r < 1:
        raise ValueError(f"lora_r must be an int >= 1, got {r!r}")
    config = LoraConfig(r=r, lora_alpha=alpha if alpha is not None else 2 * r, lora_dropout=dropout,
                        target_modules=list(target_modules or lora_target_modules(model)), bias="none")
    training = model.training
    inject_adapter_in_model(config, model)
    model.train(training)  # new modules start in training mode: LoRA's dropout must follow the model's mode
    for name, param in model.named_parameters():  # the head must learn: the adapters alone cannot
        param.requires_grad_("lora_" in name or is_head(model, name))
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def has_lora(model: nn.Module) -> bool:
    """True when LoRA adapters were added to the model."""
    return any("lora_" in name for name, _ in model.named_parameters())


def merge_lora(model: nn.Module) -> nn.Module:
    """Fold every LoRA adapter into its base weight and drop the adapter modules, in place (chapter 8).

    The result is a plain transformers model: `save_pretrained` writes a folder that loads without peft.
    """
    quiet_bitsandbytes_notice()
    from peft.tuners.tuners_utils import BaseTunerLayer

    layers = [(name, module) for name, module in model.named_modules() if isinstance(module, BaseTunerLayer)]
    for name, module in layers:
        module.merge()
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, child, module.get_base_layer())
    return model


def make_optimizer(params, name: str = "adamw", lr: float = 5e-5, weight_decay: float = 0.01,
                   fused: bool = False) -> torch.optim.Optimizer:
    """AdamW, 8-bit AdamW (bitsandbytes) or Adafactor (transformers) over parameters or groups (chapter 8).

    8-bit AdamW comes from bitsandbytes, which runs it on CPUs as well as CUDA GPUs and keeps plain tensors
    (uint8 moments, one fp32 scale per block of 256); torchao's AdamW8bit compiles every step with
    torch.compile and keeps tensor subclasses, which the book's memory measurement cannot look inside.
    """
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=fused)
    if name == "adamw8bit":
        return _bitsandbytes().optim.AdamW8bit(params, lr=lr, weight_decay=weight_decay)
    if name == "adafactor":
        from transformers.optimization import Adafactor

        # a fixed learning rate, so warmup and decay come from our scheduler as for AdamW; no first moment
        return Adafactor(params, lr=lr, weight_decay=weight_decay, scale_parameter=False, relative_step=False,
                         warmup_init=False, beta1=None)
    raise ValueError(f"optimizer must be one of {OPTIMIZER_NAMES}, got {name!r}")


def _bitsandbytes():
    """bitsandbytes, imported quietly."""
    quiet_bitsandbytes_notice()
    import bitsandbytes

    return bitsandbytes


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
    from .memory import optimizer_state_bytes

    param = torch.nn.Parameter(torch.zeros(shape))
    numel = param.numel()
    param.grad = torch.full_like(param, 1e-3)
    optimizer = make_optimizer([param], name, lr=1e-3)
    optimizer.step()
    return optimizer_state_bytes(optimizer) / numel


def trainable_share(model: nn.Module) -> float:
    """Trainable parameters over all parameters (chapter 8)."""
    params = list(model.parameters())
    return sum(p.numel() for p in params if p.requires_grad) / sum(p.numel() for p in params)
