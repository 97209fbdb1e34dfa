"""The time per epoch estimate held against the training times the book holds (bertmem.book.time_check, the
"Will it fit?" page, benchmarks/epoch_estimates.py)."""

import math
import subprocess
import sys
from pathlib import Path

import pytest

from bertmem.book.time_check import measured_epochs, measured_range, published_epochs, time_check, time_check_summary
from bertmem.memory.cards import CARDS
from bertmem.memory.estimate import model_work
from bertmem.memory.speed import epoch_estimate

ROOT = Path(__file__).resolve().parents[1]


def test_every_held_run_has_an_estimate_for_its_own_card_and_shape():
    rows = time_check()
    assert len(rows) >= 30 and all(math.isfinite(r["estimated / measured"]) and r["measured (s)"] > 0 for r in rows)
    assert {r["card"] for r in rows} >= {"H200", "V100 16GB", "A100 40GB", "A10", "Colab T4"}
    assert not any("tf32" in r["step"] for r in rows)  # no peak for TF32 in the card table: left out


def test_the_t4_row_its_rate_came_from_agrees_by_construction_and_a3_is_estimated_as_plan_would():
    """CARDS['T4']'s fp32 rate is the matmul count of GACT's bert-base 8 × 128 row: the check of that
    row must come to 1; A3's fp32 row is the estimate `bertmem plan` makes for its shape on an H200."""
    row = next(r for r in published_epochs() if r["card"] == "Colab T4" and r["step"] == "bert-base 8 × 128, fp32")
    assert abs(row["estimated / measured"] - 1) < 0.01
    a3 = measured_epochs()
    fp32 = next(r for r in a3 if r["step"].startswith("fp32 baseline"))
    alone = epoch_estimate(model_work("bert-base-uncased"), 1024, 512, 32, CARDS["H200"], "fp32").seconds
    assert fp32["estimated (s)"] == alone  # A3's epoch: 1,024 reviews padded to 512 tokens
    assert fp32["bound"] == "compute" and any(r["bound"] == "per-step floor" for r in a3)


def test_the_benchmark_prints_the_table():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "epoch_estimates.py"), "--markdown"],
                         capture_output=True, text=True, check=True).stdout
    assert out.count("\n| ") >= 30 and "estimate / measured from" in out and "| A3, bench |" in out


def test_the_rows_left_out_are_named_with_why_and_the_pages_words_follow_them():
    """The published throughputs the check leaves out: those the table marks excluded and those in a precision
    no card has a rate for (TF32). The page's note is generated from them; the fit page's prose counts them."""
    from bertmem.book.time_check import left_out, left_out_words

    rows = left_out()
    excluded = [r for r in rows if r["excluded"]]
    tf32_more = [r for r in rows if r["no rate"] and not r["excluded"]]
    assert (len(rows), len(excluded), len(tf32_more)) == (6, 4, 2)
    assert {r["precision"] for r in rows if r["no rate"]} == {"tf32"}
    words = left_out_words(rows)
    assert words.startswith("4 published rows the throughput table marks excluded, 1 of them in TF32,")
    assert "2 more in TF32" in words
    # one row fewer changes the words: they are counted, not written
    assert left_out_words(rows[1:]).startswith("3 published rows") and left_out_words(tf32_more) == (
        "2 in TF32, which no card's rate covers") and left_out_words([]) == "none"
    page = " ".join((ROOT / "book" / "will_it_fit.md").read_text(encoding="utf-8").split())
    words = {2: "Two", 4: "Four", 6: "Six"}
    assert f"{words[len(rows)]} published rows are left out. {words[len(excluded)]} the throughput table marks" in page
    assert f"{words[len(tf32_more)]} more, NVIDIA's TensorFlow runs on A100s, are in TF32 too" in page
    assert {r["source"] for r in tf32_more} == {"NV-DLE-TF1-BERT", "NV-DLE-TF2-BERT"}


def test_a_measured_rate_says_what_it_rests_on_and_how_many_held_runs_test_it():
    """The T4's rates are published, not assumed: the note says what each rests on and how many of the held runs
    are T4 runs in its precision (none in fp16); the README, the introduction and the fit page say the same."""
    from bertmem.book.time_check import rate_note

    rows = time_check()
    t4 = CARDS["T4"]
    fp16, fp32 = rate_note(t4, "fp16", rows), rate_note(t4, "fp32", rows)
    assert "none of the" in fp16 and "is an fp16 run on a card timed as the Colab T4" in fp16
    assert "versions not given" in fp16
    assert "5 of the" in fp32 and "are fp32 runs on a card timed as the Colab T4" in fp32 and "optimizer.step" in fp32
    assert rate_note(CARDS["L4"], "fp16", rows) is None  # an assumed rate says nothing more
    # a T4 fp16 run among the held ones flips the words
    fake = dict(next(r for r in rows if r["card"] == "Colab T4"), precision="fp16")
    assert "1 of the 35 training times the book holds the estimate against is an fp16 run on a card timed as" in (
        rate_note(t4, "fp16", rows + [fake]))
    held = sum(r["card"] == "Colab T4" and r["precision"] == "fp16" for r in rows)
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    page = " ".join((ROOT / "book" / "will_it_fit.md").read_text(encoding="utf-8").split())
    intro = (ROOT / "book" / "intro.md").read_text(encoding="utf-8")
    assert held == 0
    assert "None of the runs the book holds its time estimate against is a T4 fp16 run" in readme
    assert "none of the book's time checks below is a T4 fp16 run" in page
    assert fp16[:1].upper() + fp16[1:] in intro and fp32[:1].upper() + fp32[1:] in intro


def test_the_spread_says_what_the_held_runs_cover_and_the_words_follow_the_rows():
    """Every held run is a full fine-tune of a BERT at most 512 tokens long, without gradient checkpointing: the
    page says so under the spread (`scope_words`, in the page data), and a run outside that changes the words."""
    from bertmem.book.time_check import scope_words, time_check_summary

    rows = time_check()
    words = scope_words(rows)
    assert words == "full fine-tunes of bert-base or bert-large at up to 512 tokens, without gradient checkpointing"
    assert time_check_summary(rows)["scope"] == words
    one = rows[0]
    assert "1 with gradient checkpointing" in scope_words(rows + [dict(one, checkpointing=True)])
    assert scope_words(rows + [dict(one, trains="LoRA adapters")]).startswith("fine-tunes (LoRA adapters or every")
    assert "bert-base, bert-large or roberta-base" in scope_words(rows + [dict(one, model="roberta-base")])
    assert "up to 1024 tokens" in scope_words(rows + [dict(one, longest=1024)])
    script = (ROOT / "book" / "_static" / "will_it_fit.js").read_text(encoding="utf-8")
    assert "checked.scope" in script
    page = " ".join((ROOT / "book" / "will_it_fit.md").read_text(encoding="utf-8").split())
    assert "All of them are full fine-tunes of bert-base or bert-large at up to 512 tokens" in page


def test_an_estimate_becomes_the_range_the_held_runs_allow():
    """Chapter 5's hours on a T4 are a range: the estimate divided by the check's highest, median and lowest
    estimate / measured (a run the estimate undercounted 7× takes 7× the estimate)."""
    summary = {"low": 0.25, "median": 1.0, "high": 2.0}
    assert measured_range(10.0, summary) == (5.0, 10.0, 40.0)
    low, typical, high = measured_range(10.0)  # the book's own check
    assert low < 10.0 < high and low <= typical <= high
    real = time_check_summary()
    assert (low, high) == pytest.approx((10.0 / real["high"], 10.0 / real["low"]))
