"""Datasets by name: their Hub ids, evaluation splits and column names, loaded from the Hub (chapter 0)."""

from __future__ import annotations

import pandas as pd

MIRROR_ENV = "BERTMEM_DATA_MIRROR"
HUB_IDS = {
    "imdb": "stanfordnlp/imdb",
    "rotten_tomatoes": "cornell-movie-review-data/rotten_tomatoes",
    "sst2": "stanfordnlp/sst2",
}
EVAL_SPLITS = {"imdb": "test", "rotten_tomatoes": "validation", "sst2": "validation"}
# The Hub's own column names where they differ from the mirror's text/label: the book's names read the same
# rows from either place (SST-2 on the Hub: idx, sentence, label).
HUB_COLUMNS = {"sst2": {"sentence": "text"}}


def load_hub(hub_id: str, split: str) -> pd.DataFrame:
    """Load one split from the Hugging Face Hub as a DataFrame."""
    import datasets  # heavy import, only on this path

    try:
        return datasets.load_dataset(hub_id, split=split).to_pandas()
    except Exception as err:  # offline, unknown id, unknown split
        raise ValueError(f"could not load {hub_id!r} split {split!r} from the Hub ({type(err).__name__}: {err}). "
                         f"Offline? Point {MIRROR_ENV} (or mirror=) at a folder holding <name>/<split>.parquet, "
                         "or pass a local file.") from err


def hub_frame(name: str, split: str, load=None) -> pd.DataFrame:
    """A named dataset's split from the Hub with the mirror's columns, text and label (chapter 0)."""
    raw = (load or load_hub)(HUB_IDS[name], split)
    raw = raw.rename(columns=HUB_COLUMNS.get(name, {}))
    missing = [c for c in ("text", "label") if c not in raw.columns]
    if missing:
        raise ValueError(f"{HUB_IDS[name]} on the Hub has columns {list(raw.columns)}, not {missing}: "
                         "add its names to bertmem.data.hub.HUB_COLUMNS")
    return raw[["text", "label"]]
