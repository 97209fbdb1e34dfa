"""Text-classification data: by name, file or Hub id; mirror folder; hash subsampling; tokenize; collate (chapter 0)."""

from __future__ import annotations

import hashlib
import os
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import pandas as pd
import torch
from torch.utils.data import DataLoader, Dataset

from bertmem.data.batching import LengthGroupedBatchSampler
from bertmem.data.checks import (
    find_column,
    label_values,
    left_out_note,
    normalize_labels,
    refuse_unusable,
    unusable_masks,
    unusable_rows,
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
    *,
    second_text_column: str | None = None,
    join_texts: bool = False,
    drop_empty: bool = False,
) -> pd.DataFrame:
    """Checked rows: `text` (and `text_pair`) and integer `label` (chapter 0, A1).

    It sees the whole frame as read, every column. A second text column (a body after
    a subject) becomes the tokenizer's text pair, or with `join_texts` one text with a
    line break between. Rows without text or label are refused, or with `drop_empty`
    left out and counted. The label names are in `frame.attrs["label_names"]`; pass
    the training frame's when preparing evaluation rows, so classes keep their ids.
    """
    if not isinstance(raw, pd.DataFrame):
        raise TypeError(f"expected a pandas DataFrame, got {type(raw).__name__}")
    if len(raw) == 0:
        raise ValueError("the split has no rows: check that the export wrote its rows, "
                         "or pass another file or split name")
    columns = text_columns(raw, text_column, second_text_column)  # or 'Text', ' text '
    label_column = find_column(raw, label_column, "label_column")
    left_out, note = unusable_rows(raw, columns, label_column, drop_empty)
    if note:
        print(note)
    rows = raw[~left_out]
    texts = [rows[c].fillna("").to_numpy() for c in columns]
    labels, names = normalize_labels(rows[label_column], label_names)  # -> 0..K-1
    frame = text_frame(texts, join_texts)
    frame["label"] = labels
    frame.attrs.update(label_names=names, left_out=int(left_out.sum()))
    return frame


def text_frame(texts: Sequence[Sequence[str]], join_texts: bool = False) -> pd.DataFrame:
    """`text`, and `text_pair` for a second column, or the two joined by a line break (chapter A1)."""
    if len(texts) == 2 and join_texts:  # one text: the first column, a line break, the second
        return pd.DataFrame({"text": [f"{a.strip()}\n{b.strip()}".strip() for a, b in zip(*texts)]})
    frame = pd.DataFrame({"text": texts[0]})
    if len(texts) == 2:
        frame["text_pair"] = texts[1]  # BERT's second segment, after [SEP]
    return frame


def row_keys(frame: pd.DataFrame) -> list[str]:
    """What identifies an example: its text, and its text pair where there is one (hashes, duplicates)."""
    if "text_pair" not in frame:
        return frame["text"].tolist()
    return [f"{a}\x00{b}" for a, b in zip(frame["text"], frame["text_pair"])]


# What turns a split's raw rows into checked `text` and `label` columns: `prepare_frame`, or a reader's own
# version with the same signature (chapter A1 passes the one its cell defines, down to every file read). The
# keyword options (second_text_column, join_texts, drop_empty) are passed only when set, so a reader's version
# with the four positional parameters keeps working.
PrepareFrame = Callable[..., pd.DataFrame]
PREPARE_OPTIONS = {"second_text_column": None, "join_texts": False, "drop_empty": False}


def prepare_options(**options: Any) -> dict[str, Any]:
    """The prepare options that differ from their defaults: what a `prepare` call passes on (chapter A1)."""
    unknown = set(options) - set(PREPARE_OPTIONS)
    if unknown:
        raise TypeError(f"unknown prepare option(s) {sorted(unknown)}: use {sorted(PREPARE_OPTIONS)}")
    return {k: v for k, v in options.items() if v != PREPARE_OPTIONS[k]}


