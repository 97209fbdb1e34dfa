"""Text-classification data: by name, file or Hub id; mirror folder; hash subsampling; tokenize; collate (chapter 0)."""

from __future__ import annotations

import hashlib
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pandas as pd
import torch
from torch.utils.data import DataLoader, Dataset

from bertmem.data.batching import LengthGroupedBatchSampler
from bertmem.data.checks import (
    check_labels_present,
    checked_texts,
    find_column,
    normalize_labels,
)
from bertmem.data.files import SUFFIXES, ReadReport, read_chunks, read_table
from bertmem.data.hub import HUB_IDS, MIRROR_ENV, hub_frame, load_hub


def mirror_folder(mirror: str | os.PathLike | None = None) -> Path | None:
    """The local mirror folder from the argument or $BERTMEM_DATA_MIRROR, or None (chapter 0)."""
    raw = mirror if mirror is not None else os.environ.get(MIRROR_ENV)
    if not raw:
        return None
    path = Path(raw).expanduser()
    if not path.is_dir():
        raise ValueError(f"data mirror folder {path} does not exist: fix {MIRROR_ENV} or the mirror= argument")
    return path


def looks_like_path(name: str) -> bool:
    """A name that can only mean a local file: a data-file suffix, a path prefix, or more than one '/'."""
    return (Path(name).suffix.lower() in SUFFIXES or name.startswith((".", "/", "~"))
            or name.count("/") > 1 or "\\" in name)


def split_file(source: str | os.PathLike, split: str = "train") -> Path | None:
    """The file behind `source`: itself, or <split>.<ext> in a folder; None for a dataset name (chapter A1)."""
    path = Path(source).expanduser()
    if path.is_file():
        return path
    if path.is_dir():
        found = [path / f"{split}{ext}" for ext in SUFFIXES if (path / f"{split}{ext}").is_file()]
        if len(found) != 1:
            raise ValueError(f"folder {path} has {len(found)} files for split {split!r} ({[f.name for f in found]}): "
                             f"it needs exactly one of {[split + ext for ext in SUFFIXES]}")
        return found[0]
    if looks_like_path(str(source)):
        raise FileNotFoundError(f"no such file or folder: {path}")
    return None


def read_split(source: str | os.PathLike, split: str = "train", mirror: str | os.PathLike | None = None,
               encoding: str | None = None, delimiter: str | None = None) -> pd.DataFrame:
    """Raw rows of a dataset name, a file, a folder of <split>.<ext> files, or a Hub id (chapter 0)."""
    file = split_file(source, split)
    if file is not None:
        return read_table(file, encoding, delimiter)
    name = str(source)
    if name in HUB_IDS:
        folder = mirror_folder(mirror)
        if folder is not None:
            file = folder / name / f"{split}.parquet"
            if not file.is_file():
                raise ValueError(f"mirror {folder} has no {name}/{split}.parquet; available: "
                                 f"{sorted(p.name for p in (folder / name).glob('*.parquet'))}")
            return pd.read_parquet(file)
        return hub_frame(name, split)
    if "/" in name:
        return load_hub(name, split)
    raise ValueError(f"unknown dataset {name!r}: use one of {sorted(HUB_IDS)}, a Hub id such as 'user/name', "
                     "or the path of a .csv/.json/.jsonl/.parquet file")


