"""Messy files of the kinds people export, each with the outcome the loader promises for it (appendices A1, A4).

`write_corpus(folder)` writes every kind; `MESSY_FILES` states, for each, either what loading it gives (rows
and classes) or the phrase its refusal must contain. The tests load every file the way `bertmem train` does
and check the promise; appendix A4 shows the table live."""

from __future__ import annotations

import codecs
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from bertmem.data.frames import PrepareFrame, prepare_frame, read_labelled

REVIEWS = ["A warm, funny film.", "Dull and far too long.", "I loved the music.", "The plot made no sense.",
           "Great acting, weak ending.", "Not worth the ticket."]
VERDICTS = ["pos", "neg", "pos", "neg", "pos", "neg"]


@dataclass(frozen=True)
class MessyFile:
    """One kind of messy file: its name, how it is written, the options it needs, the promised outcome."""

    name: str
    kind: str
    content: Callable[[], bytes]
    options: dict = field(default_factory=dict)
    rows: int | None = None          # loads: this many rows ...
    classes: tuple = ()              # ... with these class names, in id order
    refusal: str | None = None       # refused: the message contains this

    @property
    def outcome(self) -> str:
        """The promised outcome in words."""
        if self.refusal is not None:
            return f"refused: “…{self.refusal}…”"
        return f"loads {self.rows} rows, classes {list(self.classes)}"


def table(header: str, rows: list[list[str]], delimiter: str = ",", newline: str = "\n",
          encoding: str = "utf-8") -> Callable[[], bytes]:
    """A delimited file, written with the csv module's quoting (fields with the delimiter or a newline)."""
    import csv
    import io

    def content() -> bytes:
        buffer = io.StringIO(newline="")
        writer = csv.writer(buffer, delimiter=delimiter, lineterminator=newline)
        writer.writerow(header.split(","))
        writer.writerows(rows)
        return buffer.getvalue().encode(encoding)
    return content


def raw(text: str, encoding: str = "utf-8") -> Callable[[], bytes]:
    """A file written exactly as given."""
    return lambda: text.encode(encoding)


def reviews(labels: list | None = None, texts: list | None = None) -> list[list[str]]:
    """The six reviews with the given labels (default pos/neg)."""
    return [[t, str(v)] for t, v in zip(texts or REVIEWS, labels or VERDICTS)]


def parquet_bytes() -> bytes:
    """A Parquet file with a categorical label column, as pandas writes it."""
    import io

    buffer = io.BytesIO()
    pd.DataFrame({"text": REVIEWS, "label": pd.Categorical(VERDICTS)}).to_parquet(buffer)
    return buffer.getvalue()


def large_csv(rows: int = 3000) -> Callable[[], bytes]:
    """A delimited file long enough to be read in chunks when the chunk size is small."""
    body = [[f"review number {i}: " + ("good" if i % 3 else "bad"), "pos" if i % 3 else "neg"] for i in range(rows)]
    return table("text,label", body)


def jsonl(records: list, blank_after: int | None = None) -> Callable[[], bytes]:
    """JSON lines, optionally with a blank line after record `blank_after`."""
    lines = [json.dumps(r, ensure_ascii=False) for r in records]
    if blank_after is not None:
        lines.insert(blank_after, "")
    return raw("\n".join(lines) + "\n")