def load_text_classification(source: str | os.PathLike, split: str = "train", *, text_column: str = "text",
                             label_column: str = "label", mirror: str | os.PathLike | None = None,
                             size: int | None = None, seed: int = 0, label_names: Sequence[str] | None = None,
                             encoding: str | None = None, delimiter: str | None = None,
                             keep_per_label: int | None = None, balance: bool = False,
                             prepare: PrepareFrame = prepare_frame, flag: str = "--train-size",
                             **options: Any) -> pd.DataFrame:
    """Load, validate and (optionally) hash-subsample one split, stratified by class (chapter 0).

    `size` rows keep the classes' proportions; `balance` draws the same number per class instead.
    `label_names`: encode with the training split's classes (for evaluation data, chapter A1). A file is
    read in chunks when large, keeping per label only the rows a sample of `size` (or `keep_per_label`) can
    pick; `encoding` and `delimiter` override what the reader would choose; `prepare` checks the rows and
    `options` are its keyword options (`prepare_frame`'s: second_text_column, join_texts, drop_empty). `flag`:
    the setting a too-large `size` is named by.
    """
    options = prepare_options(**options)
    file = split_file(source, split)
    if file is None and (encoding or delimiter):
        raise ValueError(f"encoding= and delimiter= are for files; {source!r} is a dataset name")
    if file is None:
        frame = prepare(read_split(source, split, mirror), text_column, label_column, label_names, **options)
    else:
        frame = read_labelled(file, text_column, label_column, label_names, encoding=encoding,
                              delimiter=delimiter, keep_per_label=keep_per_label or size, seed=seed,
                              prepare=prepare, **options)
    return frame if size is None else subsample(frame, size, seed=seed, balance=balance, flag=flag)


def read_labelled(file: Path, text_column: str = "text", label_column: str = "label",
                  label_names: Sequence[str] | None = None, *, encoding: str | None = None,
                  delimiter: str | None = None, keep_per_label: int | None = None, seed: int = 0,
                  chunk_rows: int | None = None, prepare: PrepareFrame = prepare_frame,
                  **options: Any) -> pd.DataFrame:
    """A file's rows as `prepare` makes them from every column; errors name the file and the rows (chapter A1).

    `prepare` sees the whole file as read. With `keep_per_label` and the package's own `prepare_frame`, a file
    read in chunks keeps per label only the rows with the smallest text hashes: every row a hash sample of at
    most that many rows per label can pick, whatever the chunking (a reader's own `prepare` may make other
    texts, so it reads every row). `frame.attrs["label_counts"]` holds each class's rows in the whole file.
    """
    options = prepare_options(**options)
    report, kept = ReadReport(file, ""), []
    prefilter = keep_per_label is not None and prepare is prepare_frame
    columns, masks, counts = None, [], Counter()
    for chunk in read_chunks(file, encoding, delimiter, chunk_rows, report):
        if not prefilter:
            kept.append(chunk)
            continue
        with naming(file):
            columns = columns or text_and_label_columns(chunk, text_column, label_column, options)
            empty, unlabelled = unusable_masks(chunk, columns[:-1], columns[-1])
            if not options.get("drop_empty"):
                refuse_unusable(empty, unlabelled, columns[:-1], columns[-1])
        masks.append((empty, unlabelled))
        part = chunk[~(empty | unlabelled)]
        texts = text_frame([part[c].fillna("").to_numpy() for c in columns[:-1]], options.get("join_texts", False))
        part = part.assign(_key=[text_hash(t, seed) for t in row_keys(texts)],
                           _class=part[columns[-1]].astype(str).str.strip())
        counts.update(part["_class"].tolist())
        part = pd.concat(kept + [part]).sort_values("_key", kind="stable")
        # every copy of the `keep_per_label` smallest distinct texts: a held-out split drops copies
        rank = part.groupby("_class", sort=False)["_key"].rank(method="dense")
        kept = [part[rank <= keep_per_label]]
    print(report.line() + (f"; kept at most {keep_per_label} rows per label" if prefilter else ""))
    rows = pd.concat(kept) if len(kept) > 1 else kept[0]
    with naming(file):
        if prefilter:  # empty rows are already left out (or refused) above, counted over every chunk
            note = left_out_note(*(pd.concat(m) for m in zip(*masks)))
            if note:
                print(note)
            frame = prepare(rows.drop(columns=["_key", "_class"]), text_column, label_column, label_names,
                            **{k: v for k, v in options.items() if k != "drop_empty"})
        else:
            frame = prepare(rows, text_column, label_column, label_names, **options)
    frame.attrs.update(read_report=report.line(), rows_read=report.rows)
    if prefilter:
        frame.attrs["label_counts"] = counts_by_id(counts, frame.attrs["label_names"])
        frame.attrs["left_out"] = int(sum(int((e | u).sum()) for e, u in masks))
    return frame


