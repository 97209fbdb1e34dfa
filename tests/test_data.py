import os

import datasets
import pandas as pd
import pytest
import torch

from bertmem.data import frames as data
from bertmem.data.frames import (
    load_text_classification,
    make_loader,
    prepare_frame,
    read_split,
    subsample,
    token_length_stats,
    tokenize_frame,
)
from bertmem.model.loading import MINILM_ID, load_tokenizer



def write_mirror(tmp_path, frame, name="imdb", split="train"):
    (tmp_path / name).mkdir(parents=True, exist_ok=True)
    frame.to_parquet(tmp_path / name / f"{split}.parquet")
    return tmp_path


def test_hub_and_mirror_give_the_same_sample(tmp_path, synthetic_frame, monkeypatch):
    shuffled = synthetic_frame.sample(frac=1.0, random_state=7).reset_index(drop=True)
    assert not shuffled["text"].equals(synthetic_frame["text"])  # the row order really differs
    mirror = write_mirror(tmp_path, synthetic_frame)
    calls = []

    def fake_load_dataset(hub_id, split):
        calls.append((hub_id, split))
        return datasets.Dataset.from_pandas(shuffled)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    monkeypatch.delenv(data.MIRROR_ENV, raising=False)
    from_hub = load_text_classification("imdb", "train", size=20, seed=1)
    from_mirror = load_text_classification("imdb", "train", size=20, seed=1, mirror=mirror)
    assert calls == [("stanfordnlp/imdb", "train")]
    pd.testing.assert_frame_equal(from_hub, from_mirror)
    assert from_hub["label"].value_counts().to_dict() == {0: 10, 1: 10}


def test_mirror_from_environment_variable(tmp_path, synthetic_frame, monkeypatch):
    monkeypatch.setenv(data.MIRROR_ENV, str(write_mirror(tmp_path, synthetic_frame, "sst2", "validation")))
    assert len(read_split("sst2", "validation")) == 60
    with pytest.raises(ValueError, match="no sst2/train.parquet"):
        read_split("sst2", "train")


def test_subsample_is_balanced_deterministic_and_seed_dependent(synthetic_frame):
    a, b = subsample(synthetic_frame, 11, seed=0), subsample(synthetic_frame[::-1], 11, seed=0)
    pd.testing.assert_frame_equal(a, b)
    assert sorted(a["label"].value_counts().tolist()) == [5, 6]
    assert set(subsample(synthetic_frame, 11, seed=1)["text"]) != set(a["text"])


@pytest.mark.parametrize("suffix", [".csv", ".json", ".jsonl", ".parquet"])
def test_own_files_with_custom_columns(tmp_path, suffix, capsys):
    frame = pd.DataFrame({"review": ["good film", "bad film", "fine film"], "sentiment": ["pos", "neg", "pos"]})
    path = tmp_path / f"mine{suffix}"
    {".csv": lambda: frame.to_csv(path, index=False), ".json": lambda: frame.to_json(path, orient="records"),
     ".jsonl": lambda: frame.to_json(path, orient="records", lines=True),
     ".parquet": lambda: frame.to_parquet(path)}[suffix]()
    loaded = load_text_classification(path, text_column="review", label_column="sentiment")
    assert loaded["label"].tolist() == [1, 0, 1]
    assert loaded.attrs["label_names"] == ["neg", "pos"]
    assert "'neg': 0, 'pos': 1" in capsys.readouterr().out


def test_folder_of_split_files(tmp_path, synthetic_frame):
    synthetic_frame.to_csv(tmp_path / "test.csv", index=False)
    assert len(load_text_classification(tmp_path, "test")) == 60


@pytest.mark.parametrize("frame, message", [
    (pd.DataFrame({"txt": ["a"], "label": [0]}), r"missing column\(s\) \['text'\]"),
    (pd.DataFrame({"text": ["a", "b"], "label": [0.5, 1.0]}), r"fractional labels \(0.5\) in row 0"),
    (pd.DataFrame({"text": ["a", "b"], "label": [0, 0]}), "only one class"),
    (pd.DataFrame({"text": pd.Series([], dtype=str), "label": pd.Series([], dtype=int)}), "has no rows"),
    (pd.DataFrame({"text": ["a", "  "], "label": [0, 1]}), "no text in column 'text' in row 1: pass --drop-empty"),
    (pd.DataFrame({"text": ["a", None], "label": [0, 1]}), "no text in column 'text' in row 1"),
    (pd.DataFrame({"text": ["a", 5], "label": [0, 1]}), r"non-text values \(int\) in column 'text' in row 1"),
    (pd.DataFrame({"text": ["a", "b"], "label": [0, None]}), "no label in column 'label' in row 1: pass --drop-empty"),
])
def test_bad_frames_are_clear_errors(frame, message):
    with pytest.raises(ValueError, match=message):
        prepare_frame(frame)


def test_unknown_name_and_too_large_subset(synthetic_frame):
    with pytest.raises(ValueError, match="unknown dataset 'imbd'"):
        read_split("imbd")
    with pytest.raises(ValueError, match="only 60"):
        subsample(synthetic_frame, 61)
    with pytest.raises(ValueError, match="unsupported file type"):
        read_split(__file__)


