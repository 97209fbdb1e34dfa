"""JSON and JSON-lines files as records, with duplicate keys refused and bad lines named (chapter A1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import pandas as pd

if TYPE_CHECKING:
    from .files import ReadReport


def loads_strict(text: str, where: str) -> object:
    """json.loads, refusing an object with one key twice (json would keep the last silently) (chapter A1)."""
    def refuse_twice(pairs: list[tuple[str, object]]) -> dict:
        keys = [key for key, _ in pairs]
        twice = sorted({key for key in keys if keys.count(key) > 1})
        if twice:
            raise ValueError(f"{where} has an object with the key {twice[0]!r} twice: keep one")
        return dict(pairs)

    return json.loads(text, object_pairs_hook=refuse_twice)


def json_records(data: object, path: Path) -> list:
    """The records of a .json file: a list of objects, or an object of columns (lists, or pandas' dicts) (ch. A1)."""
    if isinstance(data, dict):
        lists = {key: value for key, value in data.items() if isinstance(value, list)}
        nested = [key for key, value in lists.items() if any(isinstance(item, dict) for item in value)]
        if len(nested) == 1:
            key = nested[0]
            raise ValueError(f"{path.name} keeps its records under the key {key!r}: write the list itself as the "
                             f"file (json.dump(data[{key!r}], f)), or one object per line as .jsonl")
        if lists and len(lists) == len(data) and len({len(v) for v in lists.values()}) == 1:
            return [dict(zip(lists, values)) for values in zip(*lists.values())]  # columns -> records
        inner = [value for value in data.values() if isinstance(value, dict)]
        if data and len(inner) == len(data) and len({tuple(value) for value in inner}) == 1:
            return [{column: data[column][row] for column in data} for row in inner[0]]  # pandas' to_json()
        return [data]
    if not isinstance(data, list):
        raise ValueError(f"{path.name} holds a single {type(data).__name__}, not records: write a list of objects")
    return data


def records_frame(records: list, first: int, path: Path, numbers: list[int] | None = None) -> pd.DataFrame:
    """Records (dicts) as a frame numbered from `first` (or by line); anything else is an error (chapter A1)."""
    for place, record in enumerate(records):
        if not isinstance(record, dict):
            where = numbers[place] if numbers else first + place
            raise ValueError(f"record {where} of {path.name} is a {type(record).__name__}, not an object: "
                             "every record needs the text and label fields")
    frame = pd.DataFrame.from_records(records) if records else pd.DataFrame()
    frame.index = numbers if numbers is not None else range(first, first + len(records))
    return frame


def jsonl_chunks(path: Path, report: ReadReport, chunk_rows: int | None) -> Iterator[pd.DataFrame]:
    """JSON lines in chunks, rows numbered by line; a bad line is an error with its number (chapter A1)."""
    records, numbers = [], []
    with path.open(encoding=report.encoding) as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                report.empty_rows += 1
                continue
            try:
                records.append(loads_strict(line, f"line {number} of {path.name}"))
            except json.JSONDecodeError as error:
                raise ValueError(f"line {number} of {path.name} is not valid JSON ({error.msg}): fix or delete "
                                 "that line") from None
            numbers.append(number)
            if chunk_rows is not None and len(records) == chunk_rows:
                yield records_frame(records, 0, path, numbers)
                records, numbers = [], []
    if records or report.chunks == 0:
        yield records_frame(records, 0, path, numbers)