def text_columns(raw: pd.DataFrame, text_column: str, second_text_column: str | None = None) -> list[str]:
    """The text column, and the second one where given, as the frame spells them (chapter A1, predict)."""
    columns = [find_column(raw, text_column, "text_column")]
    if second_text_column is not None:
        columns.append(find_column(raw, second_text_column, "second_text_column"))
    return columns


def text_and_label_columns(raw: pd.DataFrame, text_column: str, label_column: str,
                           options: dict[str, Any]) -> list[str]:
    """The text column(s) and the label column as the file spells them (chapter A1)."""
    return (text_columns(raw, text_column, options.get("second_text_column"))
            + [find_column(raw, label_column, "label_column")])


def counts_by_id(counts: Counter, names: Sequence[str]) -> dict[int, int]:
    """Rows per class id from rows per label as written ("1.0" and "1" are one class, as the labels read)."""
    written = list(counts)
    as_names = [str(v) for v in label_values(pd.Series(written, dtype=object), say=False)] if written else []
    ids = {name: i for i, name in enumerate(names)}
    by_id: Counter = Counter()
    for label, name in zip(written, as_names):
        if name in ids:
            by_id[ids[name]] += counts[label]
    return dict(by_id)


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


def class_shares(counts: dict[int, int], size: int, balance: bool = False) -> dict[int, int]:
    """Rows per class for a sample of `size`: the classes' proportions (largest remainders, at least one row
    each), or with `balance` the same number each (chapter 0, A1)."""
    classes, total = sorted(counts), sum(counts.values())
    if size > total:
        raise ValueError(f"a sample of {size} rows from {total}: ask for at most {total}")
    if size < len(classes):
        raise ValueError(f"a sample of {size} row{'s' if size != 1 else ''} cannot hold one row of each of the "
                         f"{len(classes)} classes: ask for at least {len(classes)}")
    if balance:
        share, extra = divmod(size, len(classes))
        return {c: share + (1 if i < extra else 0) for i, c in enumerate(classes)}
    exact = {c: size * counts[c] / total for c in classes}
    shares = {c: max(1, int(exact[c])) for c in classes}  # every class keeps a row
    by_remainder = sorted(classes, key=lambda c: (-(exact[c] - int(exact[c])), c))
    i = 0
    while sum(shares.values()) < size:  # hand out the rest by the largest remainders
        c = by_remainder[i % len(classes)]
        if shares[c] < counts[c]:
            shares[c] += 1
        i += 1
    while sum(shares.values()) > size:  # a class lifted to one row: take it back where a share is over 1
        over = [c for c in classes if shares[c] > 1]
        shares[max(over, key=lambda c: (shares[c] - exact[c], shares[c]))] -= 1
    return shares


def subsample(frame: pd.DataFrame, size: int, seed: int = 0, balance: bool = False,
              flag: str = "--train-size") -> pd.DataFrame:
    """Pick `size` rows by hash of the text, keeping the classes' proportions (or, with `balance`, the same
    number per class): the same rows for any row order (chapter 0). Fewer rows than classes: one row each of the
    largest classes (a demonstration batch; a training subset that misses a class is refused later, when the
    evaluation labels meet it). `flag` is the setting an error names."""
    if not isinstance(size, int) or size < 1:
        raise ValueError(f"size must be a positive int, got {size!r}")
    if size > len(frame):
        raise ValueError(f"requested {size} rows but the split has only {len(frame)}: ask for fewer "
                         f"({flag}) or all of them ({flag} all)")
    names = frame.attrs.get("label_names")
    name = (lambda c: repr(names[c])) if names else (lambda c: f"label {c}")
    present = frame["label"].value_counts().to_dict()
    counts = {c: frame.attrs.get("label_counts", {}).get(c, n) for c, n in present.items()}
    if size < len(counts):  # too few rows for every class: one row each for the largest classes
        counts = dict(sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:size])
    shares = class_shares(counts, size, balance)
    keyed = frame.assign(_key=[text_hash(t, seed) for t in row_keys(frame)])
    parts = []
    for label, want in shares.items():
        rows = keyed[keyed["label"] == label].sort_values(["_key", "text"], kind="stable")
        if len(rows) < want and balance:
            raise ValueError(f"class {name(label)} has only {len(rows)} rows, {want} needed for a balanced sample "
                             f"of {size}: ask for at most {len(rows) * len(shares)} ({flag}), or drop --balance "
                             "to keep the classes' proportions")
        if len(rows) < want:
            raise ValueError(f"class {name(label)} has only {len(rows)} rows here, {want} needed to keep its share "
                             f"of a sample of {size}: ask for fewer ({flag})")
        parts.append(rows.head(want))
    picked = pd.concat(parts).sort_values(["_key", "label"], kind="stable").drop(columns="_key")
    picked = picked.reset_index(drop=True)
    picked.attrs = {k: v for k, v in frame.attrs.items() if k != "label_counts"}
    picked.attrs["drawn_from"] = int(sum(counts.values()))  # rows the sample was drawn from
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
    if "text_pair" in frame:  # BERT's two segments, cut from the longer one first ("longest_first")
        if truncation != "head":
            raise ValueError(f"truncation {truncation!r} cuts one text; a text pair is cut by the tokenizer, "
                             "from the longer text first: use truncation 'head', or join the texts")
        enc = tokenizer(frame["text"].tolist(), frame["text_pair"].tolist(), truncation=True,
                        max_length=max_length)
        return EncodedDataset({k: list(v) for k, v in enc.items()}, frame["label"].tolist())
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


