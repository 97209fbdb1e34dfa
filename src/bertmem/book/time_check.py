"""The time per epoch estimate (`bertmem.memory.speed.epoch_estimate`: what `bertmem plan` and the "Will it fit?"
page print) held against every training time the book holds that it can estimate: appendix A3's measured epochs
and the published training throughputs, less those `left_out` names (`benchmarks/epoch_estimates.py` prints the
table)."""

from __future__ import annotations

import statistics
from typing import Any

from bertmem.book.gpu_measured import recorded_gpu_run
from bertmem.book.published import published_throughput
from bertmem.memory.cards import CARDS, Card, card_for, with_article
from bertmem.memory.estimate import model_work
from bertmem.memory.speed import ModelWork, epoch_estimate

BENCH_KEYS = ("bench", "bench, cuDNN attention off")  # A3's two benches of the fp32 baseline and the recipe
STEPS = 100  # published throughputs are steady rates: an epoch of this many whole micro-steps


def _row(source: str, card, step: str, precision: str, micro_batch: int, examples: int, tokens: float,
         measured_s: float, work: ModelWork, model: str, longest: int) -> dict[str, Any]:
    """One held run: every one trains every weight without gradient checkpointing (`model` the checkpoint,
    `longest` the most tokens one example holds), as the estimate beside it assumes (`scope_words`)."""
    estimate = epoch_estimate(work, examples, tokens, micro_batch, card, precision)
    return {"source": source, "card": card.name, "precision": precision, "step": step,
            "model": model.removesuffix("-uncased"), "longest": longest, "trains": "every weight",
            "checkpointing": False,
            "estimated (s)": estimate.seconds,
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
        model = settings["model_id"].removesuffix(" (random weights)")
        work = model_work(model)
        examples = settings["train_size"]
        for row in run[key]["rows"]:
            rows.append(_row(f"A3, {key}", card, f"{row['variant']}, {row['micro-batch']} × "
                             f"{row['padded tokens per epoch'] / examples:.0f} tokens, {row['precision']}",
                             row["precision"], row["micro-batch"], examples,
                             row["padded tokens per epoch"] / examples, row["time per epoch (s)"], work, model,
                             settings["max_length"]))
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
                         examples / float(row["sequences_per_s"]), model_work(row["model"]), row["model"],
                         length))
    return rows


def time_check() -> list[dict[str, Any]]:
    """Every row the book can hold the estimate against: A3's measured epochs, then the published rates."""
    return measured_epochs() + published_epochs()


def left_out() -> list[dict[str, Any]]:
    """The published throughputs the check does not hold, each with why: the rows the throughput table marks
    `excluded` (not the plain recipe chapter 5 compares: another optimizer, checkpointing with accumulation; or
    TF32), and the other rows in a precision no card has a rate for (TF32: the card table keeps no TF32 peak)."""
    rows = []
    for row in published_throughput(("compare", "other-framework", "excluded")):
        card = CARDS[row["card_key"]]
        no_rate = row["precision"] not in card.peak_tflops
        if row["role"] != "excluded" and not no_rate:
            continue
        rows.append({"source": row["source"], "card": card.name, "precision": row["precision"],
                     "step": f"{row['model'].removesuffix('-uncased')} {row['batch']} × {row['seq_len']}, "
                             f"{row['precision']}", "excluded": row["role"] == "excluded", "no rate": no_rate,
                     "note": row["note"]})
    return rows