RECORDS = [{"text": t, "label": v} for t, v in zip(REVIEWS, VERDICTS)]
PN = ("neg", "pos")
MESSY_FILES = [
    MessyFile("plain.csv", "UTF-8, comma, a header (the reference)", table("text,label", reviews()), rows=6,
              classes=PN),
    MessyFile("utf8_bom.csv", "UTF-8 with a byte-order mark (Excel's 'CSV UTF-8')",
              lambda: codecs.BOM_UTF8 + table("text,label", reviews())(), rows=6, classes=PN),
    MessyFile("excel_unicode.txt", "UTF-16 with a byte-order mark, tab-separated (Excel's 'Unicode text')",
              lambda: codecs.BOM_UTF16_LE + table("text,label", reviews(), "\t", "\r\n", "utf-16-le")(),
              rows=6, classes=PN),
    MessyFile("windows_1252.csv", "Windows-1252 (Latin-1) accents, read as UTF-8",
              table("text,label", reviews(texts=["Café society, très bien."] + REVIEWS[1:]), encoding="cp1252"),
              refusal="pass encoding='cp1252'"),
    MessyFile("windows_1252.csv", "the same file with encoding='cp1252'",
              table("text,label", reviews(texts=["Café society, très bien."] + REVIEWS[1:]), encoding="cp1252"),
              options={"encoding": "cp1252"}, rows=6, classes=PN),
    MessyFile("utf16_no_bom.csv", "UTF-16 without a byte-order mark",
              table("text,label", reviews(), encoding="utf-16-le"), refusal="encoding='utf-16-le'"),
    MessyFile("semicolon.csv", "semicolon-separated (Excel in many European locales)",
              table("text,label", reviews(), ";"), rows=6, classes=PN),
    MessyFile("tabs.tsv", "tab-separated .tsv", table("text,label", reviews(), "\t"), rows=6, classes=PN),
    MessyFile("pipes.txt", "pipe-separated .txt", table("text,label", reviews(), "|"), rows=6, classes=PN),
    MessyFile("quoted_newlines.csv", "texts with commas, quotes and line breaks, quoted",
              table("text,label", reviews(texts=['He said "wow", twice.', "Line one\nline two", "a, b, c",
                                                 "Tabs\tinside", "Carriage\r\nreturn", "plain"])),
              rows=6, classes=PN),
    MessyFile("unquoted_comma.csv", "a text with a comma and no quotes",
              raw("text,label\nA warm, funny film.,pos\nDull.,neg\n"), refusal="must be in double quotes"),
    MessyFile("crlf.csv", "Windows line endings", table("text,label", reviews(), newline="\r\n"), rows=6,
              classes=PN),
    MessyFile("cr_only.csv", "old Mac line endings (CR only)", table("text,label", reviews(), newline="\r"),
              rows=6, classes=PN),
    MessyFile("header_spelling.csv", "header ' Review ' and 'LABEL' asked for as review/label",
              table(" Review ,LABEL", reviews()), options={"text_column": "review"}, rows=6, classes=PN),
    MessyFile("duplicate_header.csv", "two columns named text", table("text,label,text",
              [r + ["other"] for r in reviews()]), refusal="2 columns named 'text'"),
    MessyFile("index_column.csv", "pandas' index written with an empty header",
              table(",text,label", [[str(i)] + r for i, r in enumerate(reviews())]), rows=6, classes=PN),
    MessyFile("empty_rows.csv", "two blank lines and a row of empty fields (skipped, and counted)",
              raw("text,label\ngood,pos\nbad,neg\n\n,\nfine,pos\nawful,neg\n\nok,pos\nmeh,neg\n"), rows=6,
              classes=PN),
    MessyFile("missing_label.csv", "a row with text but no label", raw("text,label\ngood,pos\nbad,\nfine,neg\n"),
              refusal="no label in column 'label' in row 2: pass --drop-empty"),
    MessyFile("missing_text.csv", "a row with a label but no text", raw("text,label\ngood,pos\n,neg\nbad,neg\n"),
              refusal="no text in column 'text' in row 2"),
    MessyFile("missing_words_as_text.csv", "texts that look like missing values: NA, null, None, N/A, nan, -",
              table("text,label", reviews(texts=["NA", "null", "None", "N/A", "nan", "-"])), rows=6, classes=PN),
    MessyFile("numbers_as_text.csv", "texts that look like numbers: 5, 007, 1e3, 10/10, 3.50, -1",
              table("text,label", reviews(texts=["5", "007", "1e3", "10/10", "3.50", "-1"])), rows=6, classes=PN),
    MessyFile("int_labels.csv", "labels 0 and 1", table("text,label", reviews([1, 0, 1, 0, 1, 0])), rows=6,
              classes=("0", "1")),
    MessyFile("star_labels.csv", "star ratings 1 to 5 and a 10, ordered as numbers (10 last)",
              table("text,label", reviews([5, 1, 4, 2, 3, 10])), rows=6, classes=("1", "2", "3", "4", "5", "10")),
    MessyFile("float_labels.csv", "labels 1.0 and 0.0 (a column that once held a missing value)",
              table("text,label", reviews(["1.0", "0.0", "1.0", "0.0", "1.0", "0.0"])), rows=6,
              classes=("0", "1")),
    MessyFile("fractional_labels.csv", "scores such as 0.5 as labels",
              table("text,label", reviews(["0.5", "1.0", "0.0", "0.5", "1.0", "0.0"])),
              refusal="fractional labels (0.5) in 2 rows (rows 1, 4)"),
    MessyFile("label_spaces.csv", "labels with stray spaces", table("text,label", reviews(
              [" pos", "neg ", "pos", " neg ", "pos", "neg"])), rows=6, classes=PN),
    MessyFile("label_case.csv", "labels Pos and pos (kept apart, with a warning)", table("text,label", reviews(
              ["Pos", "neg", "pos", "neg", "pos", "neg"])), rows=6, classes=("Pos", "neg", "pos")),
    MessyFile("one_class.csv", "every label the same", table("text,label", reviews(["pos"] * 6)),
              refusal="only one class"),
    MessyFile("many_classes.csv", "twenty classes", table("text,label", [[f"text {i}", f"topic{i % 20:02d}"]
              for i in range(40)]), rows=40, classes=tuple(f"topic{i:02d}" for i in range(20))),
    MessyFile("records.json", "a JSON list of records", raw(json.dumps(RECORDS)), rows=6, classes=PN),
    MessyFile("pandas_columns.json", "pandas' DataFrame.to_json() (columns of index: value)",
              lambda: pd.DataFrame(RECORDS).to_json().encode(), rows=6, classes=PN),
    MessyFile("lines.jsonl", "JSON lines with a blank line", jsonl(RECORDS, blank_after=3), rows=6, classes=PN),
    MessyFile("json_lines.json", "JSON lines in a .json file", jsonl(RECORDS), rows=6, classes=PN),
    MessyFile("nested.json", "records under a 'data' key", raw(json.dumps({"version": 1, "data": RECORDS})),
              refusal="under the key 'data'"),
    MessyFile("bad_line.jsonl", "a line that is not JSON", raw(json.dumps(RECORDS[0]) + "\n{text: 'x'}\n"),
              refusal="line 2 of bad_line.jsonl is not valid JSON"),
    MessyFile("number_texts.jsonl", "a text stored as a JSON number", jsonl([{"text": 5, "label": "pos"}]
              + RECORDS[1:]), refusal="non-text values (int) in column 'text' in row 1"),
    MessyFile("categorical.parquet", "Parquet with a categorical label column", parquet_bytes, rows=6, classes=PN),
    MessyFile("spreadsheet.xlsx", "an Excel workbook", raw("PK\x03\x04 not really a workbook"),
              refusal="save it as 'CSV UTF-8'"),
    MessyFile("empty.csv", "an empty file (0 bytes)", raw(""),
              refusal="is empty (0 bytes): check that the export finished"),
    MessyFile("header_only.csv", "a header and no rows", raw("text,label\n"),
              refusal="has no rows: check that the export wrote its rows"),
    MessyFile("trailing_delimiters.csv", "empty columns from trailing delimiters (Excel)",
              raw("text,label,,\n" + "".join(f"{t.replace(',', '')},{v},,\n" for t, v in zip(REVIEWS, VERDICTS))),
              rows=6, classes=PN),
    MessyFile("blank_first_line.csv", "a blank line above the header", raw("\ntext,label\ngood,pos\nbad,neg\n"),
              refusal="the first line of blank_first_line.csv is blank"),
    MessyFile("bom_and_cp1252.csv", "a UTF-8 byte-order mark, then a Windows-1252 byte",
              lambda: codecs.BOM_UTF8 + "text,label\ncafé,pos\nbad,neg\n".encode("cp1252"),
              refusal="mixes encodings"),
    MessyFile("blank_label.csv", "a label of spaces only", raw("text,label\ngood,pos\nbad,   \nfine,neg\n"),
              refusal="no label in column 'label' in row 2: pass --drop-empty"),
    MessyFile("label_codes.csv", "class codes 01, 02, 10 (read as the numbers 1, 2, 10, and said so)",
              table("text,label", reviews(["01", "02", "10", "01", "02", "10"])), rows=6,
              classes=("1", "2", "10")),
    MessyFile("big_integer_labels.csv", "20-digit ids as labels (kept exact)", table("text,label", reviews(
              ["12345678901234567890", "12345678901234567891"] * 3)), rows=6,
              classes=("12345678901234567890", "12345678901234567891")),
    MessyFile("duplicate_key.jsonl", "a JSON line with the key label twice",
              raw(json.dumps(RECORDS[0]) + '\n{"text": "x", "label": "pos", "label": "neg"}\n'),
              refusal="has an object with the key 'label' twice"),
    MessyFile("large.csv", "3,000 rows, read in chunks of 500", large_csv(), options={"chunk_rows": 500},
              rows=3000, classes=PN),
    MessyFile("missing_text.csv", "a row with a label but no text, left out and counted", raw(
        "text,label\ngood,pos\n,neg\nbad,neg\n"), options={"drop_empty": True}, rows=2, classes=PN),
    MessyFile("no_text_or_label.csv", "rows without text and rows without a label, left out and counted", raw(
        "text,label\ngood,pos\n  ,neg\nbad,\nfine,neg\n"), options={"drop_empty": True}, rows=2,
        classes=PN),
    MessyFile("subject_body.csv", "two text columns, read as a text pair (subject, body; one body empty)",
              raw("subject,body,label\nGreat,A warm funny film.,pos\nAwful,,neg\nFine,Worth a look.,pos\n"),
              options={"text_column": "subject", "second_text_column": "body"}, rows=3, classes=PN),
    MessyFile("subject_body.csv", "the same two columns joined into one text",
              raw("subject,body,label\nGreat,A warm funny film.,pos\nAwful,,neg\nFine,Worth a look.,pos\n"),
              options={"text_column": "subject", "second_text_column": "body", "join_texts": True}, rows=3,
              classes=PN),
    MessyFile("empty_bodies.csv", "two text columns, both empty in one row",
              raw("subject,body,label\nGreat,A warm funny film.,pos\n,,neg\nFine,Worth a look.,pos\n"),
              options={"text_column": "subject", "second_text_column": "body"},
              refusal="no text in columns ['subject', 'body'] in row 2: pass --drop-empty"),
]


