"""Data: datasets by name (Hub, local mirror), a reader's own files as written, label checks, frames and subsets,
tokenizing, length-grouped batches, long texts as windows, and `DataConfig` with `build_loaders`.
"""

from bertmem.data.batching import LengthGroupedBatchSampler, padding_share
from bertmem.data.checks import checked_texts, find_column, normalize_labels
from bertmem.data.files import ReadReport, read_table
from bertmem.data.frames import (
    TRUNCATIONS,
    EncodedDataset,
    PrepareFrame,
    content_tokens,
    load_text_classification,
    make_loader,
    prepare_frame,
    read_labelled,
    read_split,
    subsample,
    token_length_stats,
    tokenize_frame,
)
from bertmem.data.loaders import DataConfig, build_loaders, load_frames
from bertmem.data.windows import (
    Windows,
    check_window,
    default_stride,
    join_windows,
    long_subset,
    pad_windows,
    split_windows,
    window_count,
    window_loader,
    window_starts,
)

__all__ = ["DataConfig", "EncodedDataset", "LengthGroupedBatchSampler", "PrepareFrame", "ReadReport", "TRUNCATIONS",
    "Windows", "build_loaders", "check_window", "checked_texts", "content_tokens", "default_stride", "find_column",
    "join_windows", "load_frames", "load_text_classification", "long_subset", "make_loader", "normalize_labels",
    "pad_windows", "padding_share", "prepare_frame", "read_labelled", "read_split", "read_table", "split_windows",
    "subsample", "token_length_stats", "tokenize_frame", "window_count", "window_loader", "window_starts"]
