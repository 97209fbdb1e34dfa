"""Own data as real files come: every messy file meets its promised outcome (chapter A1, `bertmem.book.messy`)."""

from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile
import warnings
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertmem.book.messy import MESSY_FILES, outcome_table, try_loading, write_corpus
from bertmem.cli import main
from bertmem.data import files
from bertmem.data.frames import load_text_classification, read_labelled, subsample, text_hash
from bertmem.data.loaders import DataConfig, load_frames

CORPUS = Path(__file__).parent / "data" / "messy"


UNTRACKED = (".parquet",)  # binary data stays out of the repository: written when the tests run


@functools.cache
def corpus() -> Path:
    """The committed corpus plus the untracked binary files, written once per test run."""
    folder = Path(tempfile.mkdtemp(prefix="messy-"))
    for path in CORPUS.iterdir():
        shutil.copy(path, folder)
    for messy in MESSY_FILES:
        if Path(messy.name).suffix in UNTRACKED:
            (folder / messy.name).write_bytes(messy.content())
    return folder


def test_the_committed_corpus_is_what_the_script_writes(tmp_path):
    written = {p.name: p.read_bytes() for p in write_corpus(tmp_path) if p.suffix not in UNTRACKED}
    committed = {p.name: p.read_bytes() for p in CORPUS.iterdir() if p.name != "README.md"}
    assert committed == written, "run scripts/make_messy_corpus.py"
    assert not [p for p in CORPUS.iterdir() if p.suffix in UNTRACKED]
    assert (CORPUS / "README.md").read_text(encoding="utf-8").endswith(outcome_table())
    assert len({m.name for m in MESSY_FILES}) >= 40  # encodings, delimiters, headers, labels, formats, sizes


