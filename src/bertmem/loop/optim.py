"""The optimizer, built in one place: AdamW (fused where it can), 8-bit AdamW, Adafactor, and the
layer-wise learning-rate groups of any BERT-family encoder (chapters 0, 4, 8)."""

from __future__ import annotations

from collections import OrderedDict

import torch
from torch import nn

from bertmem.core.runtime import quiet_bitsandbytes_notice
from bertmem.model.loading import find_encoder_layers

HEAD = "head"
EMBEDDINGS = "embeddings"

# The default peak learning rate, by the model's size, defined here once: TrainConfig, the profiles, `bertmem train`
# and `bench` read it. From hidden size 768 up (bert-base and -large, RoBERTa, DeBERTa-v3, ModernBERT): 2e-5, the
# lowest of the three rates BERT's authors searched when fine-tuning (5e-5, 3e-5, 2e-5; Devlin et al. 2019, appendix
# A.3). Smaller encoders (MiniLM, hidden size 384): 1e-4, at which the CPU profile's runs learn in a few dozen steps.
BASE_LEARNING_RATE, SMALL_LEARNING_RATE = 2e-5, 1e-4
BASE_HIDDEN_SIZE = 768


def default_learning_rate(hidden_size: int) -> float:
    """The default peak learning rate of an encoder with this hidden size (chapter 0, the profiles, the CLI)."""
    return BASE_LEARNING_RATE if hidden_size >= BASE_HIDDEN_SIZE else SMALL_LEARNING_RATE



def layer_assignment(model: nn.Module) -> dict[str, str]:
    """Each trainable parameter's group: 'embeddings', 'layer.<k>' (1: bottom), 'head'.

    The layers are found from the model's structure (chapter 4), so any BERT-family
    encoder works; a parameter that fits no group is an error, never a silent default.
    """
    layers_name, layers = find_encoder_layers(model)
    container = layers_name.rsplit(".", 1)[0] if "." in layers_name else ""
    base = getattr(model, "base_model", model)
    base_prefix = next((n for n, m in model.named_modules() if m is base), "")
    assignment: dict[str, str] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        if name.startswith(layers_name + "."):
            index = int(name[len(layers_name) + 1 :].split(".", 1)[0])
            assignment[name] = f"layer.{index + 1}"
        elif base_prefix and not name.startswith(base_prefix + "."):
            assignment[name] = HEAD  # the classifier: outside the pretrained backbone
        elif ".pooler." in f".{name}" or name.startswith("pooler."):
            assignment[name] = HEAD
        elif "embed" in name.lower() or (
            container and name.startswith(container + ".")
        ):
            # word/position/type embeddings and their LayerNorm; DeBERTa's relative-
            # position embeddings sit in the encoder, below every layer
            assignment[name] = EMBEDDINGS
        else:
            raise ValueError(
                f"cannot assign parameter {name!r} to the embeddings, an encoder layer "
                "or the head: freeze it (requires_grad=False) or extend this function"
            )
    return assignment


def group_lr_scale(group: str, num_layers: int, decay: float) -> float:
    """base_lr's multiplier: head 1, layer k decay^(L-k), embeddings decay^L (ch. 4)."""
    if group == HEAD:
        return 1.0
    if group == EMBEDDINGS:
        return decay ** num_layers
    return decay ** (num_layers - int(group.split(".")[1]))


def no_weight_decay(name: str, param: torch.Tensor) -> bool:
    """Biases and normalisation weights (all 1-D tensors) get no weight decay (chapter 4)."""
    return param.ndim <= 1 or name.endswith(".bias")


