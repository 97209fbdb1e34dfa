"""Training fewer parameters: LoRA adapters through peft, frozen lower layers, merging LoRA back (chapter 8).

fp32 weights, gradients and AdamW's two moments cost 4 + 4 + 8 = 16 bytes per parameter. Freezing and LoRA
train fewer parameters: no gradient and no optimizer state for the rest. The optimizers that store less per
trained parameter (8-bit AdamW, Adafactor) are built in `loop.optim`."""

from __future__ import annotations

from typing import Iterable

import torch
from torch import nn

from bertmem.core.runtime import quiet_bitsandbytes_notice
from bertmem.model.loading import find_encoder_layers

# The attention projections LoRA adapts in each BERT-family architecture, by the names its modules use
# (Hu et al. 2021 adapt the query and value projections).
# query and value projections by family: BERT, RoBERTa, ELECTRA, XLM-R; DistilBERT; DeBERTa. ModernBERT fuses q, k
# and v into one `Wqkv` projection, so its adapters adapt the key projection too.
LORA_TARGETS = ({"query", "value"}, {"q_lin", "v_lin"}, {"query_proj", "value_proj"}, {"Wqkv"})
LORA_RANK = 8  # the book's default rank, as in Hu et al. (2022)'s RoBERTa experiments
# Adapters start at zero and move the model only through a low-rank product, so they take larger steps than
# full fine-tuning: Hu et al. (2022) train RoBERTa-base's adapters at 4e-4 to 5e-4, 13 to 50 times the 1e-5 to
# 3e-5 at which Liu et al. (2019) fine-tune all of RoBERTa. The bench and chapter 8 use ten times the recipe's
# rate: the book's choice, below that ratio, not taken from either paper.
LORA_LR_FACTOR = 10


def freeze_lower_layers(model: nn.Module, layers: int) -> int:
    """Freeze the embeddings and the bottom `layers` encoder layers (chapter 8).

    Frozen parameters get no gradient and no optimizer state, and no backward pass
    runs below the first trained layer. Returns the parameters frozen.
    """
    _, blocks = find_encoder_layers(model)
    if not 0 <= layers <= len(blocks):
        raise ValueError(
            f"freeze_layers must be in [0, {len(blocks)}] for this "
            f"{len(blocks)}-layer encoder, got {layers}"
        )
    if layers == 0:
        return 0
    frozen = [p for block in list(blocks)[:layers] for p in block.parameters()]
    owner = embeddings_module(model, model.get_input_embeddings())
    frozen += list(owner.parameters()) if owner is not None else []
    for param in frozen:
        param.requires_grad_(False)
    return sum(p.numel() for p in {id(p): p for p in frozen}.values())


def embeddings_module(model: nn.Module, word_embeddings: nn.Module | None) -> nn.Module | None:
    """The module holding the word, position and type embeddings (and their LayerNorm) (chapter 8)."""
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


def apply_lora(
    model: torch.nn.Module,
    r: int = 8,
    alpha: int | None = None,
    dropout: float = 0.1,
    target_modules: Iterable[str] | None = None,
) -> int:
    """Add peft's LoRA adapters in place; train them and the head only (chapter 8).

    The head is everything outside the pretrained encoder, and BERT's pooler, which
    feeds only the classifier. The model stays a transformers model, so the loop,
    evaluation and predictions see no difference. Returns the trainable parameters.
    """
    quiet_bitsandbytes_notice()  # peft imports bitsandbytes
    from peft import LoraConfig, inject_adapter_in_model

    if not isinstance(r, int) or r < 1:
        raise ValueError(f"lora_r must be an int >= 1, got {r!r}")
    config = LoraConfig(
        r=r,
        lora_alpha=alpha if alpha is not None else 2 * r,
        lora_dropout=dropout,
        target_modules=list(target_modules or lora_target_modules(model)),
        bias="none",
    )
    training = model.training
    inject_adapter_in_model(config, model)
    # new modules start in training mode: LoRA's dropout must follow the model's mode
    model.train(training)
    for name, param in model.named_parameters():
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


def trainable_share(model: nn.Module) -> float:
    """Trainable parameters over all parameters (chapter 8)."""
    params = list(model.parameters())
    return sum(p.numel() for p in params if p.requires_grad) / sum(p.numel() for p in params)
