"""The matrix multiplies a BERT-family classifier does per example: the count that the bench's model-FLOPs
utilisation and the time estimates both divide (chapter 5, A3, the "Will it fit?" page).

Per example of s tokens the forward pass multiplies every token by the encoder's linear weights (2 FLOPs per
weight), one token by the pooler's and the head's, and, in each of the L layers, forms QKᵀ and AV (2 · s² · d FLOPs
each for hidden size d). The backward pass computes the gradient of every product's input (as many FLOPs again) and
of every trained weight (as many as that weight's forward): a full fine-tune costs three times its forward pass,
LoRA a little over two. With chapter 8's frozen lower layers (and embeddings) no backward runs below the first
trained layer. Gradient checkpointing's second forward is not model work and is not counted here (the time estimates
add it). Kaplan et al. (2020)'s C ≈ 6N FLOPs per token takes N as the non-embedding parameters
(`non_embedding_parameters`: the embeddings do no matrix multiply) and leaves out attention's products; 6 · N ·
tokens is the time estimates' fallback for an architecture this count does not cover
(`bertmem.memory.speed.six_n_flops`). The count holds for the encoders of `COUNTED_TYPES`: BERT-like
ones, and ModernBERT where it runs padded batches (its SDPA and eager attention in transformers 5, which mask the
sliding window rather than skip it; with FlashAttention it unpads and is refused). Other architectures (shared
layers, relative-position attention) refuse."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from bertmem.model.adapters import embeddings_module
from bertmem.model.loading import find_encoder_layers

COUNTED_TYPES = ("bert", "roberta", "xlm-roberta", "camembert", "electra", "distilbert", "modernbert")
UNPADDED_ATTENTION = ("flash_attention_2", "flash_attention_3")  # ModernBERT drops the padding before these


@dataclass(frozen=True)
class MatmulShape:
    """The weights a BERT-family classifier multiplies per token and per example, the trained share of each, and
    its attention's size (chapter 5, A3)."""

    per_token: int  # the encoder's linear weights: every token, padding included, passes through them
    per_example: int  # the pooler's and the head's: one token per example
    layers: int
    hidden: int
    per_token_trained: int | None = None  # None: every weight trained
    per_example_trained: int | None = None
    frozen_below: int = 0  # the bottom layers no gradient flows through (frozen, with the embeddings below them)
    frozen_below_per_token: int = 0  # their linear weights

    def _forward_parts(self, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The forward's linear FLOPs per example (2 per weight and token) and its attention FLOPs per layer
        (QKᵀ and AV), in float64."""
        lengths = lengths.to(torch.float64)
        return 2 * self.per_token * lengths + 2 * self.per_example, 4 * self.hidden * (lengths * lengths)

    def training_flops(self, lengths: torch.Tensor) -> float:
        """Forward and backward matmul FLOPs of examples of these `lengths` (tokens each) (chapter 5, A3)."""
        linear, attention = self._forward_parts(lengths)
        lengths = lengths.to(torch.float64)
        token_trained = self.per_token if self.per_token_trained is None else self.per_token_trained
        example_trained = self.per_example if self.per_example_trained is None else self.per_example_trained
        weight_gradients = 2 * token_trained * lengths + 2 * example_trained  # trained weights only
        # backward, down to the lowest layer a gradient reaches: each linear input's gradient costs its forward
        # again (that layer's own input needs none when nothing below it trains: counted anyway, a slight
        # overcount); each attention product has two operands to differentiate, twice its forward
        input_gradients = 2 * (self.per_token - self.frozen_below_per_token) * lengths + 2 * self.per_example
        through = self.layers - self.frozen_below
        return float((linear + input_gradients + weight_gradients + attention * (self.layers + 2 * through)).sum())

    def forward_flops(self, lengths: torch.Tensor) -> float:
        """Forward matmul FLOPs of examples of these `lengths`: an evaluation pass (the chapters' minutes)."""
        linear, attention = self._forward_parts(lengths)
        return float((linear + attention * self.layers).sum())

    def recompute_flops(self, lengths: torch.Tensor) -> float:
        """What gradient checkpointing runs again in backward: the forward of the layers a gradient reaches (a
        frozen layer below them saved nothing to recompute; the head is not checkpointed) (the time estimates)."""
        _, attention = self._forward_parts(lengths)
        lengths = lengths.to(torch.float64)
        linear = 2 * (self.per_token - self.frozen_below_per_token) * lengths
        return float((linear + attention * (self.layers - self.frozen_below)).sum())


def matmul_shape(model: nn.Module) -> MatmulShape:
    """Count `model`'s linear weights per token (its encoder) and per example (pooler and head), trained or
    frozen (chapter 5, A3). Works on a model built on the meta device: only shapes and flags are read."""
    backbone = model.get_base_model() if hasattr(model, "get_base_model") else model  # a PEFT wrapper
    config = backbone.config
    if config.model_type not in COUNTED_TYPES:
        raise ValueError(f"the matmul count covers BERT-like encoders ({', '.join(COUNTED_TYPES)}), not "
                         f"{config.model_type!r}: no MFU for this model")
    if config.model_type == "modernbert" and getattr(config, "_attn_implementation", None) in UNPADDED_ATTENTION:
        raise ValueError(f"the matmul count assumes padded batches; ModernBERT with {config._attn_implementation} "
                         "drops the padding: no MFU for this model")
    encoder = getattr(backbone, "base_model", backbone)

    def weights(modules, trained_only: bool) -> int:
        return sum(m.weight.numel() for name, m in modules if isinstance(m, nn.Linear)
                   and (m.weight.requires_grad or not trained_only))

    per_token = [(n, m) for n, m in encoder.named_modules() if "pooler" not in n.split(".")]
    per_token_ids = {id(m) for _, m in per_token}
    # PEFT keeps a frozen `original_module` beside the head it trains: only one of the two runs
    per_example = [(n, m) for n, m in backbone.named_modules()
                   if id(m) not in per_token_ids and "original_module" not in n.split(".")]
    frozen = frozen_bottom_layers(backbone)
    frozen_modules = [(n, m) for layer in frozen for n, m in layer.named_modules()]
    return MatmulShape(per_token=weights(per_token, False), per_example=weights(per_example, False),
                       layers=config.num_hidden_layers, hidden=config.hidden_size,
                       per_token_trained=weights(per_token, True), per_example_trained=weights(per_example, True),
                       frozen_below=len(frozen), frozen_below_per_token=weights(frozen_modules, False))


def frozen_bottom_layers(backbone: nn.Module) -> list[nn.Module]:
    """The encoder layers below the lowest one a gradient reaches: none while anything of the embeddings trains
    (or the layers are not found as the config counts them), else the bottom layers with no trained weight
    (chapter 8's frozen layers; LoRA adapts every layer) (chapter 5, A3)."""
    embeddings = [p for name, p in backbone.named_parameters()
                  if any("embeddings" in part for part in name.split("."))]  # ELECTRA's embeddings_project too
    _, blocks = find_encoder_layers(backbone)
    if any(p.requires_grad for p in embeddings) or len(blocks) != backbone.config.num_hidden_layers:
        return []
    frozen = []
    for block in blocks:
        if any(p.requires_grad for p in block.parameters()):
            break
        frozen.append(block)
    return frozen


def counted_shape(model: nn.Module) -> MatmulShape | None:
    """The model's matmul shape, or None for an architecture the count does not cover (no MFU for it)."""
    try:
        return matmul_shape(model)
    except ValueError:
        return None


def non_embedding_parameters(model: nn.Module) -> int:
    """The classifier's parameters less its embeddings module's (word, position and token-type embeddings and
    their LayerNorm), which look tokens up and multiply nothing: N in Kaplan et al. (2020)'s C ≈ 6N FLOPs per
    token (the introduction's minutes note, A3, and the time estimates' fallback for an architecture the matmul
    count does not cover, `bertmem.memory.speed.six_n_flops`). Works on a model built on the meta device."""
    owner = embeddings_module(model, model.get_input_embeddings())
    embedding = {id(p) for p in owner.parameters()} if owner is not None else set()
    return sum(p.numel() for p in model.parameters() if id(p) not in embedding)


__all__ = ["COUNTED_TYPES", "MatmulShape", "counted_shape", "frozen_bottom_layers", "matmul_shape",
           "non_embedding_parameters"]
