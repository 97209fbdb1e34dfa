"""`bertmem predict`: a saved model and a file of new texts -> a CSV of labels and class probabilities (A1).

The model folder `bertmem train --save-model` writes carries how the run read its texts (`bertmem.json`: the
text columns, the token limit, the cut or the windows), so new texts are read the same way unless a flag says
otherwise. Every input row gets an output row: its id columns, the predicted class by name and each class's
probability, or no prediction and the reason (a row without text is never guessed). The reader's file is only
read; the output file is never the input and is not overwritten without `--overwrite`."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from bertmem.core.devices import cuda_available, require_device
from bertmem.core.flags import RefusesRenamed
from bertmem.core.runtime import progress as progress_bar
from bertmem.data.checks import no_text_rows
from bertmem.data.files import read_table
from bertmem.data.frames import TRUNCATIONS, text_columns, text_frame, tokenize_frame
from bertmem.data.windows import check_window, default_stride, window_loader
from bertmem.model.chunked import ChunkedClassifier
from bertmem.model.loading import load_classifier, load_tokenizer

READING_FILE = "bertmem.json"  # beside the saved weights: how the run read its texts
READING_FIELDS = ("text_column", "second_text_column", "join_texts", "max_length", "truncation", "window", "stride")


def save_reading(folder: Path, data, label_names: list[str]) -> None:
    """Write how a run read its texts into its saved model folder, for `bertmem predict` (A1)."""
    reading = {name: getattr(data, name) for name in READING_FIELDS}
    (folder / READING_FILE).write_text(json.dumps({**reading, "label_names": list(label_names)}, indent=1))


@dataclass(frozen=True)
class PredictConfig(RefusesRenamed):
    """What to label and how: the saved model, the file, its columns, the reading, the output (A1)."""

    model_id: str = field(default="", metadata={
        "help": "the model folder `bertmem train` wrote (OUTPUT_DIR/model)", "flag": "--model", "required": True})
    dataset: str = field(default="", metadata={"help": "the CSV/JSON/Parquet file of texts to label",
                                               "required": True})
    output: str | None = field(default=None, metadata={
        "help": "the CSV to write (default: <file>-predictions.csv beside the input)"})
    text_column: str | None = field(default=None, metadata={
        "help": "column holding the texts (default: as the model was trained)"})
    second_text_column: str | None = field(default=None, metadata={
        "help": "a second text column (default: as the model was trained)"})
    id_columns: tuple[str, ...] | None = field(default=None, metadata={
        "help": "columns copied into the output to identify each row (default: every column but the texts)",
        "nargs": "+", "parse": str})
    max_length: int | None = field(default=None, metadata={
        "help": "tokens read per text (default: as the model was trained)"})
    truncation: str | None = field(default=None, metadata={
        "help": "head, tail or head+tail (default: as the model was trained)", "choices": TRUNCATIONS})
    window: int | None = field(default=None, metadata={
        "help": "read each text as windows of this many tokens, logits pooled (default: as trained)"})
    micro_batch: int = field(default=32, metadata={"help": "texts per forward pass"})
    device: str | None = field(default=None, metadata={"help": "cpu or cuda (default: cuda when there is one)"})
    progress: bool = field(default=True, metadata={"help": "show a progress bar"})
    overwrite: bool = field(default=False, metadata={"help": "replace an existing output file"})
    RENAMED = {"model": "model_id"}

    def __post_init__(self) -> None:
        if not self.model_id or not self.dataset:
            raise ValueError("bertmem predict needs --model (a saved model folder) and --dataset (a file to label)")
        if self.micro_batch < 1:
            raise ValueError(f"micro_batch must be >= 1, got {self.micro_batch}")


@dataclass(frozen=True)
class Reading:
    """How texts are read: the run's settings from the model folder, with what the command changed (A1)."""

    text_column: str = "text"
    second_text_column: str | None = None
    join_texts: bool = False
    max_length: int = 256
    truncation: str = "head"
    window: int | None = None
    stride: int | None = None
    label_names: tuple[str, ...] = ()


def reading_for(config: PredictConfig, model_folder: Path) -> Reading:
    """The model folder's reading (`bertmem.json`), each field the command gives replacing it (A1)."""
    saved = model_folder / READING_FILE
    stored = json.loads(saved.read_text()) if saved.is_file() else {}
    reading = Reading(**{k: tuple(v) if k == "label_names" else v for k, v in stored.items()
                         if k in Reading.__dataclass_fields__})
    changed = {k: getattr(config, k) for k in ("text_column", "second_text_column", "max_length", "truncation",
                                                "window") if getattr(config, k) is not None}
    reading = replace(reading, **changed)
    if not stored:  # a folder another tool saved: say what is assumed, never silently
        print(f"bertmem predict: no {READING_FILE} in {model_folder.name} (not saved by bertmem train): reading "
              f"--text-column {reading.text_column}, --max-length {reading.max_length}, --truncation "
              f"{reading.truncation}; give those flags to read otherwise", file=sys.stderr)
    if reading.window is not None:
        check_window(reading.window, reading.stride, reading.max_length)
    return reading