def write_corpus(folder: Path) -> list[Path]:
    """Write every messy file into `folder` (appendix A4); the same bytes on every run."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for messy in MESSY_FILES:
        path = folder / messy.name
        path.write_bytes(messy.content())
        paths.append(path)
    return paths


def try_loading(messy: MessyFile, folder: Path, prepare: PrepareFrame = prepare_frame) -> dict:
    """Load one messy file through the package's reader and `prepare`; what happened, as a table row (appendix A4)."""

    options = {"text_column": "text", "label_column": "label", **messy.options}
    try:
        frame = read_labelled(Path(folder) / messy.name, prepare=prepare, **options)
    except (ValueError, FileNotFoundError) as error:
        return {"file": messy.name, "kind": messy.kind, "result": "refused", "detail": str(error)}
    return {"file": messy.name, "kind": messy.kind, "result": "loaded",
            "detail": f"{len(frame)} rows, classes {frame.attrs['label_names']}", "frame": frame}


def outcome_table() -> str:
    """Every kind and its promised outcome, as a Markdown table (appendix A4)."""
    lines = ["| file | kind | options | promised outcome |", "|---|---|---|---|"]
    for messy in MESSY_FILES:
        options = ", ".join(f"{key}={value!r}" for key, value in messy.options.items()) or "—"
        lines.append(f"| `{messy.name}` | {messy.kind} | {options} | {messy.outcome} |")
    return "\n".join(lines) + "\n"
