"""The time per epoch estimate (`bertmem.memory.speed.epoch_estimate`: what `bertmem plan` and the "Will it fit?"
page print) held against every training time the book holds: appendix A3's measured epochs and the published
training throughputs (`benchmarks/epoch_estimates.py` prints the table)."""

from __future__ import annotations

import statistics
from typing import Any

from bertmem.book.gpu_measured import recorded_gpu_run
from bertmem.book.published import published_throughput
from bertmem.memory.cards import CARDS, card_for
from bertmem.memory.estimate import model_work
from bertmem.memory.speed import ModelWork, epoch_estimate

BENCH_KEYS = ("bench", "bench, cuDNN attention off")  # A3's two benches of the fp32 baseline and the recipe
STEPS = 100  # published throughputs are steady rates: an epoch of this many whole micro-steps


def _row(source: str, card, step: str, precision: str, micro_batch: int, examples: int, tokens: float,
         measured_s: float, work: ModelWork) -> dict[str, Any]:
    estimate = epoch_estimate(work, examples, tokens, micro_batch, card, precision)
    return {"source": source, "card": card.name, "step": step, "estimated (s)": estimate.seconds,
            "measured (s)": measured_s, "estimated / measured": estimate.seconds / measured_s,
            "bound": estimate.bound, "rate (TFLOP/s)": estimate.rate_tflops,
            "rate": "published" if card.rate_measured(precision) else f"{card.utilisation:.0%} of peak",
            "reached (TFLOP/s)": examples * work.example_flops(tokens) / measured_s / 1e12}


def measured_epochs(run: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """A3's bench rows: the estimate for each row's micro-batch, precision and padded tokens per example on the
    run's card, against the training time per epoch it measured (cuDNN attention on and off)."""
    run = run or recorded_gpu_run()
    card = card_for(run["environment"]["gpu"])
    if card is None:
        raise ValueError(f"the card table holds no {run['environment']['gpu']}: add it to bertmem.memory.cards")
    rows = []
    for key in BENCH_KEYS:
        settings = run[key]["settings"]
        work = model_work(settings["model_id"].removesuffix(" (random weights)"))
        examples = settings["train_size"]
        for row in run[key]["rows"]:
            rows.append(_row(f"A3, {key}", card, f"{row['variant']}, {row['micro-batch']} × "
                             f"{row['padded tokens per epoch'] / examples:.0f} tokens, {row['precision']}",
                             row["precision"], row["micro-batch"], examples,
                             row["padded tokens per epoch"] / examples, row["time per epoch (s)"], work))
    return rows


def published_epochs(roles: tuple[str, ...] = ("compare", "other-framework")) -> list[dict[str, Any]]:
    """Each published throughput (sequences per second) as the time of an epoch of STEPS micro-steps, against
    the estimate for it (precisions the card table has no peak for, such as TF32, are left out)."""
    rows = []
    for row in published_throughput(roles):
        card = CARDS[row["card_key"]]
        if row["precision"] not in card.peak_tflops:
            continue
        batch, length = int(row["batch"]), int(row["seq_len"])
        examples = STEPS * batch
        rows.append(_row(f"{row['source']} ({row['framework']})", card,
                         f"{row['model'].removesuffix('-uncased')} {batch} × {length}, {row['precision']}",
                         row["precision"], batch, examples, float(length),
                         examples / float(row["sequences_per_s"]), model_work(row["model"])))
    return rows


def time_check() -> list[dict[str, Any]]:
    """Every row the book can hold the estimate against: A3's measured epochs, then the published rates."""
    return measured_epochs() + published_epochs()


def time_check_summary(rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """How the estimate did (the "Will it fit?" page quotes it, the benchmark prints it): the runs, and the
    lowest, median and highest estimate / measured."""
    ratios = sorted(row["estimated / measured"] for row in (time_check() if rows is None else rows))
    return {"runs": len(ratios), "low": ratios[0], "median": statistics.median(ratios), "high": ratios[-1]}


__all__ = ["measured_epochs", "published_epochs", "time_check", "time_check_summary"]