def prepare_frame(
    raw: pd.DataFrame,
    text_column: str = "text",
    label_column: str = "label",
    label_names: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Checked rows as a frame of `text` and integer `label` (chapter 0, A1).

    The label names are in `frame.attrs["label_names"]`; pass the training frame's when
    preparing evaluation rows, so the same classes get the same ids.
    """
    if not isinstance(raw, pd.DataFrame):
        raise TypeError(f"expected a pandas DataFrame, got {type(raw).__name__}")
    if len(raw) == 0:
        raise ValueError("the split has no rows: check that the export wrote its rows, "
                         "or pass another file or split name")
    text_column = find_column(raw, text_column, "text_column")  # or 'Text', ' text '
    label_column = find_column(raw, label_column, "label_column")
    texts = checked_texts(raw[text_column])  # refuses missing, non-text and empty texts
    labels, names = normalize_labels(raw[label_column], label_names)  # -> 0..K-1
    frame = pd.DataFrame({"text": texts.to_numpy(), "label": labels})
    frame.attrs["label_names"] = names
    return frame


# What turns a split's raw rows into checked `text` and `label` columns: `prepare_frame`, or a reader's own
# version with the same signature (chapter A1 passes the one its cell defines, down to every file read).
PrepareFrame = Callable[..., pd.DataFrame]


def load_text_classification(source: str | os.PathLike, split: str = "train", *, text_column: str = "text",
                             label_column: str = "label", mirror: str | os.PathLike | None = None,
                             size: int | None = None, seed: int = 0, label_names: Sequence[str] | None = None,
                             encoding: str | None = None, delimiter: str | None = None,
                             keep_per_label: int | None = None,
                             prepare: PrepareFrame = prepare_frame) -> pd.DataFrame:
    """Load, validate and (optionally) hash-subsample one split, balanced per label (chapter 0).

    `label_names`: encode with the training split's classes (for evaluation data, chapter A1). A file is
    read in chunks when large, keeping per label only the rows a sample of `size` (or `keep_per_label`) can
    pick; `encoding` and `delimiter` override what the reader would choose; `prepare` checks the rows
    (chapter A1).
    """
    file = split_file(source, split)
    if file is None and (encoding or delimiter):
        raise ValueError(f"encoding= and delimiter= are for files; {source!r} is a dataset name")
    if file is None:
        frame = prepare(read_split(source, split, mirror), text_column, label_column, label_names)
    else:
        frame = read_labelled(file, text_column, label_column, label_names, encoding=encoding,
                              delimiter=delimiter, keep_per_label=keep_per_label or size, seed=seed,
                              prepare=prepare)
    return frame if size is None else subsample(frame, size, seed=seed)


def read_labelled(file: Path, text_column: str = "text", label_column: str = "label",
                  label_names: Sequence[str] | None = None, *, encoding: str | None = None,
                  delimiter: str | None = None, keep_per_label: int | None = None, seed: int = 0,
                  chunk_rows: int | None = None, prepare: PrepareFrame = prepare_frame) -> pd.DataFrame:
    """A file's rows checked chunk by chunk, then by `prepare`; errors name the file and the rows (chapter A1).

    With `keep_per_label`, only the rows with the smallest text hashes of each label are kept: every row a
    balanced hash sample of at most that many rows per label can pick, whatever the chunking.
    """
    report, kept, columns = ReadReport(file, ""), [], None
    for chunk in read_chunks(file, encoding, delimiter, chunk_rows, report):
        with naming(file):
            columns = columns or [find_column(chunk, text_column, "text_column"),
                                  find_column(chunk, label_column, "label_column")]
            checked_texts(chunk[columns[0]])
            check_labels_present(chunk[columns[1]])  # numbers or strings: decided once, from every label
        part = chunk[columns]
        if keep_per_label is not None:
            part = part.assign(_key=[text_hash(t, seed) for t in part[columns[0]]],
                               _class=part[columns[1]].astype(str).str.strip())
            part = pd.concat(kept + [part]).sort_values(["_key", columns[0]], kind="stable")
            # every copy of the `keep_per_label` smallest distinct texts: a held-out split drops copies
            rank = part.groupby("_class", sort=False)["_key"].rank(method="dense")
            kept = [part[rank <= keep_per_label]]
        else:
            kept.append(part)
    print(report.line() + (f"; kept at most {keep_per_label} rows per label" if keep_per_label else ""))
    with naming(file):
        frame = prepare(pd.concat(kept)[columns], *columns, label_names=label_names)
    frame.attrs.update(read_report=report.line(), rows_read=report.rows)
    return frame


@contextmanager
def naming(file: Path) -> Iterator[None]:
    """Prefix a ValueError raised inside with the file's name (chapter A1)."""
    try:
        yield
    except ValueError as error:
        raise ValueError(f"{file.name}: {error}") from None


def text_hash(text: str, seed: int = 0) -> str:
    """Stable content hash used to pick rows independently of their order."""
    return hashlib.sha256(f"{seed}\x00{text}".encode("utf-8")).hexdigest()


def subsample(frame: pd.DataFrame, size: int, seed: int = 0) -> pd.DataFrame:
    """Pick `size` rows balanced per label by hash of the text: same rows for any row order (chapter 0)."""
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"size must be a positive int, got {size!r}")
    if size > len(frame):
        raise ValueError(f"requested {size} rows but the split has only {len(frame)}: ask for fewer or use size=None")
    labels = sorted(frame["label"].unique().tolist())
    share, extra = divmod(size, len(labels))
    keyed = frame.assign(_key=[text_hash(t, seed) for t in frame["text"]])
    parts = []
    for i, label in enumerate(labels):
        want = share + (1 if i < extra else 0)
        rows = keyed[keyed["label"] == label].sort_values(["_key", "text"], kind="stable")
        if len(rows) < want:
            raise ValueError(f"label {label} has only {len(rows)} rows, {want} needed for a balanced sample of {size}")
        parts.append(rows.head(want))
    picked = pd.concat(parts).sort_values(["_key", "label"], kind="stable").drop(columns="_key")
    picked = picked.reset_index(drop=True)
    picked.attrs = dict(frame.attrs)
    return picked


