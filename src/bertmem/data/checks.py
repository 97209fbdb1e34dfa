"""From rows as read to rows a model can train on: the two columns, the texts, the labels as ids (chapter A1).

Nothing is dropped or re-interpreted silently: a label mapping is printed, a column found under another
spelling is printed, and rows without text or label are an error that names them and the fix."""

from __future__ import annotations

import warnings
from decimal import Decimal, InvalidOperation
from typing import Sequence

import numpy as np
import pandas as pd

MISSING_WORDS = frozenset({"na", "n/a", "nan", "null", "none", "nil", "missing", "?", "-"})


def some_rows(mask: pd.Series) -> str:
    """The rows `mask` marks, for an error message: "row 3", or "12 rows (rows 3, 9, 11, 14, 20, ...)"."""
    rows = mask[mask].index.tolist()
    listed = ", ".join(str(r) for r in rows[:5]) + (", ..." if len(rows) > 5 else "")
    return f"row {listed}" if len(rows) == 1 else f"{len(rows)} rows (rows {listed})"


def find_column(raw: pd.DataFrame, name: str, option: str) -> str:
    """`name`, or the one column spelled like it up to case and spaces (printed); else an error (chapter A1)."""
    if name in raw.columns:
        return name
    alike = [c for c in raw.columns if str(c).strip().casefold() == name.strip().casefold()]
    if len(alike) == 1:
        print(f"{option}={name!r}: using the column {alike[0]!r}")
        return alike[0]
    raise ValueError(f"missing column(s) [{name!r}]; available columns: {list(raw.columns)}. "
                     f"Pass {option}= (--{option.replace('_', '-')}) naming yours")


DROP_EMPTY_FIX = "pass --drop-empty to leave them out and count them (drop_empty=True in Python)"


def no_text(texts: pd.Series) -> pd.Series:
    """Rows whose value is missing or only spaces (non-text values are not counted here) (chapter A1)."""
    return texts.isna() | texts.map(lambda t: isinstance(t, str) and t.strip() == "")


def check_text_values(texts: pd.Series) -> None:
    """Refuse numbers, lists or other non-text values in a text column, naming the rows (chapter A1)."""
    present = texts[~texts.isna()]
    not_text = ~present.map(lambda t: isinstance(t, str))
    if not_text.any():
        raise ValueError(f"non-text values ({type(present[not_text].iloc[0]).__name__}) in column {texts.name!r} "
                         f"in {some_rows(not_text)}: the text column must hold strings; if they are texts, "
                         "convert them with .astype(str)")


def checked_texts(texts: pd.Series) -> pd.Series:
    """The text column, refused where a row has no text or a non-text value, naming the rows and the fix (A1)."""
    check_text_values(texts)
    empty = no_text(texts)
    if empty.any():
        raise ValueError(f"no text in column {texts.name!r} in {some_rows(empty)}: {DROP_EMPTY_FIX}, or fill them")
    return texts


def no_label(labels: pd.Series) -> pd.Series:
    """Rows without a label: missing, or only spaces (chapter A1)."""
    return labels.isna() | (labels.astype(str).str.strip() == "")


def check_labels_present(labels: pd.Series) -> None:
    """Refuse rows without a label (empty, or only spaces), naming them and the fix (chapter A1)."""
    missing = no_label(labels)
    if missing.any():
        raise ValueError(f"no label in column {labels.name!r} in {some_rows(missing)}: {DROP_EMPTY_FIX}, or fill "
                         "them")


def no_text_rows(raw: pd.DataFrame, text_columns: Sequence[str]) -> pd.Series:
    """Rows with no text in any of `text_columns`; non-text values are refused (chapter A1, `bertmem predict`)."""
    for column in text_columns:
        check_text_values(raw[column])
    return pd.concat([no_text(raw[c]) for c in text_columns], axis=1).all(axis=1)


def unusable_masks(raw: pd.DataFrame, text_columns: Sequence[str],
                   label_column: str) -> tuple[pd.Series, pd.Series]:
    """(no text in any of `text_columns`, no label) row masks; non-text values are refused (chapter A1)."""
    empty = no_text_rows(raw, text_columns)
    return empty, no_label(raw[label_column]) & ~empty


def refuse_unusable(empty: pd.Series, unlabelled: pd.Series, text_columns: Sequence[str], label_column: str) -> None:
    """The one sentence for rows without text or label, naming them and --drop-empty (chapter A1)."""
    if empty.any():
        where = f"column {text_columns[0]!r}" if len(text_columns) == 1 else f"columns {list(text_columns)}"
        raise ValueError(f"no text in {where} in {some_rows(empty)}: {DROP_EMPTY_FIX}")
    if unlabelled.any():
        raise ValueError(f"no label in column {label_column!r} in {some_rows(unlabelled)}: {DROP_EMPTY_FIX}, or "
                         "fill them")