def bucket_length(longest: int, multiple: int | None, max_length: int | None = None) -> int:
    """The padded length of a batch whose longest example has `longest` tokens: rounded up to a multiple of
    `multiple` (None: not rounded), never past `max_length` (examples are cut to it, so never below the longest)
    (chapter 5)."""
    if multiple is None:
        return longest
    if multiple < 1:
        raise ValueError(f"pad_to_multiple_of must be >= 1, got {multiple}")
    rounded = -(-longest // multiple) * multiple
    return rounded if max_length is None else max(longest, min(rounded, max_length))


class BucketPadding:
    """Pad each batch to its longest example rounded up to a multiple of `multiple`, never past `max_length`: a
    run meets at most max_length / multiple lengths, so a GPU sets its kernels up for few shapes (chapter 5)."""

    def __init__(self, tokenizer, multiple: int, max_length: int | None = None) -> None:
        if multiple < 1:
            raise ValueError(f"pad_to_multiple_of must be >= 1, got {multiple}")
        self.tokenizer, self.multiple, self.max_length = tokenizer, multiple, max_length

    def __call__(self, features: list[dict]) -> dict:
        from transformers import DataCollatorWithPadding

        longest = max(len(f["input_ids"]) for f in features)
        target = bucket_length(longest, self.multiple, self.max_length)
        return DataCollatorWithPadding(self.tokenizer, padding="max_length", max_length=target)(features)


def make_loader(dataset: EncodedDataset, tokenizer, batch_size: int, shuffle: bool = False,
                seed: int = 0, group_by_length: bool = False, pad_to_max_length: int | None = None,
                pad_to_multiple_of: int | None = None, max_length: int | None = None) -> DataLoader:
    """A DataLoader with dynamic padding and a seeded shuffle (chapter 0); length-grouped batches (chapter 5).

    pad_to_max_length=N pads every batch to N tokens instead (the naive baseline of chapter 5);
    pad_to_multiple_of=M rounds each batch's length up to a multiple of M, never past max_length (chapter 5).
    """
    from transformers import DataCollatorWithPadding

    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if pad_to_max_length is not None:
        collator = DataCollatorWithPadding(tokenizer, padding="max_length", max_length=pad_to_max_length)
    elif pad_to_multiple_of is not None:
        collator = BucketPadding(tokenizer, pad_to_multiple_of, max_length)
    else:
        collator = DataCollatorWithPadding(tokenizer)
    if group_by_length:
        sampler = LengthGroupedBatchSampler(dataset.lengths(), batch_size, shuffle=shuffle, seed=seed)
        return DataLoader(dataset, batch_sampler=sampler, collate_fn=collator)
    generator = torch.Generator().manual_seed(seed) if shuffle else None
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, generator=generator, collate_fn=collator)


def token_length_stats(texts: Sequence[str], tokenizer, max_length: int = 512) -> dict[str, float]:
    """Token counts (with special tokens, no truncation) and the share longer than max_length (chapter 0)."""
    if len(texts) == 0:
        raise ValueError("no texts given")
    lengths = token_lengths(pd.DataFrame({"text": list(texts)}), tokenizer)
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


def token_lengths(frame: pd.DataFrame, tokenizer) -> np.ndarray:
    """Every example's tokens, uncut, special tokens included (a text pair's too) (`bertmem train`, A1)."""
    if "text_pair" in frame:
        ids = tokenizer(frame["text"].tolist(), frame["text_pair"].tolist(), truncation=False,
                        verbose=False)["input_ids"]
    else:
        ids = tokenizer(frame["text"].tolist(), truncation=False, verbose=False)["input_ids"]
    return np.array([len(i) for i in ids])


