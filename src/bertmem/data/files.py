"""A reader's own file, read as it is written: encodings, delimiters, headers, empty rows, JSON shapes (chapter A1).

Every value is read as text (no "NA" turned into a missing value, no "007" into 7); what to make of the labels
is decided later, from all of them (`labels`). Whatever the reader decides on its own (a byte-order mark, a
delimiter other than a comma, empty rows skipped, chunks) is written into one report line; whatever it cannot
decide is an error that names the file, the problem and the option that fixes it."""

from __future__ import annotations

import codecs
import csv
import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import pandas as pd

DELIMITED = (".csv", ".tsv", ".txt")
SUFFIXES = DELIMITED + (".json", ".jsonl", ".parquet")
SPREADSHEETS = (".xlsx", ".xlsm", ".xls", ".ods", ".numbers")
DELIMITERS = (",", ";", "\t", "|")
BYTE_ORDER_MARKS = ((codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
                    (codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
LARGE_FILE_BYTES = 256 * 2**20  # above this a file is read in chunks (all but a .json array)
CHUNK_ROWS = 50_000


@dataclass
class ReadReport:
    """What reading one file did, in one line: rows, columns, encoding, delimiter, rows skipped (chapter A1)."""

    path: Path
    encoding: str
    delimiter: str | None = None
    rows: int = 0
    empty_rows: int = 0
    chunks: int = 0
    columns: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def line(self) -> str:
        """The report as one printed line."""
        how = [self.encoding] + ([f"delimiter {self.delimiter!r}"] if self.delimiter else [])
        if self.chunks > 1:
            how.append(f"in {self.chunks} chunks")
        extra = [f"{self.empty_rows} empty rows skipped"] if self.empty_rows else []
        return (f"read {self.path.name}: {self.rows} rows, columns {self.columns} ({', '.join(how)})"
                + "".join(f"; {note}" for note in extra + self.notes))


def check_suffix(path: Path) -> None:
    """Refuse file types the reader does not know, saying what to save the file as (chapter A1)."""
    suffix = path.suffix.lower()
    if suffix in SPREADSHEETS:
        raise ValueError(f"{path.name} is a spreadsheet: save it as 'CSV UTF-8' from the spreadsheet program, "
                         "or read it with pandas.read_excel and pass the frame to prepare_frame")
    if suffix not in SUFFIXES:
        raise ValueError(f"unsupported file type {suffix!r} for {path}: use {', '.join(SUFFIXES)}")


def file_encoding(path: Path, encoding: str | None) -> str:
    """The encoding to read with: a byte-order mark wins; else the given one, checked, or UTF-8 (chapter A1)."""
    with path.open("rb") as handle:
        head = handle.read(4096)
    for mark, name in BYTE_ORDER_MARKS:
        if head.startswith(mark):  # unambiguous: it wins over encoding=, and the report says which was used
            try:
                check_decodes(path, name)
            except ValueError as error:
                raise ValueError(f"{str(error).split(': byte')[0]}, although it starts with a {name} byte-order "
                                 "mark: the file mixes encodings; open it and save it again as UTF-8") from None
            return name
    if encoding is None and b"\x00" in head:
        raise ValueError(f"{path.name} looks like UTF-16 text without a byte-order mark (it has zero bytes): "
                         "pass encoding='utf-16-le' (--encoding utf-16-le), or 'utf-16-be'")
    chosen = encoding or "utf-8"
    check_decodes(path, chosen)
    return chosen


def check_decodes(path: Path, encoding: str) -> None:
    """Decode the whole file in blocks; an error names the byte, its offset and the usual fix (chapter A1)."""
    try:
        decoder = codecs.getincrementaldecoder(encoding)()
    except LookupError:
        raise ValueError(f"unknown encoding {encoding!r}: use a Python codec name such as 'utf-8' or "
                         "'cp1252'") from None
    offset = 0
    with path.open("rb") as handle:
        while block := handle.read(2**20):
            try:
                decoder.decode(block)
            except UnicodeDecodeError as error:
                where = offset + error.start
                bad = block[error.start]
                around = block[max(0, error.start - 20):error.start + 20].decode("cp1252", errors="replace")
                raise ValueError(
                    f"{path.name} is not {encoding} text: byte 0x{bad:02x} at offset {where} (read as cp1252: "
                    f"{around!r}). Files from Excel or older Windows programs are usually cp1252: pass "
                    "encoding='cp1252' (--encoding cp1252), or save the file as UTF-8") from None
            offset += len(block)
        decoder.decode(b"", final=True)


def header_fields(path: Path, encoding: str, delimiter: str) -> list[str]:
    """The header row's names, split as the csv module would (chapter A1)."""
    with path.open(encoding=encoding, newline="") as handle:
        return next(csv.reader(handle, delimiter=delimiter), [])


def choose_delimiter(path: Path, encoding: str, delimiter: str | None) -> str:
    """The given delimiter, tab for .tsv, else the one candidate that splits the header (chapter A1)."""
    if delimiter is not None:
        delimiter = {"tab": "\t", "\\t": "\t"}.get(delimiter, delimiter)
        if len(delimiter) != 1:
            raise ValueError(f"delimiter must be one character, got {delimiter!r}: for a tab pass 'tab'")
        return delimiter
    if path.suffix.lower() == ".tsv":
        return "\t"
    splitting = [d for d in DELIMITERS if len(header_fields(path, encoding, d)) > 1]
    if len(splitting) > 1:
        raise ValueError(f"the header of {path.name} splits on several delimiters {splitting}: "
                         f"pass delimiter= (--delimiter) naming the one the file uses")
    return splitting[0] if splitting else ","


def check_header(path: Path, names: list[str]) -> list[str]:
    """Header names stripped of spaces; two columns with one name are refused, not renamed (chapter A1)."""
    stripped = [name.strip().lstrip("\ufeff") or f"unnamed {position}"  # Excel's trailing delimiters
                for position, name in enumerate(names, start=1)]
    seen: dict[str, list[int]] = {}
    for position, name in enumerate(stripped, start=1):
        if name:
            seen.setdefault(name, []).append(position)
    twice = {name: places for name, places in seen.items() if len(places) > 1}
    if twice:
        name, places = next(iter(twice.items()))
        raise ValueError(f"{path.name} has {len(places)} columns named {name!r} (columns {places}): rename all "
                         "but one in the header, so it is clear which one holds the data")
    return stripped


def delimited_chunks(path: Path, report: ReadReport, chunk_rows: int | None) -> Iterator[pd.DataFrame]:
    """A delimited file as frames of text values; a row with too many fields is an error (chapter A1)."""
    written = header_fields(path, report.encoding, report.delimiter)
    if not written:
        raise ValueError(f"the first line of {path.name} is blank: the header must be the first line (delete the "
                         "blank lines above it)")
    names = check_header(path, written)
    if any(name.strip() != name for name in written):
        report.notes.append("spaces around header names removed")
    if any(not name.strip() for name in written):
        report.notes.append("columns without a header name called 'unnamed N' (N: their position)")
    report.columns = names
    options = dict(sep=report.delimiter, encoding=report.encoding, dtype=str, keep_default_na=False,
                   na_values=[""], skip_blank_lines=False, index_col=False, header=0, names=names)
    reader = pd.read_csv(path, chunksize=chunk_rows, **options) if chunk_rows else None
    while True:
        with warnings.catch_warnings():  # not held across the yield: the caller's warnings stay theirs
            warnings.simplefilter("error", pd.errors.ParserWarning)  # pandas would drop the extra fields
            try:
                chunk = next(reader, None) if reader is not None else pd.read_csv(path, **options)
            except (pd.errors.ParserWarning, pd.errors.ParserError):
                raise ValueError(field_count_problem(path, report, len(names))) from None
        if chunk is None:
            return
        yield chunk
        if reader is None:
            return


def field_count_problem(path: Path, report: ReadReport, expected: int) -> str:
    """Which line has more fields than the header, and the two usual causes (chapter A1)."""
    with path.open(encoding=report.encoding, newline="") as handle:
        for number, row in enumerate(csv.reader(handle, delimiter=report.delimiter), start=1):
            if len(row) > expected:
                return (f"row {number - 1} of {path.name} has {len(row)} fields but the header has {expected}: "
                        f"a text containing {report.delimiter!r} must be in double quotes (re-export the file "
                        "with quoting), or the file uses another delimiter (pass delimiter=, --delimiter)")
    return (f"{path.name} could not be parsed with delimiter {report.delimiter!r}: a double quote that is never "
            "closed swallows the rest of the file (check the quotes), or the file uses another delimiter "
            "(pass delimiter=, --delimiter)")


def parquet_chunks(path: Path, chunk_rows: int | None) -> Iterator[pd.DataFrame]:
    """A Parquet file batch by batch, values as stored (chapter A1)."""
    import pyarrow.parquet as pq

    if chunk_rows is None:
        frame = pq.read_table(path).to_pandas()
        frame.index = range(1, len(frame) + 1)
        yield frame
        return
    first = 1
    for batch in pq.ParquetFile(path).iter_batches(batch_size=chunk_rows):
        frame = batch.to_pandas()
        frame.index = range(first, first + len(frame))
        first += len(frame)
        yield frame


def raw_chunks(path: Path, report: ReadReport, chunk_rows: int | None) -> Iterator[pd.DataFrame]:
    """The file's rows, chunk by chunk, before empty rows are dropped (chapter A1)."""
    suffix = path.suffix.lower()
    if suffix in DELIMITED:
        report.delimiter = choose_delimiter(path, report.encoding, report.delimiter)
        first = 1
        for chunk in delimited_chunks(path, report, chunk_rows):
            chunk.index = range(first, first + len(chunk))  # rows counted from 1 after the header
            first += len(chunk)
            yield chunk
    elif suffix == ".parquet":
        yield from parquet_chunks(path, chunk_rows)
    elif suffix == ".jsonl":
        yield from jsonl_chunks(path, report, chunk_rows)
    else:
        try:
            data = loads_strict(path.read_text(encoding=report.encoding), path.name)
        except json.JSONDecodeError as error:
            if error.msg != "Extra data":
                raise ValueError(f"{path.name} is not valid JSON ({error})") from None
            yield from jsonl_chunks(path, report, chunk_rows)  # a .json file of JSON lines
            return
        yield records_frame(json_records(data, path), 1, path)


def read_chunks(path: Path, encoding: str | None = None, delimiter: str | None = None,
                chunk_rows: int | None = None, report: ReadReport | None = None) -> Iterator[pd.DataFrame]:
    """A file's non-empty rows as text-valued frames, in chunks when it is large (chapter A1).

    `report` (made here when not given) collects what was read; rows are numbered from 1 after the header
    (by line for JSON lines), so errors can point at them.
    """
    path = Path(path)
    check_suffix(path)
    if not path.is_file():
        raise FileNotFoundError(f"no such file: {path}")
    if path.stat().st_size == 0:
        raise ValueError(f"{path.name} is empty (0 bytes): check that the export finished, or pass another file")
    report = report or ReadReport(path, "")
    report.path = path
    report.delimiter = delimiter
    report.encoding = "parquet" if path.suffix.lower() == ".parquet" else file_encoding(path, encoding)
    if chunk_rows is None and path.stat().st_size > LARGE_FILE_BYTES:
        chunk_rows = CHUNK_ROWS  # too large to hold twice (text and frame) at once
    for chunk in raw_chunks(path, report, chunk_rows):
        check_no_duplicate_columns(chunk, path)
        blank = chunk.isna().all(axis=1) if len(chunk.columns) else pd.Series(True, index=chunk.index)
        report.empty_rows += int(blank.sum())
        report.chunks += 1
        kept = chunk[~blank]
        report.rows += len(kept)
        report.columns = [str(c) for c in chunk.columns]
        yield kept
    if report.chunks == 0:  # a header and nothing else
        yield pd.DataFrame(columns=report.columns)


def check_no_duplicate_columns(frame: pd.DataFrame, path: Path) -> None:
    """Refuse a frame (Parquet, JSON) with two columns of one name (chapter A1)."""
    twice = frame.columns[frame.columns.duplicated()].tolist()
    if twice:
        raise ValueError(f"{path.name} has more than one column named {twice[0]!r}: keep one")


def read_table(path: Path, encoding: str | None = None, delimiter: str | None = None,
               chunk_rows: int | None = None) -> pd.DataFrame:
    """The whole file as one frame of text values; the report is printed and kept in attrs (chapter A1)."""
    report = ReadReport(Path(path), "")
    chunks = list(read_chunks(path, encoding, delimiter, chunk_rows, report))
    frame = pd.concat(chunks) if len(chunks) > 1 else chunks[0]  # read_chunks yields at least one
    print(report.line())
    frame.attrs["read_report"] = report.line()
    return frame


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
