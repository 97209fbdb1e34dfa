"""The book's layer: chapter settings and minutes, published GPU figures, demonstrations, the messy-file corpus,
tables, plots, the words computed sentences choose from their numbers, and the "Will it fit?" page's data and its
time check (`bertmem.book.fit_page`, `bertmem.book.time_check`, imported by name: not part of a chapter). Nothing in
the library imports it.
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
from bertmem.book.published import POST_TABLE, comparison, fit_margin, published_rows, tensor_peak_mib
from bertmem.book.wording import (
    about_fraction,
    accumulation_advice,
    accumulation_speed,
    against_limit,
    autocast_activations,
    autocast_cut,
    claim_verdict,
    cudnn_advice,
    cpu_precision_timing,
    device_effect,
    estimate_side,
    epoch_paces,
    first_meeting,
    fit_verdict,
    gradient_match,
    growth,
    highest,
    longest_fit,
    lora_and_freezing,
    mask_match,
    math_path_effect,
    matmul_speedup,
    micro_batch_cost,
    norm_inflation,
    pace,
    pace_than,
    percent_side,
    plural,
    peak_change,
    precision_against_record,
    precision_claim,
    quadratic_claim,
    relative_size,
    resolution,
    runs_part,
    same_losses,
    seeds_direction,
    saving,
    size_change,
    what_stops_first,
)

__all__ = ["ChapterSettings", "LONG_TEXT_RUNS", "MESSY_FILES", "POST_TABLE", "about_fraction", "accumulation_advice",
    "accumulation_speed", "against_limit", "as_table", "autocast_activations", "autocast_cut", "chapter_bench",
    "chapter_dataset", "chapter_settings", "claim_verdict", "comparison", "cpu_precision_timing", "cudnn_advice",
    "data_line", "device_effect", "epoch_paces", "estimate_side", "estimated_minutes", "first_meeting", "fit_margin",
    "fit_verdict", "gradient_match", "growth", "highest", "launch_two_processes", "longest_fit", "lora_and_freezing",
    "mask_match", "math_path_effect", "matmul_speedup", "micro_batch_cost", "norm_inflation", "pace", "pace_than",
    "peak_change", "percent_side",
    "plot_memory_breakdown", "plot_step_timeline", "plot_token_lengths", "plural", "precision_against_record",
    "precision_claim", "published_rows", "quadratic_claim", "recorded_bench", "relative_size", "resolution",
    "runs_part", "same_losses", "seeds_direction", "saving", "scaled_run", "setup_line", "size_change",
    "synthetic_batch", "synthetic_batches", "tensor_peak_mib", "tiny_training_run", "try_loading", "what_stops_first",
    "write_corpus"]