def layerwise_param_groups(model: torch.nn.Module, base_lr: float, decay: float = 0.95,
                           weight_decay: float = 0.01) -> list[dict]:
    """AdamW groups, one learning rate per layer, decaying downwards (chapter 4).

    Layers are numbered 1..L from the bottom: layer k gets base_lr·decay^(L−k), the
    embeddings base_lr·decay^L, the head (pooler + classifier) base_lr, as the top
    layer. Every trainable parameter lands in exactly one group, frozen ones in none;
    biases and LayerNorm weights get weight_decay 0.
    """
    if not base_lr > 0:
        raise ValueError(f"base_lr must be > 0, got {base_lr}")
    if not 0 < decay <= 1:
        raise ValueError(f"decay must be in (0, 1], got {decay}: 1.0 means no decay")
    if weight_decay < 0:
        raise ValueError(f"weight_decay must be >= 0, got {weight_decay}")
    assignment = layer_assignment(model)
    num_layers = len(find_encoder_layers(model)[1])
    groups: OrderedDict[tuple[str, bool], dict] = OrderedDict()
    for name, param in model.named_parameters():
        if name not in assignment:
            continue
        key = (assignment[name], no_weight_decay(name, param))
        if key not in groups:
            groups[key] = {"name": key[0] + (" (no decay)" if key[1] else ""),
                           "params": [], "param_names": [],
                           "lr": base_lr * group_lr_scale(key[0], num_layers, decay),
                           "weight_decay": 0.0 if key[1] else weight_decay}
        groups[key]["params"].append(param)
        groups[key]["param_names"].append(name)
    return list(groups.values())


def post_param_groups(model: nn.Module, base_lr: float = 2e-5, decay: float = 0.95) -> list[dict]:
    """The blog post's grouping rule: one group per encoder layer k (0 at the bottom),
    found by the name substring 'layer.{k}.', at base_lr·decay^(L−k); nothing else
    gets a group (chapter 4)."""
    num_layers = model.config.num_hidden_layers
    named = list(model.named_parameters())
    return [
        {"params": [p for n, p in named if f"layer.{k}." in n], "lr": base_lr * decay ** (num_layers - k)}
        for k in range(num_layers)
    ]


OPTIMIZER_NAMES = ("adamw", "adamw8bit", "adafactor")


# bitsandbytes rather than torchao's AdamW8bit: torchao compiles every step with torch.compile and keeps tensor
# subclasses, which the book's memory measurement cannot look inside.
def make_optimizer(
    params,
    name: str = "adamw",
    lr: float = BASE_LEARNING_RATE,
    weight_decay: float = 0.01,
    fused: bool = False,
) -> torch.optim.Optimizer:
    """AdamW, 8-bit AdamW (bitsandbytes) or Adafactor over parameters or groups (ch. 8).

    bitsandbytes' AdamW8bit runs on CPUs and CUDA GPUs and keeps plain tensors (uint8
    moments, one fp32 scale per block of 256 values), which the book's memory
    measurement can count; Adafactor keeps factored second moments and no first.
    """
    if name == "adamw":
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=fused)
    if name == "adamw8bit":
        quiet_bitsandbytes_notice()
        import bitsandbytes as bnb  # imported here: slow to import, and only this optimizer uses it

        return bnb.optim.AdamW8bit(params, lr=lr, weight_decay=weight_decay)
    if name == "adafactor":
        from transformers.optimization import Adafactor

        # a fixed rate, so warmup and decay come from the scheduler, as for AdamW
        return Adafactor(
            params,
            lr=lr,
            weight_decay=weight_decay,
            scale_parameter=False,
            relative_step=False,
            warmup_init=False,
            beta1=None,
        )
    raise ValueError(f"optimizer must be one of {OPTIMIZER_NAMES}, got {name!r}")


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """This process's shard of a DTensor (FSDP2), or the tensor itself."""
    return getattr(tensor, "_local_tensor", tensor)


def rank_bytes(model: torch.nn.Module, optimizer) -> dict[str, int]:
    """Parameter and optimizer-state bytes this process holds (its shard under FSDP), measured
    from the optimizer a run built, whichever it is (chapters 5, 7)."""
    optimizer = getattr(optimizer, "optimizer", optimizer)  # Accelerate wraps it
    states = [_local(v) for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)]
    return {"parameter_bytes": sum(_local(p).numel() * _local(p).element_size() for p in model.parameters()),
            "optimizer_bytes": sum(t.numel() * t.element_size() for t in states)}
