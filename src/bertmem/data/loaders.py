"""What the data is, and the one way to turn it into training and evaluation loaders (all chapters that train).

`DataConfig` names the data (source, columns, subset sizes, tokens per example and how long texts are cut,
micro-batch, padding);
`build_loaders` is what `bertmem train`, the bench and the chapters that fine-tune on the profile's data
call, so they tokenize, pad and evaluate the same way."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import pandas as pd
from torch.utils.data import DataLoader

from bertmem.core.flags import RefusesRenamed
from bertmem.data.frames import (
    TRUNCATIONS,
    PrepareFrame,
    load_text_classification,
    make_loader,
    prepare_frame,
    prepare_options,
    row_keys,
    split_file,
    subsample,
    tokenize_frame,
)
from bertmem.data.hub import EVAL_SPLITS, HUB_IDS
from bertmem.data.windows import check_window, default_stride, window_loader


def parse_size(raw: str) -> int | None:
    """A subset size from text (environment, command line): a number of examples, or 'all' (the whole split)."""
    return None if raw.strip().lower() in ("all", "none", "") else int(raw)


def micro_batch_or_auto(raw: str) -> int | str:
    """--micro-batch: a number of examples, or 'auto' (`bertmem train` plans it for the card)."""
    return "auto" if raw.strip().lower() == "auto" else int(raw)


def check_subset_sizes(**sizes: int | None) -> None:
    """Each subset size is >= 2 examples or None (the whole split) (profiles, chapter sizes, DataConfig)."""
    for name, value in sizes.items():
        if value is not None and value < 2:
            raise ValueError(f"{name} must be >= 2 or None (the whole split), got {value}")


@dataclass(frozen=True)
class DataConfig(RefusesRenamed):
    """What the data is: source, columns, subset sizes, tokens, truncation, micro-batch, padding (ch. 0, 5, A1)."""

    dataset: str = field(default="imdb", metadata={
        "help": "imdb, rotten_tomatoes, sst2, a Hub id, or a CSV/JSON/Parquet file"})
    eval_dataset: str | None = field(default=None, metadata={
        "help": "file or dataset to evaluate on (default: the eval split, or rows held out of a file)"})
    text_column: str = field(default="text", metadata={"help": "column holding the texts"})
    label_column: str = field(default="label", metadata={"help": "column holding the labels",
                                                         "aliases": ("--label-column-name",)})
    second_text_column: str | None = field(default=None, metadata={
        "help": "a second text column (a body after a subject): read as the tokenizer's text pair, or with "
                "--join-texts joined to the first"})
    join_texts: bool = field(default=False, metadata={
        "help": "join --second-text-column to --text-column (a line break between) instead of a text pair"})
    drop_empty: bool = field(default=False, metadata={
        "help": "leave out rows without text or label, counting them (default: refuse the file, naming them)"})
    encoding: str | None = field(default=None, metadata={
        "help": "a file's text encoding, e.g. cp1252 (default: from its byte-order mark, else UTF-8)"})
    delimiter: str | None = field(default=None, metadata={
        "help": "a delimited file's delimiter (default: tab for .tsv, else the one that splits the header)"})
    train_size: int | None = field(default=1000, metadata={
        "help": "training examples, or 'all' (default on the command line: every training row of a file; the "
                "profile's subset of a dataset name)", "parse": parse_size})
    eval_size: int | None = field(default=500, metadata={
        "help": "evaluation examples, or 'all' (default on the command line: a stratified fifth of a file held "
                "out, or all of --eval-dataset; the profile's subset of a dataset name)", "parse": parse_size})
    balance: bool = field(default=False, metadata={
        "help": "draw the same number of training examples per class (default: keep the classes' proportions)"})
    max_length: int = field(default=256, metadata={"help": "tokens per example (longer ones are cut)",
                                                   "aliases": ("--max-seq-length",)})
    truncation: str = field(default="head", metadata={
        "help": "what a cut keeps: head (the first tokens), tail (the last ones) or head+tail (a quarter from "
                "the start, the rest from the end) (chapters 6, 9)", "choices": TRUNCATIONS})
    micro_batch: int = field(default=8, metadata={
        "help": "examples per forward and backward pass (per process under Accelerate); auto: the largest that "
                "fits --memory or the GPU in use, accumulated to --effective-batch (bertmem train)",
        "aliases": ("--batch-size", "--per-device-train-batch-size"), "parse": micro_batch_or_auto})
    eval_batch_size: int | None = field(default=None, metadata={
        "help": "examples per evaluation batch (default: twice the micro-batch)"})
    group_by_length: bool = field(default=True, metadata={
        "help": "batch examples of similar length together (chapter 5)"})
    pad_to_max_length: bool = field(default=False, metadata={
        "help": "pad every training batch to --max-length (the naive baseline of chapter 5)"})
    pad_to_multiple_of: int | None = field(default=None, metadata={
        "help": "round each training batch's length up to a multiple of N, never past --max-length (64 in the "
                "GPU profiles): a run meets at most max-length / N lengths, so a GPU sets its kernels up for few "
                "shapes (chapter 5); --pad-to-max-length pads to one length instead"})
    data_seed: int = field(default=0, metadata={
        "help": "which examples the subsets take (hash-chosen); the training seed is --seed"})
    window: int | None = field(default=None, metadata={
        "help": "read each text as overlapping windows of this many tokens, their logits pooled per text, trained "
                "end to end; --max-length then caps the tokens read per text, the micro-batch counts texts "
                "(chapter 9)"})
    stride: int | None = field(default=None, metadata={
        "help": "tokens of text between window starts (default: three quarters of a window)"})
    RENAMED = {"batch_size": "micro_batch"}

    def __post_init__(self) -> None:
        if self.max_length < 8:
            raise ValueError(f"max_length must be >= 8, got {self.max_length}")
        if self.micro_batch < 1 or (self.eval_batch_size is not None and self.eval_batch_size < 1):
            raise ValueError(f"micro_batch and eval_batch_size must be >= 1, got {self.micro_batch} and "
                             f"{self.eval_batch_size}")
        check_subset_sizes(train_size=self.train_size, eval_size=self.eval_size)
        if self.truncation not in TRUNCATIONS:
            raise ValueError(f"truncation must be one of {TRUNCATIONS}, got {self.truncation!r}")
        if self.data_seed < 0:
            raise ValueError(f"data_seed must be >= 0, got {self.data_seed}")
        check_window(self.window, self.stride, self.max_length)
        if self.pad_to_multiple_of is not None and self.pad_to_multiple_of < 1:
            raise ValueError(f"pad_to_multiple_of must be >= 1, got {self.pad_to_multiple_of}: pass "
                             "--pad-to-multiple-of 64, say, or leave it out")
        if self.join_texts and self.second_text_column is None:
            raise ValueError("join_texts needs second_text_column (--second-text-column): the column to join")
        if self.second_text_column is not None and not self.join_texts and (self.truncation != "head"
                                                                            or self.window is not None):
            raise ValueError("a text pair is cut by the tokenizer from the longer text; truncation "
                             f"{self.truncation!r} and --window read one text: pass --join-texts, or "
                             "--truncation head without --window")

    def padded_to(self) -> int | None:
        """The one length every training batch is padded to (--pad-to-max-length), else None (chapter 5)."""
        return self.max_length if self.pad_to_max_length else None

    def prepare_options(self) -> dict:
        """The keyword options this data passes to `prepare_frame` (those not at their defaults) (chapter A1)."""
        return prepare_options(second_text_column=self.second_text_column, join_texts=self.join_texts,
                               drop_empty=self.drop_empty)

    def window_stride(self) -> int:
        """Tokens of text between window starts: the given stride, else three quarters of a window (chapter 9)."""
        if self.window is None:
            raise ValueError("no window: set window (--window) to read texts in windows")
        return self.stride or default_stride(self.window)



class Loaders(NamedTuple):
    """The training loader (shuffled, seeded) and the evaluation loader."""

    train: DataLoader
    eval: DataLoader


def load_frames(data: DataConfig, prepare: PrepareFrame = prepare_frame) -> tuple:
    """Train and eval frames: named dataset splits, or a file with an eval file or rows held out (chapter A1).

    Subsets keep the classes' proportions (`data.balance`: the same number per class for training). A single
    file holds out a stratified share for evaluation, said in one line. Evaluation labels are encoded with the
    training labels' ids; a label training never saw is an error here, before any model is loaded. `prepare`
    turns every split's raw rows into checked ones.
    """
    kw = dict(text_column=data.text_column, label_column=data.label_column, seed=data.data_seed,
              encoding=data.encoding, delimiter=data.delimiter, prepare=prepare, **data.prepare_options())
    if data.eval_dataset is not None or data.dataset in HUB_IDS:
        source = data.eval_dataset or data.dataset
        split = EVAL_SPLITS.get(source, "validation")  # a file ignores the split name
        train_frame = load_text_classification(data.dataset, "train", size=data.train_size,
                                               balance=data.balance, **kw)
        eval_is_file = split_file(source, split) is not None  # encoding= and delimiter= are for files only
        eval_kw = kw if eval_is_file else {**kw, "encoding": None, "delimiter": None}
        eval_frame = load_text_classification(source, split, size=data.eval_size, flag="--eval-size",
                                              label_names=train_frame.attrs["label_names"], **eval_kw)
        return balanced(train_frame, data), eval_frame
    # held-out evaluation rows and training rows both come from the rows with the smallest hashes per label
    keep = data.eval_size + data.train_size if data.eval_size and data.train_size else None
    everything = load_text_classification(data.dataset, "train", keep_per_label=keep, **kw)
    counts = everything.attrs.get("label_counts") or everything["label"].value_counts().to_dict()
    rows, names = sum(counts.values()), everything.attrs["label_names"]
    held = data.eval_size or max(2, rows // 5)
    if held >= rows - 1:
        raise ValueError(f"{data.dataset} has {rows} rows: too few to hold out {held} for evaluation; "
                         "pass eval_dataset (--eval-dataset) or a smaller eval_size (--eval-size)")
    alone = [names[c] for c, n in sorted(counts.items()) if n < 2]
    if alone:
        raise ValueError(f"class(es) {alone} have one row each: too few to hold one out for evaluation and train "
                         "on another; give them more rows, leave their rows out, or pass --eval-dataset (an "
                         "evaluation file of your own)")
    eval_frame = subsample(everything, held, seed=data.data_seed, flag="--eval-size")
    print(f"held out {held} of {rows} rows ({held / rows:.0%}, stratified by class) for evaluation"
          + ("" if data.eval_size else " (--eval-size all: a fifth of the file)"))
    repeats = pd.Series(row_keys(everything)).isin(set(row_keys(eval_frame))).to_numpy()
    rest = everything[~repeats].reset_index(drop=True)
    gone = everything[repeats]["label"].value_counts().to_dict()  # held out, and copies of held-out texts
    rest.attrs = dict(everything.attrs, repeats_left_out=int(repeats.sum() - len(eval_frame)),
                      label_counts={c: n - gone.get(c, 0) for c, n in counts.items()})
    if rest.attrs["repeats_left_out"]:  # counted, never dropped silently
        print(f"{rest.attrs['repeats_left_out']} rows repeat a held-out text: left out of the training rows, "
              "so no evaluation text is trained on")
    lost = sorted(set(everything["label"]) - set(rest["label"]))
    if lost:  # every row of these classes repeats a held-out text: training would silently miss them
        raise ValueError(f"holding out {held} rows for evaluation leaves no training rows of class(es) "
                         f"{[names[i] for i in lost]} (their texts all repeat held-out ones): pass eval_dataset "
                         "(--eval-dataset), or deduplicate the file")
    left = sum(rest.attrs["label_counts"].values())
    if data.train_size is not None and data.train_size > left:
        raise ValueError(f"train_size={data.train_size} but {data.dataset} has only {left} rows left after "
                         f"holding out {held} for evaluation: ask for at most {left} (--train-size), or 'all'")
    train_frame = rest if data.train_size is None else subsample(rest, data.train_size, seed=data.data_seed,
                                                                 balance=data.balance)
    return balanced(train_frame, data, source=rest), eval_frame


def balanced(train_frame: pd.DataFrame, data: DataConfig, source: pd.DataFrame | None = None) -> pd.DataFrame:
    """With `data.balance`: the training rows as drawn (or, for 'all', the largest balanced sample), and one line
    saying how many rows a balanced sample keeps (chapter A1)."""
    if not data.balance:
        return train_frame
    available = train_frame.attrs.get("drawn_from", len(train_frame))
    if data.train_size is None:  # every row not held out, balanced: the smallest class sets the size
        source = train_frame if source is None else source
        counts = source.attrs.get("label_counts") or source["label"].value_counts().to_dict()
        train_frame = subsample(source, len(counts) * min(counts.values()), seed=data.data_seed, balance=True)
        available = sum(counts.values())
    per_class = train_frame["label"].value_counts()
    print(f"balanced training sample (--balance): {len(per_class)} classes × {per_class.min()}"
          + (f"-{per_class.max()}" if per_class.max() != per_class.min() else "")
          + f" rows = {len(train_frame)} of the {available} rows available")
    return train_frame


def build_loaders(data: DataConfig, tokenizer, frames=None, seed: int = 0) -> Loaders:
    """Tokenize and batch the data: the training order follows `seed` (chapters 0, 3-6, 8, A1).

    Evaluation always pads per batch and groups by length (batches of twice the micro-batch unless
    `eval_batch_size` says otherwise): how it is batched does not change what it measures, so every caller
    evaluates the same way, fast. `frames`: (train, eval) already loaded.
    """
    train_frame, eval_frame = frames if frames is not None else load_frames(data)
    if data.window is not None:  # windows of every text, pooled per text (chapter 9)
        read = dict(window=data.window, stride=data.window_stride(), max_tokens=data.max_length - 2)
        return Loaders(window_loader(train_frame, tokenizer, documents_per_batch=data.micro_batch, shuffle=True,
                                     seed=seed, **read),
                       window_loader(eval_frame, tokenizer, documents_per_batch=data.eval_batch_size
                                     or 2 * data.micro_batch, **read))
    train = make_loader(tokenize_frame(train_frame, tokenizer, data.max_length, data.truncation), tokenizer,
                        data.micro_batch, shuffle=True, seed=seed, group_by_length=data.group_by_length,
                        pad_to_max_length=data.padded_to(), pad_to_multiple_of=data.pad_to_multiple_of,
                        max_length=data.max_length)
    # evaluation is bucketed too: its lengths are new shapes for the card as well (the metrics do not change)
    evaluation = make_loader(tokenize_frame(eval_frame, tokenizer, data.max_length, data.truncation), tokenizer,
                             data.eval_batch_size or 2 * data.micro_batch, group_by_length=True,
                             pad_to_multiple_of=data.pad_to_multiple_of, max_length=data.max_length)
    return Loaders(train, evaluation)