def planned_batches(lengths: Sequence[int], micro_batch: int, group_by_length: bool = True,
                    seed: int = 0) -> list[list[int]]:
    """The indices of a run's first epoch's micro-batches, as the run batches them: length-grouped (the loop
    sets the sampler's epoch to 1 first), or in a seeded random order. Its own samplers: counting never draws
    from the training loader's generator, so a planned run sees the order an unplanned one sees
    (`bertmem train`)."""
    if group_by_length:
        sampler = LengthGroupedBatchSampler(lengths, micro_batch, shuffle=True, seed=seed)
        sampler.set_epoch(1)  # as `train` and Accelerate's loop do before the first epoch
        return sampler.batches()
    # make_loader's shuffle, drawn by the same DataLoader machinery over the indices alone
    generator = torch.Generator().manual_seed(seed)
    return [batch.tolist() for batch in DataLoader(range(len(lengths)), micro_batch, shuffle=True,
                                                   generator=generator)]


def epoch_shapes(lengths: Sequence[int], micro_batch: int, group_by_length: bool = True, seed: int = 0,
                 pad_to: int | None = None, multiple: int | None = None, max_length: int | None = None) -> Counter:
    """How often each (examples, padded length) shape comes in one epoch: what a GPU sets its kernels up for,
    counted before the run starts (chapter 5, `bertmem train`). `lengths`: each example's tokens as read;
    `multiple`, `max_length`: the bucket padding of `make_loader`."""
    batches = planned_batches(lengths, micro_batch, group_by_length, seed)
    if pad_to is not None:
        return Counter((len(b), pad_to) for b in batches)
    return Counter((len(b), bucket_length(max(lengths[i] for i in b), multiple, max_length)) for b in batches)


def shape_positions(shapes: Counter) -> int:
    """Token positions, padding included, of (examples, padded length) shapes counted by `epoch_shapes`."""
    return int(sum(rows * length * count for (rows, length), count in shapes.items()))


def epoch_padded_tokens(lengths: Sequence[int], micro_batch: int, group_by_length: bool = True, seed: int = 0,
                        pad_to: int | None = None, multiple: int | None = None,
                        max_length: int | None = None) -> int:
    """Tokens one epoch's micro-batches hold once padded (to their longest example, rounded up to `multiple`, or
    to `pad_to`), batched as the run batches them (`planned_batches`) (`bertmem train`)."""
    if pad_to is not None:
        return len(lengths) * pad_to
    shapes = epoch_shapes(lengths, micro_batch, group_by_length, seed, multiple=multiple, max_length=max_length)
    return shape_positions(shapes)


def cut_report(lengths: Sequence[int], max_length: int) -> dict[str, int]:
    """How many examples are longer than `max_length` tokens (`token_lengths`: [CLS] and [SEP] counted) and how
    many of all their tokens a cut drops (chapters 6, 9, `bertmem train`)."""
    lengths = np.asarray(lengths)
    return {"examples": int(lengths.size), "longer": int((lengths > max_length).sum()),
            "tokens": int(lengths.sum()), "tokens_cut": int(np.clip(lengths - max_length, 0, None).sum())}


def cut_line(report: dict[str, int], max_length: int, truncation: str = "head", window: int | None = None,
             what: str = "training texts", pair: bool = False) -> str:
    """One line on what --max-length cuts, and the chapter-9 levers when it cuts much (`bertmem train`, A1).
    `pair`: the examples are text pairs, which those levers read only once joined (--join-texts)."""
    longer, n = report["longer"], report["examples"]
    if longer == 0:
        return f"{what}: none longer than --max-length {max_length} tokens, nothing cut"
    share = report["tokens_cut"] / report["tokens"]  # of every token of the texts, not only the long ones'
    how = f"read in windows of {window} up to" if window else f"cut ({truncation}) to"
    line = (f"{what}: {longer} of {n} ({longer / n:.0%}) are longer than --max-length {max_length} tokens and are "
            f"{how} it, leaving out {share:.0%} of all the texts' tokens")
    if window is None and share >= 0.05:
        joined = "with --join-texts, " if pair else ""
        line += (f" ({joined}keep the start and the end: --truncation head+tail; read every token: --window "
                 f"{max_length} --max-length {4 * max_length}; chapter 9)")
    return line
