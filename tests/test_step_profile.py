"""The step profile (`bertmem.experiments.step_profile`, `benchmarks/step_profile.py`) and the GPU bench of the
recipe (`benchmarks/recipe_on_gpu.py`), run on the CPU (chapter 5, A3)."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from transformers import BertConfig, BertForSequenceClassification

from bertmem.experiments.step_profile import profile_steps
from bertmem.model.loading import packaged_minilm_path

ROOT = Path(__file__).resolve().parents[1]


def batches_of(lengths: list[int], rows: int = 2) -> list[dict]:
    return [{"input_ids": torch.randint(5, 100, (rows, n)), "attention_mask": torch.ones(rows, n, dtype=torch.long),
             "labels": torch.zeros(rows, dtype=torch.long)} for n in lengths]


def test_a_profile_counts_the_steps_shapes_and_kernels_it_ran():
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                                     num_attention_heads=2, intermediate_size=64))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    result = profile_steps(model, batches_of([8, 8, 16, 24, 16]), optimizer, warmup=2)
    assert (result.micro_steps, result.shapes) == (3, 2)  # 16, 24, 16 after the warm-up
    assert result.device_busy_s is None and result.kernels > 3 * 10  # dozens of aten operators per step
    assert 0 < result.forward_s + result.backward_s < result.wall_s
    lines = result.lines()
    assert "n/a on a CPU" in lines[1] and lines[2].startswith("kernels per micro-step: ")
    more = profile_steps(model, batches_of([8, 8, 8, 8, 8], rows=4), optimizer, warmup=2)
    assert more.shapes == 1
    with pytest.raises(ValueError, match="need more than 2 batches"):
        profile_steps(model, batches_of([8, 8]), optimizer)


@pytest.mark.slow
def test_the_step_profile_script_runs_on_the_cpu(tmp_path):
    path = tmp_path / "reviews.csv"
    pd.DataFrame({"text": [f"review {i} " + "fine " * (1 + i % 9) for i in range(80)],
                  "label": [i % 2 for i in range(80)]}).to_csv(path, index=False)
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "step_profile.py"), "--model", "tiny-bert",
                           "--dataset", str(path), "--micro-batch", "4", "--max-length", "32", "--steps", "3",
                           "--device", "cpu", "--pad-to-multiple-of", "16"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "3 micro-steps in" in done.stdout and "padding to multiples of 16" in done.stdout


@pytest.mark.slow
def test_the_recipe_bench_for_a_gpu_runs_every_variant_in_a_dry_run(tmp_path):
    out = tmp_path / "recipe.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "recipe_on_gpu.py"), "--dry-run",
                           "--tokenizer", str(packaged_minilm_path()), "--output", str(out), "--seeds", "0"],
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    rows = {r["variant"]: r for r in result["rows"]}
    assert list(rows) == result["variants"] and not [r["error"] for r in rows.values() if "error" in r]
    assert rows["fp32 baseline"]["float32 matmul precision"] == "highest"
    assert rows["fp32 baseline, TF32"]["float32 matmul precision"] == "high"  # each variant its own process
    assert rows["fp32 baseline"]["lengths"] == 1  # padded to the limit: one length
    assert rows["recipe + buckets"]["lengths"] <= rows["recipe"]["lengths"]
    assert all(0 < r["useful MFU"] <= r["MFU"] for r in rows.values())
    assert rows["recipe + planned batch"]["micro-batch"] >= rows["recipe"]["micro-batch"]
    assert not any(r["SDPA picks cuDNN"] for r in rows.values())  # a CPU
    compiled = rows["recipe + planned batch, compiled"]["compilations"]
    assert compiled["compiled"] >= 1 and rows["recipe + planned batch"]["compilations"] is None
