"""Chapter 5's bench compares variants paired by seed and test example, and its committed table can decide."""

import pytest

from bertmem.book.bench_info import recorded_bench
from bertmem.experiments.bench import add_ratios, combine_rounds


def bench_row(variant, seed, correct, step=1.0):
    """One variant's row of one round, as `run_variant` writes it."""
    return {"variant": variant, "seed": seed, "step_times_s": [step] * 4, "effective batch": 8,
            "median step (s)": step, "time per epoch (s)": 4 * step, "activations (MiB)": 10.0,
            "accuracy": sum(correct) / len(correct), "macro-F1": 0.7, "test examples": len(correct),
            "correct": correct}


def test_the_bench_verdict_is_paired_when_every_round_kept_its_scores():
    base = [[1] * 700 + [0] * 300, [1] * 690 + [0] * 310]
    better = [[1] * 730 + [0] * 270, [1] * 720 + [0] * 280]  # right wherever the baseline is, and on 30 more
    rounds = [[bench_row("fp32 baseline", s, base[s]), bench_row("full recipe", s, better[s])] for s in (0, 1)]
    rows = add_ratios(combine_rounds(rounds))
    recipe = rows[1]
    assert "paired: 2 seeds × 1000 test examples" in recipe["accuracy Δ vs noise"]
    assert recipe["within noise"] is False and recipe["accuracy Δ (points)"] == pytest.approx(3.0)
    rows[0].pop("correct per seed")  # an older bench.json without scores: the unpaired verdict, which says noise
    assert "paired" not in add_ratios(rows)[1]["accuracy Δ vs noise"]


def test_the_committed_cpu_bench_has_three_seeds_no_one_class_row_and_a_deciding_interval():
    recorded = recorded_bench("bench-cpu")
    assert list(recorded["settings"]["seeds"]) == [0, 1, 2]
    ran = [row for row in recorded["rows"] if "note" not in row]
    assert len(ran) == len(recorded["settings"]["variants"])
    for row in ran:  # a one-class predictor scores macro-F1 ≤ 0.5 on two classes, whatever its accuracy
        assert row["macro-F1"] > 0.6, f"{row['variant']}: macro-F1 {row['macro-F1']:.3f}, a collapsed run"
        assert all(acc > 0.6 for acc in row["accuracies"]), f"{row['variant']}: a seed near chance"
    recipe = next(row for row in ran if row["variant"] == "full recipe")
    assert "paired: 3 seeds" in recipe["accuracy Δ vs noise"]
    margin = recipe["accuracy Δ margin (points)"]
    assert margin <= 3.0, f"recipe − baseline interval ±{margin:.1f} points: cannot decide"


def test_chapter_5s_live_bench_decides_within_six_points():
    import json
    import re
    from pathlib import Path

    notebook = Path(__file__).resolve().parents[1] / "book" / "05_optimized_loop.ipynb"
    outputs = "".join("".join(output.get("data", {}).get("text/markdown", "")) + "".join(output.get("text", ""))
                      for cell in json.loads(notebook.read_text(encoding="utf-8"))["cells"]
                      for output in cell.get("outputs", []))
    found = re.search(r"\| full recipe \|[^\n]*?interval ([-+]?[\d.]+) to ([-+]?[\d.]+)\)", outputs)
    assert found, "chapter 5's committed outputs hold no full-recipe interval"
    low, high = float(found.group(1)), float(found.group(2))
    assert (high - low) / 2 <= 6.0, f"chapter 5's full recipe − baseline interval {low} to {high}: wider than ±6"


def test_mixed_precision_rows_never_run_fp32_without_a_word(monkeypatch):
    """On a CPU without native bf16, 'auto' runs the mixed-precision rows in fp32: the bench says so, by name."""
    from bertmem.experiments.bench import BenchConfig, auto_precision_note

    bench = BenchConfig(device="cpu")
    monkeypatch.setenv("BERTMEM_CPU_BF16", "0")
    note = auto_precision_note(bench)
    assert note.startswith("the rows that ask for mixed precision (mixed precision + accumulation, full recipe")
    assert "run fp32 here" in note and "BERTMEM_CPU_BF16=1" in note
    assert auto_precision_note(BenchConfig(device="cpu", variants=("fp32 baseline", "accumulation ×4"))) is None
    monkeypatch.setenv("BERTMEM_CPU_BF16", "1")
    assert auto_precision_note(bench) is None
