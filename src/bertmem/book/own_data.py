"""The rows appendix A1 labels once its model is trained: the reader's new rows, the demo's, or the held-out ones.

A reader's file of new rows is read as it is (`NEW_ROWS_FILE`). Without one the page labels rows whose answers it
knows, so it can say how many it got right: the generated demo's new tickets, or the rows the run held out of the
reader's own file for evaluation, written out under that file's column names with their labels set aside. Nothing
here writes to a reader's file.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Sequence

import pandas as pd

from bertmem.book.tickets import ticket_frame
from bertmem.data import DataConfig, PrepareFrame, load_frames

TEXTLESS_ROWS = (4, 11)  # the demo's new rows without any text: they get a reason, not a guess


def new_tickets_file(path: str | Path, rows: int = 20, seed: int = 7) -> tuple[Path, pd.Series]:
    """Generated tickets with no label column, two of them without any text, and the labels the generator gave
    them (to score the predictions): the demo's new rows (A1)."""
    path = Path(path)
    new = ticket_frame(rows=rows, seed=seed, empty_share=0.0)
    new.loc[list(TEXTLESS_ROWS), ["subject", "body"]] = ""
    new.drop(columns=["category"]).to_csv(path, index=False)
    return path, new["category"]


def held_out_file(path: str | Path, data: DataConfig, prepare: PrepareFrame,
                  names: Sequence[str]) -> tuple[Path, pd.Series]:
    """The rows a run on `data` held out for evaluation, written as new rows under the file's own text columns, and
    their labels by name (to score the predictions) (A1)."""
    path = Path(path)
    with contextlib.redirect_stdout(io.StringIO()):  # the run reading the same file already said all of it
        _, held = load_frames(data, prepare)
    rows = pd.DataFrame({"held-out row": range(1, len(held) + 1), data.text_column: held["text"].to_numpy()})
    if data.second_text_column:  # empty where `prepare` joined the two columns into one text
        pair = held["text_pair"].to_numpy() if "text_pair" in held else ""
        rows[data.second_text_column] = pair
    rows.to_csv(path, index=False)
    return path, pd.Series([names[i] for i in held["label"]])
