"""Shared fixtures: offline Hub, a tiny random BERT, a synthetic text frame."""

import dataclasses
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a Hub call would otherwise hang ~50 s before failing
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):  # two workers on two cores: one thread each, their subprocesses too
    os.environ["OMP_NUM_THREADS"] = "1"

import pandas as pd
import pytest
import torch

from bertmem.book import ChapterSettings, chapter_settings
from bertmem.model.loading import classifier_from_config, tiny_bert_config

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


@pytest.fixture
def bf16_cpu(monkeypatch):
    """This CPU treated as one with native bf16 ($BERTMEM_CPU_BF16=1; emulated where it has none), so the bf16
    path runs on every machine CI may use."""
    monkeypatch.setenv("BERTMEM_CPU_BF16", "1")


@pytest.fixture
def no_bf16_cpu(monkeypatch):
    """This CPU treated as one without native bf16 ($BERTMEM_CPU_BF16=0), as most laptop CPUs are."""
    monkeypatch.setenv("BERTMEM_CPU_BF16", "0")


@pytest.fixture
def synthetic_frame() -> pd.DataFrame:
    """60 distinct short reviews, 30 per label, in a fixed order."""
    rows = [(f"review number {i} was {'great' if i % 2 else 'awful'}", i % 2) for i in range(60)]
    return pd.DataFrame(rows, columns=["text", "label"])


@pytest.fixture
def tiny_model():
    """A 2-layer random BERT classifier (no download)."""
    torch.manual_seed(0)
    return classifier_from_config(tiny_bert_config())


@pytest.fixture
def tiny_batches():
    """Four batches of random token ids with labels written into token 1 (learnable)."""
    g = torch.Generator().manual_seed(0)
    batches = []
    for _ in range(4):
        ids = torch.randint(5, 1000, (8, 16), generator=g)
        labels = torch.randint(0, 2, (8,), generator=g)
        ids[:, 1] = 7 + labels  # the label is written in token 1: easy to learn
        batches.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels})
    return batches


@pytest.fixture(scope="session")
def reviews_csv(tmp_path_factory):
    """120 short reviews with arbitrary column names and string labels."""
    words = {"pos": "great lovely superb fun", "neg": "awful boring dull bad"}
    rows = [(f"movie {i} was {words['pos' if i % 2 else 'neg'].split()[i % 4]} and {i % 7} stars",
             "pos" if i % 2 else "neg") for i in range(120)]
    path = tmp_path_factory.mktemp("data") / "reviews.csv"
    pd.DataFrame(rows, columns=["review", "sentiment"]).to_csv(path, index=False)
    return path


@pytest.fixture(scope="session")
def tokenizer():
    """MiniLM's tokenizer (bert-base-uncased's vocabulary), loaded once per test run (tests must not change it)."""
    from bertmem.model.loading import MINILM_ID, load_tokenizer

    return load_tokenizer(MINILM_ID)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, tokenizer):
    """A folder that from_pretrained reads as a model id: a tiny random BERT encoder (2 layers, 32 wide, 512
    positions, MiniLM's vocabulary) and MiniLM's tokenizer. Each load adds a fresh head for its own labels; for
    tests where a pretrained model's behaviour is not the subject (`BERTMEM_MODEL_ID` or `--model` this folder)."""
    from transformers import AutoModel

    folder = tmp_path_factory.mktemp("tiny-bert")
    torch.manual_seed(0)
    config = tiny_bert_config(vocab_size=tokenizer.vocab_size, max_position_embeddings=512)
    AutoModel.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def tiny_bert(monkeypatch, tiny_model_dir) -> str:
    """The profile's model is a tiny random BERT (MiniLM's tokenizer): these tests are about a reader's edit
    reaching the result, not about what the pretrained model learns (the Try it tests ask for it too)."""
    monkeypatch.setenv("BERTMEM_MODEL_ID", str(tiny_model_dir))
    return str(tiny_model_dir)


@pytest.fixture
def tiny_settings(tmp_path, synthetic_frame):
    """chapter_settings with the chapter's recipe on 16 rows of a small file, one seed."""
    path = tmp_path / "reviews.csv"
    synthetic_frame.to_csv(path, index=False)

    def settings(chapter, profile):
        data, recipe, _ = chapter_settings(chapter, profile)
        data = dataclasses.replace(data, dataset=str(path), train_size=16, eval_size=8, max_length=16,
                                   micro_batch=8)
        return ChapterSettings(data, recipe, (0,))

    return settings