def test_missing_mirror_folder_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        read_split("imdb", mirror=tmp_path / "nope")


def test_tokenize_truncates_and_collator_pads(tokenizer, synthetic_frame):
    frame = synthetic_frame.head(4).copy()
    frame.loc[0, "text"] = "word " * 100
    ds = tokenize_frame(frame, tokenizer, max_length=16)
    assert max(ds.lengths()) == 16 and min(ds.lengths()) < 16
    batch = next(iter(make_loader(ds, tokenizer, batch_size=4)))
    assert batch["input_ids"].shape == (4, 16)
    assert torch.equal(batch["labels"], torch.tensor(frame["label"].tolist()))
    assert batch["attention_mask"][1].sum() == ds.lengths()[1]


def test_token_length_stats(tokenizer):
    stats = token_length_stats(["one two", "one two three four five six"], tokenizer, max_length=5)
    assert stats["count"] == 2 and stats["max"] == 8 and stats["frac_truncated"] == 0.5


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get(data.MIRROR_ENV), reason="needs the data mirror (CI sets it)")
def test_real_imdb_mirror_sample():
    frame = load_text_classification("imdb", "test", size=50, seed=0)
    assert len(frame) == 50 and frame["label"].value_counts().to_dict() == {0: 25, 1: 25}
    assert frame["text"].str.len().min() > 10


def test_head_tail_truncation_keeps_both_ends():

    tokenizer = load_tokenizer(MINILM_ID)
    words = " ".join(f"w{i}" for i in range(300))
    frame = pd.DataFrame({"text": [words, "short review"], "label": [0, 1]})
    head = tokenize_frame(frame, tokenizer, 64)
    both = tokenize_frame(frame, tokenizer, 64, truncation="head+tail", head_tokens=10)
    assert head.lengths() == both.lengths() and head.lengths()[0] == 64
    full = tokenizer(words, add_special_tokens=False)["input_ids"]
    ids = both.encodings["input_ids"][0]
    assert ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id
    assert ids[1:11] == full[:10] and ids[11:-1] == full[-52:]
    assert both.encodings["input_ids"][1] == head.encodings["input_ids"][1]  # short texts are untouched
    tail = tokenize_frame(frame, tokenizer, 64, truncation="tail")
    assert tail.encodings["input_ids"][0][1:-1] == full[-62:]  # the last 62 tokens, between [CLS] and [SEP]
    with pytest.raises(ValueError, match="truncation"):
        tokenize_frame(frame, tokenizer, 64, truncation="middle")
    with pytest.raises(ValueError, match="tail truncation keeps no head"):
        tokenize_frame(frame, tokenizer, 64, truncation="tail", head_tokens=10)
    with pytest.raises(ValueError, match="head_tokens"):
        tokenize_frame(frame, tokenizer, 64, truncation="head+tail", head_tokens=100)


def test_build_loaders_cuts_both_splits_as_the_data_config_says():
    from bertmem.data.loaders import DataConfig, build_loaders

    tokenizer = load_tokenizer(MINILM_ID)
    words = " ".join(f"w{i}" for i in range(300))
    train_frame = pd.DataFrame({"text": [words, "short review", words, "fine"], "label": [0, 1, 0, 1]})
    eval_frame = pd.DataFrame({"text": [words, "ok"], "label": [1, 0]})
    last_real_token = tokenizer(words, add_special_tokens=False)["input_ids"][-1]
    for truncation in ("head", "tail", "head+tail"):
        data = DataConfig(max_length=32, micro_batch=2, truncation=truncation)
        loaders = build_loaders(data, tokenizer, (train_frame, eval_frame), seed=0)
        for loader in loaders:
            long = next(row for b in loader for row in b["input_ids"] if len(row) == 32)
            assert (int(long[-2]) == last_real_token) == (truncation != "head")  # the review's end kept
        assert len(loaders.train) == 2 and len(loaders.eval) == 1  # evaluation: twice the micro-batch
    with pytest.raises(ValueError, match="truncation must be one of"):
        DataConfig(truncation="middle")


def test_named_datasets_from_the_hub_get_the_mirrors_columns():
    """SST-2 on the Hub is idx/sentence/label; the book reads text/label from the Hub and the mirror alike."""
    import pandas as pd

    from bertmem.data.hub import hub_frame

    hub_sst2 = pd.DataFrame({"idx": [0, 1], "sentence": ["a fine film ", "dull"], "label": [1, 0]})
    frame = hub_frame("sst2", "validation", load=lambda hub_id, split: hub_sst2)
    assert list(frame.columns) == ["text", "label"] and frame["text"].tolist() == ["a fine film ", "dull"]
    imdb = pd.DataFrame({"text": ["x"], "label": [0]})
    assert hub_frame("imdb", "test", load=lambda hub_id, split: imdb).equals(imdb)
    with pytest.raises(ValueError, match="HUB_COLUMNS"):
        hub_frame("rotten_tomatoes", "train", load=lambda hub_id, split: pd.DataFrame({"review": ["x"], "y": [0]}))
