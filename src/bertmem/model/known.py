"""Checkpoints known offline: their configurations travel with the package (`bertmem plan`, "Will it fit?").

A memory estimate needs a model's shapes, not its weights, so the configuration of each checkpoint below is
vendored in `bertmem/recorded/hub_configs.json`: the keys of the Hub's `config.json` that decide the model's
shapes and its forward pass, copied from the model's Hub page (huggingface.co/<id>/blob/main/config.json).
An estimate for any of them runs offline; the classifier built from it has random weights, the same shapes and cost.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.resources import files


# every known checkpoint's configuration, by Hub id: the one list of known checkpoints (add one there)
_VENDORED: dict[str, dict] = json.loads(
    files("bertmem").joinpath("recorded", "hub_configs.json").read_text(encoding="utf-8"))


@dataclass(frozen=True)
class KnownModel:
    """A checkpoint whose configuration ships with the package (the "Will it fit?" page)."""

    hub_id: str

    @property
    def short_id(self) -> str:
        """The id without its owner, as older code and tutorials spell it: 'roberta-large'."""
        return self.hub_id.split("/", 1)[1]


KNOWN_MODELS = {hub_id: KnownModel(hub_id) for hub_id in _VENDORED}
_BY_SHORT_ID = {model.short_id: model for model in KNOWN_MODELS.values()}


def known_model(model_id: str) -> KnownModel | None:
    """The known checkpoint behind a Hub id, with or without its owner ('roberta-large'); None for any other id."""
    return KNOWN_MODELS.get(model_id) or _BY_SHORT_ID.get(model_id)


def known_config_dict(model_id: str) -> dict | None:
    """The vendored configuration of a known checkpoint as a dict (with `model_type`), or None."""
    model = known_model(model_id)
    return None if model is None else dict(_VENDORED[model.hub_id])


def known_config(model_id: str, num_labels: int = 2):
    """A transformers config for a known checkpoint, built offline from its vendored file, or None (chapter 1)."""
    from transformers import AutoConfig

    values = known_config_dict(model_id)
    if values is None:
        return None
    model_type = values.pop("model_type")
    values.pop("architectures", None)  # the pretraining head; the planner builds a sequence classifier
    return AutoConfig.for_model(model_type, num_labels=num_labels, **values)


def usable_positions(config) -> int | None:
    """How many tokens the position table takes (None: no table limits the length); RoBERTa-style models spend
    pad_token_id + 1 rows on an offset (`bertmem plan`)."""
    limit = getattr(config, "max_position_embeddings", None)
    model_type = getattr(config, "model_type", "")
    if limit is None or (model_type == "deberta-v2" and not getattr(config, "position_biased_input", True)):
        return None  # relative positions only: any length runs (DeBERTa-v3 was trained at 512)
    if model_type in ("roberta", "xlm-roberta", "camembert"):
        return limit - ((config.pad_token_id or 0) + 1)
    return limit


def attention_kernels(config) -> tuple[str, ...]:
    """The attention implementations transformers has for this model's classifier: ('eager', 'sdpa') or
    ('eager',) (DeBERTa-v2/v3 has no SDPA path) (`bertmem plan`)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING

    model_class = MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING.get(type(config), None)
    if model_class is None:
        raise ValueError(f"transformers has no sequence classifier for model type {config.model_type!r}: "
                         "choose an encoder with one (BERT, RoBERTa, DeBERTa, ELECTRA, ModernBERT, …)")
    return ("eager", "sdpa") if getattr(model_class, "_supports_sdpa", False) else ("eager",)


def takes_token_types(model, config) -> bool:
    """Whether a batch for this model carries token_type_ids: its forward takes them and it has segment embeddings
    to read them with (BERT, ELECTRA; not RoBERTa's single type, DistilBERT, DeBERTa-v3 or ModernBERT)."""
    import inspect

    return ("token_type_ids" in inspect.signature(model.forward).parameters
            and (getattr(config, "type_vocab_size", 0) or 0) > 1)