def left_out_note(empty: pd.Series, unlabelled: pd.Series) -> str:
    """'left out 12 rows (rows 3, …) without text and row 40 without a label (--drop-empty)', or '' (A1)."""
    parts = [f"{some_rows(rows)} without {what}" for rows, what in ((empty, "text"), (unlabelled, "a label"))
             if rows.any()]
    return f"left out {' and '.join(parts)} (--drop-empty)" if parts else ""


def unusable_rows(raw: pd.DataFrame, text_columns: Sequence[str], label_column: str,
                  drop_empty: bool = False) -> tuple[pd.Series, str]:
    """Rows with no text in any of `text_columns`, or no label: refused, or with `drop_empty` marked for
    leaving out, with the one line that counts them (chapter A1). Non-text values are always refused."""
    empty, unlabelled = unusable_masks(raw, text_columns, label_column)
    if not drop_empty:
        refuse_unusable(empty, unlabelled, text_columns, label_column)
    return empty | unlabelled, left_out_note(empty, unlabelled)


def as_number(value: object) -> Decimal | None:
    """The exact number a label writes (1, "01", 1.0, "1e3", 0.5), else None (text, booleans, NaN)."""
    if isinstance(value, bool):
        return None
    try:
        number = Decimal(str(value).strip())
    except InvalidOperation:
        return None
    return number if number.is_finite() else None


def label_values(labels: pd.Series, say: bool = True) -> pd.Series:
    """Labels as exact whole numbers where every one is a number, else as stripped strings (chapter A1).

    A renaming this makes ("01" and "1.0" both read as 1) is printed, so nothing changes without a word;
    numbers with a fractional part are scores, not classes, and refused.
    """
    check_labels_present(labels)
    if isinstance(labels.dtype, pd.CategoricalDtype):
        labels = labels.astype(object)
    text = labels.astype(str).str.strip()  # "pos " and "pos" are one class
    numbers = labels.map(as_number)
    if numbers.isna().any():
        return text
    fractional = numbers.map(lambda n: n != n.to_integral_value())
    if fractional.any():
        raise ValueError(f"fractional labels ({labels[fractional].iloc[0]}) in {some_rows(fractional)}: labels "
                         "must be classes; bin scores into classes first")
    whole = numbers.map(int)
    renamed = sorted({(t, n) for t, n in zip(text, whole) if t != str(n)})
    if renamed and say:
        print(f"labels read as whole numbers: {', '.join(f'{t!r} → {n}' for t, n in renamed[:8])}"
              + (" …" if len(renamed) > 8 else ""))
    return whole.astype(object)


def normalize_labels(labels: pd.Series, label_names: Sequence[str] | None = None) -> tuple[np.ndarray, list[str]]:
    """Labels as ints 0..K-1 plus their names, in sorted order; any mapping that renames is printed (chapter A1).

    With `label_names` (the training split's names) the labels are encoded with that mapping instead, so an
    evaluation split holding only some classes keeps the training ids; an unseen label is an error.
    """
    if label_names is not None:
        return encode_with_names(labels, list(label_names)), list(label_names)
    values = label_values(labels)
    classes = sorted(set(values.tolist()))
    names = [str(c) for c in classes]
    if len(names) < 2:
        raise ValueError(f"only one class ({names}) in the labels: a classifier needs at least two")
    mapping = {c: i for i, c in enumerate(classes)}
    if all(isinstance(c, int) for c in classes):
        if classes != list(range(len(classes))):
            print(f"integer labels mapped to ids: {mapping}")
    else:
        warn_label_spellings(names)
        print(f"string labels mapped to ids: {mapping}")
    return values.map(mapping).to_numpy(dtype=np.int64), names


def warn_label_spellings(names: Sequence[str]) -> None:
    """Warn about classes that are probably one ("Pos", "pos") or probably missing values ("NA") (chapter A1)."""
    groups: dict[str, list[str]] = {}
    for name in names:
        groups.setdefault(name.casefold(), []).append(name)
    clashes = [group for group in groups.values() if len(group) > 1]
    if clashes:
        warnings.warn(f"label names that differ only in case are separate classes: {clashes}; "
                      "lower-case the label column first if they mean the same class", stacklevel=3)
    missing = [name for name in names if name.casefold() in MISSING_WORDS]
    if missing:
        warnings.warn(f"labels {missing} are kept as classes of their own; if they mean 'no label', drop those "
                      "rows first", stacklevel=3)


def encode_with_names(labels: pd.Series, names: list[str]) -> np.ndarray:
    """Encode labels with a given id mapping (the training split's); unseen labels are an error (chapter A1)."""
    mapping = {name: i for i, name in enumerate(names)}
    as_text = labels.astype(str).str.strip()
    if not set(as_text) <= set(mapping):  # spelled otherwise ("1.0" for "1"): compare as the training labels read
        as_text = label_values(labels).astype(str)
    unseen = sorted(set(as_text) - set(mapping))
    if unseen:
        raise ValueError(f"evaluation labels {unseen[:10]} never occur in the training data (classes: {names}): "
                         "fix the labels, or train on data that has these classes")
    return as_text.map(mapping).to_numpy(dtype=np.int64)