@pytest.mark.parametrize("messy", MESSY_FILES, ids=lambda m: f"{m.name}-{'-'.join(m.options) or 'plain'}")
def test_every_messy_file_meets_its_promise(messy, capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the label-case warning has its own test
        outcome = try_loading(messy, corpus())
    if messy.refusal is not None:
        assert outcome["result"] == "refused", outcome
        assert messy.refusal in outcome["detail"]
        assert messy.name in outcome["detail"], "a refusal names the file"
        assert "\n" not in outcome["detail"] and len(outcome["detail"]) < 400
        return
    assert outcome["result"] == "loaded", outcome["detail"]
    frame = outcome["frame"]
    assert len(frame) == messy.rows and tuple(frame.attrs["label_names"]) == messy.classes
    left_out = frame.attrs.get("left_out", 0)  # rows without text or label, with drop_empty only
    assert frame.attrs["rows_read"] - left_out == messy.rows  # nothing dropped beyond what is reported
    out = capsys.readouterr().out
    assert f"read {messy.name}: {messy.rows + left_out} rows" in out
    assert bool(left_out) == bool(messy.options.get("drop_empty")) == ("(--drop-empty)" in out)


def frame_of(name: str, **options) -> pd.DataFrame:
    """One corpus file read the way `bertmem train` reads it."""
    return read_labelled(corpus() / name, **options)


def test_texts_are_read_exactly_as_written():
    assert frame_of("missing_words_as_text.csv")["text"].tolist() == ["NA", "null", "None", "N/A", "nan", "-"]
    assert frame_of("numbers_as_text.csv")["text"].tolist() == ["5", "007", "1e3", "10/10", "3.50", "-1"]
    assert frame_of("quoted_newlines.csv")["text"].tolist()[:5] == [
        'He said "wow", twice.', "Line one\nline two", "a, b, c", "Tabs\tinside", "Carriage\r\nreturn"]
    assert frame_of("windows_1252.csv", encoding="cp1252")["text"].iloc[0] == "Café society, très bien."
    reference = frame_of("plain.csv")
    for name in ("utf8_bom.csv", "excel_unicode.txt", "semicolon.csv", "tabs.tsv", "pipes.txt", "crlf.csv",
                 "cr_only.csv", "records.json", "pandas_columns.json", "lines.jsonl", "json_lines.json",
                 "categorical.parquet", "index_column.csv"):
        pd.testing.assert_frame_equal(frame_of(name).reset_index(drop=True), reference.reset_index(drop=True))


def test_what_the_reader_decided_is_reported(capsys):
    frame_of("empty_rows.csv")
    frame_of("semicolon.csv")
    frame_of("utf8_bom.csv")
    frame_of("header_spelling.csv", text_column="review")
    frame_of("star_labels.csv")
    out = capsys.readouterr().out
    assert "read empty_rows.csv: 6 rows" in out and "3 empty rows skipped" in out
    assert "delimiter ';'" in out and "utf-8-sig" in out
    assert "text_column='review': using the column 'Review'" in out and "spaces around header names removed" in out
    assert "integer labels mapped to ids: {1: 0, 2: 1, 3: 2, 4: 3, 5: 4, 10: 5}" in out
    frame_of("label_codes.csv")
    frame_of("float_labels.csv")
    frame_of("trailing_delimiters.csv")
    out = capsys.readouterr().out
    assert "labels read as whole numbers: '01' → 1, '02' → 2" in out
    assert "labels read as whole numbers: '0.0' → 0, '1.0' → 1" in out
    assert "columns ['text', 'label', 'unnamed 3', 'unnamed 4']" in out and "called 'unnamed N'" in out


def test_labels_keep_their_exact_values():
    frame = frame_of("big_integer_labels.csv")
    assert frame.attrs["label_names"] == ["12345678901234567890", "12345678901234567891"]
    assert frame["label"].tolist() == [0, 1, 0, 1, 0, 1]


def test_evaluation_labels_spelled_as_in_training_keep_their_ids(tmp_path):
    train = tmp_path / "train.csv"
    train.write_text("text,label\na,01\nb,02\nc,x\n")
    evaluation = tmp_path / "eval.csv"
    evaluation.write_text("text,label\nd,02\ne,01\n")
    names = read_labelled(train).attrs["label_names"]
    assert names == ["01", "02", "x"]  # not all numbers: strings, as written
    assert read_labelled(evaluation, label_names=names)["label"].tolist() == [1, 0]


def test_chunks_decide_numbers_or_strings_from_every_label(tmp_path):
    path = tmp_path / "mixed.csv"
    path.write_text("text,label\na,0.5\nb,1\nc,pos\nd,neg\n")
    whole = read_labelled(path)
    assert whole.attrs["label_names"] == ["0.5", "1", "neg", "pos"]
    for chunk_rows in (1, 2, 3):
        chunked = read_labelled(path, chunk_rows=chunk_rows)
        assert chunked.attrs["label_names"] == whole.attrs["label_names"]


def test_the_held_out_split_survives_repeated_texts(tmp_path, capsys):
    """Copies of one text count once when rows are kept per label: holding out its copies still leaves enough;
    the copies left out of training are counted aloud."""
    distinct = [f"positive {i}" for i in range(25)]
    smallest = min(text_hash(t) for t in distinct)
    repeated = next(t for t in (f"again {j}" for j in range(10_000)) if text_hash(t) < smallest)  # picked first
    rows = [(repeated, "pos")] * 100 + [(t, "pos") for t in distinct] + [(f"negative {i}", "neg") for i in range(200)]
    path = tmp_path / "repeats.csv"
    pd.DataFrame(rows, columns=["text", "label"]).to_csv(path, index=False)
    train, evaluation = load_frames(DataConfig(dataset=str(path), train_size=40, eval_size=20))
    assert len(train) == 40 and len(evaluation) == 20 and repeated in set(evaluation["text"])
    # stratified by the rows left for training: 25 distinct positives (every copy of the held-out text left out)
    # against 188 negatives -> 5 and 35 of 40
    assert sorted(train["label"].value_counts()) == [5, 35], "both classes train, in proportion"
    assert not set(train["text"]) & set(evaluation["text"])
    left_out = 100 - int((evaluation["text"] == repeated).sum())
    assert f"{left_out} rows repeat a held-out text: left out of the training rows" in capsys.readouterr().out


def test_a_delimiter_must_be_one_character_and_tab_has_a_name(tmp_path):
    assert len(frame_of("tabs.tsv", delimiter="tab")) == 6
    with pytest.raises(ValueError, match="one character"):
        frame_of("plain.csv", delimiter=",,")


def test_labels_that_differ_in_case_or_look_missing_warn(tmp_path):
    with pytest.warns(UserWarning, match="differ only in case"):
        frame_of("label_case.csv")
    path = tmp_path / "na_label.csv"
    path.write_text("text,label\na,pos\nb,NA\nc,neg\n")
    with pytest.warns(UserWarning, match=r"labels \['NA'\] are kept as classes"):
        read_labelled(path)


def test_the_three_files_from_the_report():
    """A text "NA" loads; two columns named text are refused; a Latin-1 file names its fix."""
    assert "NA" in frame_of("missing_words_as_text.csv")["text"].tolist()
    with pytest.raises(ValueError, match=r"duplicate_header.csv has 2 columns named 'text' \(columns \[1, 3\]\)"):
        frame_of("duplicate_header.csv")
    with pytest.raises(ValueError, match=r"windows_1252.csv is not utf-8 text: byte 0xe9 at offset 15.*"
                                         r"encoding='cp1252' \(--encoding cp1252\)"):
        frame_of("windows_1252.csv")


def test_bertmem_train_takes_the_encoding_and_delimiter_flags(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--dataset", str(corpus() / "windows_1252.csv"), "--output-dir", str(tmp_path)])
    assert exit_info.value.code == 2 and "--encoding cp1252" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["train", "--dataset", str(corpus() / "semicolon.csv"), "--delimiter", ",", "--output-dir",
              str(tmp_path)])
    assert "row 1 of semicolon.csv has 2 fields but the header has 1" in capsys.readouterr().err
    frames = load_frames(DataConfig(dataset=str(corpus() / "windows_1252.csv"), encoding="cp1252",
                                    train_size=None, eval_size=2))
    assert [len(f) for f in frames] == [4, 2]


@pytest.mark.parametrize("chunk_rows", [1, 7, 500, None])
def test_chunked_reading_picks_the_same_rows_as_reading_everything(chunk_rows):
    whole = frame_of("large.csv")  # every row, no keep_per_label: the reference
    chunked = frame_of("large.csv", chunk_rows=chunk_rows, keep_per_label=300, seed=3)
    pd.testing.assert_frame_equal(subsample(chunked, 300, seed=3), subsample(whole, 300, seed=3))


def test_a_file_too_large_to_read_at_once_is_read_in_chunks(monkeypatch, capsys):
    config = DataConfig(dataset=str(corpus() / "large.csv"), train_size=400, eval_size=200)
    at_once = load_frames(config)
    monkeypatch.setattr(files, "LARGE_FILE_BYTES", 10_000)  # large.csv is about 85 kB
    monkeypatch.setattr(files, "CHUNK_ROWS", 250)
    capsys.readouterr()
    in_chunks = load_frames(config)
    assert "in 12 chunks" in capsys.readouterr().out
    for a, b in zip(at_once, in_chunks):
        pd.testing.assert_frame_equal(a, b)


def test_encoding_options_are_for_files_only():
    with pytest.raises(ValueError, match="encoding= and delimiter= are for files"):
        load_text_classification("sst2", "validation", encoding="cp1252")


# A lone "\r" is left out: pandas' to_csv does not quote it, so the file it writes is ambiguous to any reader.
PRINTABLE = st.characters(blacklist_categories=("Cs", "Cc"), blacklist_characters="\ufeff") | st.sampled_from(
    list("\n\t,;|\"'"))
TEXTS = st.text(PRINTABLE, min_size=1, max_size=40).filter(lambda t: t.strip() != "")
# Class names as files hold them: words, or whole numbers written plainly (a file of numbers is read as numbers).
LABELS = st.from_regex(r"[A-Za-z][A-Za-z0-9_-]{0,7}", fullmatch=True) | st.integers(-5, 50).map(str)


def write(frame: pd.DataFrame, path: Path, encoding: str) -> None:
    """Write a frame the way tools commonly do."""
    suffix = path.suffix
    if suffix in (".csv", ".tsv"):
        frame.to_csv(path, index=False, sep="\t" if suffix == ".tsv" else ",", encoding=encoding)
    elif suffix == ".jsonl":
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in frame.to_dict("records")),
                        encoding=encoding)
    elif suffix == ".json":
        path.write_text(frame.to_json(orient="records", force_ascii=False), encoding=encoding)
    else:
        frame.to_parquet(path)