def output_path(config: PredictConfig) -> Path:
    """Where the predictions go: never the input file, never over an earlier file without --overwrite (A1)."""
    source = Path(config.dataset).expanduser()
    out = Path(config.output).expanduser() if config.output else source.with_name(f"{source.stem}-predictions.csv")
    if out.resolve() == source.resolve():
        raise ValueError(f"--output {out} is the file being labelled: choose another --output")
    if out.exists() and not config.overwrite:
        raise ValueError(f"{out} exists: pass --overwrite to replace it, or choose another --output")
    if out.suffix.lower() != ".csv":
        raise ValueError(f"--output {out.name}: the predictions are written as CSV; end the name with .csv")
    return out


@torch.no_grad()
def class_probabilities(model, tokenizer, frame: pd.DataFrame, reading: Reading, batch: int,
                        show: bool) -> torch.Tensor:
    """Each text's class probabilities, batched, read as the run read them (cut, pair or windows) (A1)."""
    model.eval()
    device = next(model.parameters()).device
    probabilities = []
    if reading.window is not None:
        loader = window_loader(frame.assign(label=0), tokenizer, reading.window,
                               reading.stride or default_stride(reading.window), documents_per_batch=batch,
                               max_tokens=reading.max_length - 2)
        pooled = ChunkedClassifier(model)
        for windows in progress_bar(loader, "predict", enabled=show):
            windows = {k: v.to(device) for k, v in windows.items() if k != "labels"}
            probabilities.append(pooled(**windows).logits.float().softmax(-1).cpu())
        return torch.cat(probabilities)
    encoded = tokenize_frame(frame.assign(label=0), tokenizer, reading.max_length, reading.truncation)
    for start in progress_bar(range(0, len(encoded), batch), "predict", enabled=show):
        rows = [encoded[i] for i in range(start, min(start + batch, len(encoded)))]
        padded = tokenizer.pad([{k: v for k, v in row.items() if k != "labels"} for row in rows],
                               return_tensors="pt").to(device)
        probabilities.append(model(**padded).logits.float().softmax(-1).cpu())
    return torch.cat(probabilities)


def predict_file(config: PredictConfig) -> dict[str, Any]:
    """Label every row of `config.dataset` with the saved model and write the CSV; a summary back (A1)."""
    folder = Path(config.model_id).expanduser()
    if not folder.is_dir():
        raise ValueError(f"--model {folder} is not a folder: pass the model folder `bertmem train --save-model` "
                         "wrote (OUTPUT_DIR/model)")
    out = output_path(config)  # before any model loads: a bad output costs nothing
    reading = reading_for(config, folder)
    raw = read_table(Path(config.dataset).expanduser())
    columns = text_columns(raw, reading.text_column, reading.second_text_column)
    empty = no_text_rows(raw, columns).to_numpy()
    keep = list(config.id_columns) if config.id_columns else [c for c in raw.columns if c not in columns]
    missing = [c for c in keep if c not in raw.columns]
    if missing:
        raise ValueError(f"--id-columns {missing} are not in {Path(config.dataset).name}; its columns: "
                         f"{list(raw.columns)}")
    device = require_device(config.device or ("cuda" if cuda_available() else "cpu"))
    model = load_classifier(folder, device=device)
    tokenizer = load_tokenizer(folder)
    names = [model.config.id2label[i] for i in range(model.config.num_labels)]
    if names == [f"LABEL_{i}" for i in range(len(names))] and not reading.label_names:
        raise ValueError(f"{folder.name} has no trained classes (its labels are transformers' LABEL_0, LABEL_1 …): "
                         "pass the folder `bertmem train --save-model` wrote, OUTPUT_DIR/model")
    usable = raw[~empty]
    texts = text_frame([usable[c].fillna("").to_numpy() for c in columns], reading.join_texts)
    probabilities = (class_probabilities(model, tokenizer, texts, reading, config.micro_batch, config.progress)
                     if len(usable) else torch.zeros(0, len(names)))  # every row empty: nothing to read
    result = raw[keep].reset_index(drop=True)
    result["predicted"] = ""
    result["reason"] = ["no text in " + " or ".join(repr(c) for c in columns) if e else "" for e in empty]
    rows = [i for i, e in enumerate(empty) if not e]
    result.loc[rows, "predicted"] = [names[k] for k in probabilities.argmax(-1).tolist()]
    for k, name in enumerate(names):
        result[f"probability {name}"] = float("nan")
        result.loc[rows, f"probability {name}"] = probabilities[:, k].double().numpy().round(4)
    out.parent.mkdir(parents=True, exist_ok=True)
    result.to_csv(out, index=False)
    counts = result.loc[rows, "predicted"].value_counts().to_dict()
    return {"output": str(out), "rows": len(result), "predicted": len(rows), "without_text": int(empty.sum()),
            "classes": names, "counts": counts, "reading": asdict(reading)}


def predict_summary(summary: dict[str, Any]) -> str:
    """What `bertmem predict` says when it is done (A1)."""
    skipped = (f"; {summary['without_text']} rows without text got no prediction (column reason)"
               if summary["without_text"] else "")
    top = ", ".join(f"{name} {count}" for name, count in list(summary["counts"].items())[:5])
    return (f"bertmem predict: {summary['predicted']} of {summary['rows']} rows labelled ({top}"
            f"{', …' if len(summary['counts']) > 5 else ''}){skipped}; written to {summary['output']}")
