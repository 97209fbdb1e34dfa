"""The book's layer: chapter settings and minutes, published GPU figures, demonstrations, the messy-file corpus,
tables, plots and the words computed sentences choose from their numbers. Nothing in the library imports it.
"""

from bertmem.book.bench_info import estimated_minutes, recorded_bench
from bertmem.book.chapters import (
    LONG_TEXT_RUNS,
    ChapterSettings,
    chapter_bench,
    chapter_dataset,
    chapter_settings,
    data_line,
    setup_line,
)
from bertmem.book.demos import launch_two_processes, scaled_run, synthetic_batch, synthetic_batches, tiny_training_run
from bertmem.book.messy import MESSY_FILES, try_loading, write_corpus
from bertmem.book.plots import as_table, plot_memory_breakdown, plot_step_timeline, plot_token_lengths
from bertmem.book.published import SEED_TABLE, comparison, fit_margin, published_rows, tensor_peak_mib
from bertmem.book.wording import (
    accumulation_speed,
    cpu_precision_timing,
    epoch_paces,
    lora_and_freezing,
    misses,
    pace,
    peak_change,
    size_change,
)

__all__ = ["ChapterSettings", "LONG_TEXT_RUNS", "MESSY_FILES", "SEED_TABLE", "accumulation_speed", "as_table",
    "chapter_bench", "chapter_dataset", "chapter_settings", "comparison", "cpu_precision_timing", "data_line",
    "epoch_paces", "estimated_minutes", "fit_margin", "launch_two_processes", "lora_and_freezing", "misses",
    "pace", "peak_change", "plot_memory_breakdown", "plot_step_timeline", "plot_token_lengths", "published_rows",
    "recorded_bench", "scaled_run", "setup_line", "size_change", "synthetic_batch", "synthetic_batches",
    "tensor_peak_mib", "tiny_training_run", "try_loading", "write_corpus"]
