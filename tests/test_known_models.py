"""Every checkpoint the planner knows answers offline, with its published shapes (`bertmem.model.known`)."""

import pytest

from bertmem.model.known import KNOWN_MODELS, known_config, known_model, usable_positions

# hub id: (hidden size, layers, heads, feed-forward size, vocabulary, tokens the position table takes)
PUBLISHED = {
    "google-bert/bert-base-uncased": (768, 12, 12, 3072, 30522, 512),
    "google-bert/bert-large-uncased": (1024, 24, 16, 4096, 30522, 512),
    "distilbert/distilbert-base-uncased": (768, 6, 12, 3072, 30522, 512),
    "FacebookAI/roberta-base": (768, 12, 12, 3072, 50265, 512),
    "FacebookAI/roberta-large": (1024, 24, 16, 4096, 50265, 512),
    "google/electra-base-discriminator": (768, 12, 12, 3072, 30522, 512),
    "google/electra-large-discriminator": (1024, 24, 16, 4096, 30522, 512),
    "microsoft/deberta-v3-base": (768, 12, 12, 3072, 128100, None),  # relative positions only: no table limit
    "microsoft/deberta-v3-large": (1024, 24, 16, 4096, 128100, None),
    "FacebookAI/xlm-roberta-base": (768, 12, 12, 3072, 250002, 512),
    "FacebookAI/xlm-roberta-large": (1024, 24, 16, 4096, 250002, 512),
    "answerdotai/ModernBERT-base": (768, 22, 12, 1152, 50368, 8192),
    "answerdotai/ModernBERT-large": (1024, 28, 16, 2624, 50368, 8192),
}


def test_the_known_checkpoints_are_the_published_ones():
    assert sorted(KNOWN_MODELS) == sorted(PUBLISHED)


@pytest.mark.parametrize("hub_id", sorted(PUBLISHED))
def test_a_known_checkpoint_has_its_published_shapes_offline(hub_id, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    config = known_config(hub_id, num_labels=3)
    hidden, layers, heads, ffn, vocab, positions = PUBLISHED[hub_id]
    assert (config.hidden_size, config.num_hidden_layers, config.num_attention_heads) == (hidden, layers, heads)
    assert (getattr(config, "intermediate_size", None) or config.hidden_dim) == ffn
    assert (config.vocab_size, usable_positions(config), config.num_labels) == (vocab, positions, 3)


def test_a_known_checkpoint_answers_to_its_id_without_the_owner():
    assert known_model("roberta-large").hub_id == "FacebookAI/roberta-large"
    assert known_model("bert-base-uncased").hub_id == "google-bert/bert-base-uncased"
    assert known_model("someone/roberta-large-finetuned") is None and known_config("nobody/model") is None


@pytest.mark.slow
@pytest.mark.parametrize("hub_id", sorted(PUBLISHED))
def test_bertmem_plan_answers_offline_for_every_known_checkpoint(hub_id, capsys, monkeypatch, tmp_path):
    """`bertmem plan --model <Hub id>` with no network and an empty Hugging Face cache."""
    import json

    from bertmem.cli import main

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path))
    assert main(["plan", "--model", hub_id, "--max-length", "64", "--effective-batch", "2", "--lora-r", "8",
                 "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["micro_batch"] == 2 and answer["breakdown"]["weights"] > 0
    if hub_id.startswith("microsoft/deberta"):  # no SDPA in transformers: planned with eager, and said so
        assert answer["request"]["attention"] == "eager" and "no sdpa attention" in answer["notes"][0]
    else:
        assert answer["request"]["attention"] == "sdpa" and answer["notes"] == []


def test_a_roberta_position_table_takes_two_tokens_fewer_than_its_rows():
    config = known_config("FacebookAI/roberta-base")
    assert config.max_position_embeddings == 514 and usable_positions(config) == 512


@pytest.mark.slow
def test_a_length_past_the_usable_positions_is_refused_with_what_to_change():
    from bertmem.memory.estimate import estimate_step_memory

    with pytest.raises(ValueError, match="exceeds the 512 positions.*max_position_embeddings >= 515"):
        estimate_step_memory("FacebookAI/roberta-base", 1, 513)


@pytest.mark.slow
def test_only_models_with_segment_embeddings_get_token_types_and_deberta_has_no_sdpa():
    import torch
    from transformers import AutoModelForSequenceClassification

    from bertmem.model.known import attention_kernels, takes_token_types

    for hub_id, expected in (("google-bert/bert-base-uncased", True), ("FacebookAI/roberta-base", False),
                             ("distilbert/distilbert-base-uncased", False), ("answerdotai/ModernBERT-base", False)):
        config = known_config(hub_id)
        with torch.device("meta"):
            model = AutoModelForSequenceClassification.from_config(config)
        assert takes_token_types(model, config) is expected, hub_id
    assert attention_kernels(known_config("microsoft/deberta-v3-base")) == ("eager",)
    assert attention_kernels(known_config("answerdotai/ModernBERT-base")) == ("eager", "sdpa")