def left_out_words(rows: list[dict[str, Any]] | None = None) -> str:
    """'4 published rows the throughput table marks excluded, 1 of them in TF32, and 2 more in TF32, which no
    card's rate covers' (the "Will it fit?" page)."""
    rows = left_out() if rows is None else rows
    excluded = [r for r in rows if r["excluded"]]
    tf32 = sum(r["no rate"] for r in excluded)
    others = sum(r["no rate"] and not r["excluded"] for r in rows)
    unrated = " or ".join(sorted({r["precision"].upper() for r in rows if r["no rate"]}))  # TF32
    words = []
    if excluded:
        words.append(f"{len(excluded)} published row{'s' * (len(excluded) != 1)} the throughput table marks "
                     f"excluded" + (f", {tf32} of them in {unrated}" + ("," if others else "") if tf32 else ""))
    if others:
        words.append(f"{others} {'more ' if excluded else ''}in {unrated}, which no card's rate covers")
    return " and ".join(words) if words else "none"


def rate_note(card: Card, precision: str, rows: list[dict[str, Any]] | None = None) -> str | None:
    """What a card's measured rate rests on and how many of the held runs test it, for the pages that quote the
    rate ("Will it fit?", the introduction's minutes); None for an assumed rate."""
    if not card.rate_measured(precision):
        return None
    rows = time_check() if rows is None else rows
    held = sum(r["card"] == card.name and r["precision"] == precision for r in rows)
    # a held run's card is the one the book times it as (GACT's T4 is inferred), not necessarily Colab's
    runs = (f"none of the {len(rows)} training times the book holds the estimate against is "
            f"{with_article(precision)} run on a card timed as the {card.name}" if held == 0
            else f"{held} of the {len(rows)} training times the book holds the estimate against "
                 f"{'is ' + with_article(precision) if held == 1 else 'are ' + precision} run{'s' * (held != 1)} "
                 f"on a card timed as the {card.name}")
    return (f"the {card.name}'s {precision} rate ({card.training_tflops(precision):g} TFLOP/s) rests on "
            f"{card.measured_basis[precision]}; {runs}")


def scope_words(rows: list[dict[str, Any]] | None = None) -> str:
    """What the held runs cover, for the page to say under the spread: 'full fine-tunes of bert-base or
    bert-large at up to 512 tokens, without gradient checkpointing' (a run with LoRA, frozen layers, checkpointing,
    another model or a longer text changes the words)."""
    rows = time_check() if rows is None else rows
    models = sorted({r["model"] for r in rows})
    names = ", ".join(models[:-1]) + " or " + models[-1] if len(models) > 1 else models[0]
    full = all(r["trains"] == "every weight" for r in rows)
    kinds = "full fine-tunes" if full else "fine-tunes (" + " or ".join(sorted({r["trains"] for r in rows})) + ")"
    with_checkpointing = sum(bool(r["checkpointing"]) for r in rows)
    checkpointing = ("without gradient checkpointing" if with_checkpointing == 0
                     else "all with gradient checkpointing" if with_checkpointing == len(rows)
                     else f"{with_checkpointing} with gradient checkpointing")
    return f"{kinds} of {names} at up to {max(r['longest'] for r in rows)} tokens, {checkpointing}"


def time_check_summary(rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """How the estimate did (the "Will it fit?" page quotes it, the benchmark prints it): the runs, the lowest,
    median and highest estimate / measured, what the runs cover (`scope_words`) and the published rows left
    out."""
    rows = time_check() if rows is None else rows
    ratios = sorted(row["estimated / measured"] for row in rows)
    return {"runs": len(ratios), "low": ratios[0], "median": statistics.median(ratios), "high": ratios[-1],
            "scope": scope_words(rows), "left_out": left_out_words()}


def measured_range(estimate: float, summary: dict[str, Any] | None = None) -> tuple[float, float, float]:
    """What the held runs allow for an estimate (minutes or hours): the time it would take if the estimate
    missed as the check's highest, median and lowest estimate / measured did — estimate / high, / median, / low
    (chapter 5)."""
    summary = time_check_summary() if summary is None else summary
    return estimate / summary["high"], estimate / summary["median"], estimate / summary["low"]


__all__ = ["left_out", "left_out_words", "measured_epochs", "measured_range", "published_epochs", "rate_note",
           "scope_words", "time_check", "time_check_summary"]