ROUND_TRIPS = int(os.environ.get("BERTMEM_ROUND_TRIPS", "60"))  # more for a longer search


@settings(max_examples=ROUND_TRIPS, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(TEXTS, LABELS), min_size=2, max_size=12),
       suffix=st.sampled_from([".csv", ".tsv", ".jsonl", ".json", ".parquet"]),
       encoding=st.sampled_from(["utf-8", "utf-8-sig", "utf-16"]))
def test_any_texts_and_labels_round_trip(tmp_path_factory, rows, suffix, encoding):
    texts = [t for t, _ in rows]
    labels = [label for _, label in rows]
    if len(set(labels)) < 2:
        labels[0] = labels[1] + "x"
    path = tmp_path_factory.mktemp("round") / f"data{suffix}"
    write(pd.DataFrame({"text": texts, "label": labels}), path, encoding)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frame = read_labelled(path)
    names = frame.attrs["label_names"]
    assert frame["text"].tolist() == texts
    assert [names[i] for i in frame["label"]] == labels


def test_holding_out_every_text_of_a_class_is_an_error_not_a_silent_loss(tmp_path):
    path = tmp_path / "one_text.csv"
    pd.DataFrame([("the only positive review", "pos")] * 10 + [(f"negative {i}", "neg") for i in range(50)],
                 columns=["text", "label"]).to_csv(path, index=False)
    with pytest.raises(ValueError, match=r"no training rows of class\(es\) \['pos'\]"):
        load_frames(DataConfig(dataset=str(path), train_size=None, eval_size=None))