class EncodedDataset(Dataset):
    """Tokenized examples as dicts of lists, padded later by the collator (chapter 0)."""

    def __init__(self, encodings: dict[str, list], labels: Sequence[int]):
        self.encodings = encodings
        self.labels = list(labels)

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, idx: int) -> dict[str, Any]:
        item = {k: v[idx] for k, v in self.encodings.items()}
        item["labels"] = self.labels[idx]
        return item

    def lengths(self) -> list[int]:
        """Token count of every example (after truncation)."""
        return [len(ids) for ids in self.encodings["input_ids"]]


TRUNCATIONS = ("head", "tail", "head+tail")


def content_tokens(texts: Sequence[str], tokenizer) -> list[list[int]]:
    """Each text's token ids without [CLS] and [SEP], uncut: what a cut or a window reads (chapters 6, 9)."""
    return tokenizer(list(texts), add_special_tokens=False, truncation=False, verbose=False)["input_ids"]


def tokenize_frame(frame: pd.DataFrame, tokenizer, max_length: int, truncation: str = "head",
                   head_tokens: int | None = None) -> EncodedDataset:
    """Tokenize `text`, cut to max_length; no padding yet (chapter 0); head+tail truncation (chapters 6, 9).

    truncation="head" keeps the first tokens (the usual cut); "head+tail" keeps the first `head_tokens`
    (default a quarter) and the last ones, as Sun et al. (2019) found best for long IMDb reviews; "tail" keeps
    the last ones only.
    """
    if max_length < 2:
        raise ValueError(f"max_length must be >= 2, got {max_length}")
    if truncation not in TRUNCATIONS:
        raise ValueError(f"truncation must be one of {TRUNCATIONS}, got {truncation!r}")
    model_max = getattr(tokenizer, "model_max_length", None)
    if model_max is not None and model_max < 10**6 and max_length > model_max:
        raise ValueError(f"max_length={max_length} exceeds the tokenizer's model_max_length={model_max}")
    if truncation == "head":
        enc = tokenizer(frame["text"].tolist(), truncation=True, max_length=max_length)
        return EncodedDataset({k: list(v) for k, v in enc.items()}, frame["label"].tolist())
    if tokenizer.cls_token_id is None or tokenizer.sep_token_id is None:
        raise TypeError(f"{truncation} truncation needs a BERT-style tokenizer with [CLS] and [SEP] tokens")
    budget = max_length - 2
    if truncation == "tail" and head_tokens not in (None, 0):
        raise ValueError(f"tail truncation keeps no head: drop head_tokens={head_tokens} or use head+tail")
    head = 0 if truncation == "tail" else budget // 4 if head_tokens is None else head_tokens
    if not 0 <= head <= budget:
        raise ValueError(f"head_tokens must be in [0, {budget}] for max_length={max_length}, got {head_tokens}")
    pieces = content_tokens(frame["text"], tokenizer)
    ids = [[tokenizer.cls_token_id] + (p if len(p) <= budget else p[:head] + p[len(p) - (budget - head):])
           + [tokenizer.sep_token_id] for p in pieces]
    encodings = {"input_ids": ids, "attention_mask": [[1] * len(x) for x in ids]}
    if "token_type_ids" in tokenizer.model_input_names:
        encodings["token_type_ids"] = [[0] * len(x) for x in ids]
    return EncodedDataset(encodings, frame["label"].tolist())


def make_loader(dataset: EncodedDataset, tokenizer, batch_size: int, shuffle: bool = False,
                seed: int = 0, group_by_length: bool = False, pad_to_max_length: int | None = None) -> DataLoader:
    """A DataLoader with dynamic padding and a seeded shuffle (chapter 0); length-grouped batches (chapter 5).

    pad_to_max_length=N pads every batch to N tokens instead (the naive baseline of chapter 5).
    """
    from transformers import DataCollatorWithPadding

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if pad_to_max_length is None:
        collator = DataCollatorWithPadding(tokenizer)
    else:
        collator = DataCollatorWithPadding(tokenizer, padding="max_length", max_length=pad_to_max_length)
    if group_by_length:
        sampler = LengthGroupedBatchSampler(dataset.lengths(), batch_size, shuffle=shuffle, seed=seed)
        return DataLoader(dataset, batch_sampler=sampler, collate_fn=collator)
    generator = torch.Generator().manual_seed(seed) if shuffle else None
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, generator=generator, collate_fn=collator)


def token_length_stats(texts: Sequence[str], tokenizer, max_length: int = 512) -> dict[str, float]:
    """Token counts (with special tokens, no truncation) and the share longer than max_length (chapter 0)."""
    if len(texts) == 0:
        raise ValueError("no texts given")
    lengths = np.array([len(ids) for ids in tokenizer(list(texts), truncation=False, verbose=False)["input_ids"]])
    return {
        "count": int(lengths.size),
        "mean": float(lengths.mean()),
        "median": float(np.median(lengths)),
        "p95": float(np.percentile(lengths, 95)),
        "max": int(lengths.max()),
        "max_length": int(max_length),
        "frac_truncated": float((lengths > max_length).mean()),
        "lengths": lengths,
    }
