"""The time per epoch estimate held against the training times the book holds (bertmem.book.time_check, the
"Will it fit?" page, benchmarks/epoch_estimates.py)."""

import math
import subprocess
import sys
from pathlib import Path

from bertmem.book.time_check import measured_epochs, published_epochs, time_check
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
