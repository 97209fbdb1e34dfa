"""The GPU measurement (`scripts/gpu_measure.py`), its calibration rows and the A3 page that reads the recorded run.

The real run needs a CUDA GPU; here its every line runs at tiny sizes on the CPU (--dry-run), the arithmetic that
turns NVML and allocator readings into a context and a margin is checked on made-up readings, and the recorded
run is checked against what the package computes from it now.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from bertmem.book import first_meeting, pace_than
from bertmem.book.gpu_measured import (
    backend_losses,
    beside_rows,
    bench_rows,
    calibration,
    planner_rows,
    recorded_gpu_run,
    shape_rows,
)
from bertmem.core.devices import card_used_bytes, peak_reserved_bytes, reserved_bytes
from bertmem.core.units import MIB
from bertmem.experiments.gpu_calibration import CALIBRATION_SHAPES, StepShape, add_estimates, measure_shape
from bertmem.memory.cards import CUDA_CONTEXT_BYTES
from bertmem.memory.estimate import estimate_step_memory
from bertmem.memory.planner import ALLOCATOR_MARGIN, PlanRequest
from bertmem.model.loading import packaged_minilm_path, tiny_bert_config

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_measure.py"
TINY = tiny_bert_config()


def test_the_cuda_only_readings_answer_none_on_a_cpu():
    cpu = torch.device("cpu")
    assert card_used_bytes(cpu) is None and reserved_bytes(cpu) is None and peak_reserved_bytes(cpu) is None


def test_a_cpu_step_is_measured_by_the_timeline_and_matches_the_cpu_estimate():
    shape = StepShape("tiny", 2, 16, "fp32", "sdpa")
    row = measure_shape(shape, "cpu", config=TINY)
    assert row["allocated peak"] is None and row["timeline peak"] > 0 and row["label"] == "tiny 2×16 fp32 sdpa"
    out = add_estimates([row], None, config_for=lambda _: TINY, kernels="cpu")[0]
    assert out["measured by"] == "timeline" and out["measured peak"] == row["timeline peak"]
    assert abs(out["estimate error"]) < 0.02  # the same count on real and on fake tensors
    assert "context" not in out  # no card, no context


def test_card_readings_become_a_context_and_a_margin():
    estimate = estimate_step_memory(TINY, 2, 16, device="cuda").step_peak
    row = {"model_id": "tiny", "batch": 2, "seq_len": 16, "precision": "fp32", "attention": "sdpa",
           "checkpointing": False, "allocated peak": estimate + 1000, "reserved peak": 2 * estimate,
           "reserved now": 2 * estimate, "card used now": 300 * MIB + 2 * estimate + 700 * MIB,
           "timeline peak": estimate}
    out = add_estimates([row], 300 * MIB, config_for=lambda _: TINY)[0]
    assert out["measured by"] == "allocator"
    assert out["estimate error"] == pytest.approx(estimate / (estimate + 1000) - 1)
    assert out["context"] == 700 * MIB  # used now − idle − reserved now
    assert out["process at peak"] == 700 * MIB + 2 * estimate
    assert out["margin needed"] == pytest.approx(1.0)  # the allocator held twice the estimate
    assert out["planner needs"] == PlanRequest().needed_bytes(estimate)
    assert out["planner error"] == pytest.approx(out["planner needs"] / out["process at peak"] - 1)


def test_the_calibration_shapes_cover_the_axes_the_planner_takes():
    assert len(CALIBRATION_SHAPES) >= 8
    for axis in ("batch", "seq_len", "precision", "attention", "checkpointing", "model_id"):
        assert len({getattr(s, axis) for s in CALIBRATION_SHAPES}) >= 2, axis


@pytest.mark.slow
def test_the_dry_run_runs_every_part_and_the_estimates_follow(tmp_path):
    out = tmp_path / "measured.json"
    tokenizer = packaged_minilm_path()  # bert-base-uncased's vocabulary; its weights are not copied
    done = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--tokenizer", str(tokenizer),
                           "--output", str(out)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert len(result["planner"]) == len(CALIBRATION_SHAPES) and not any("error" in r for r in result["planner"])
    assert [r["variant"] for r in result["bench"]["rows"]] == ["fp32 baseline", "full recipe"]
    losses = result["backends"]["losses"]
    assert set(losses) == {"plain PyTorch", "Accelerate", "HF Trainer"} and len(losses["Accelerate"]) >= 2
    assert result["backends"]["largest difference"] < 1e-4
    done = subprocess.run([sys.executable, str(SCRIPT), "--add-estimates", str(out)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())["planner"]
    assert all(r["estimated peak"] > 0 and r["measured by"] == "timeline" for r in rows)
    assert out.with_suffix(".md").read_text().count("| bert-") == len(CALIBRATION_SHAPES)


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the refusal is not shown")
def test_the_measurement_refuses_to_run_without_a_gpu(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--tokenizer", str(tmp_path), "--output",
                           str(tmp_path / "m.json")], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "needs a CUDA GPU" in done.stderr and not (tmp_path / "m.json").exists()


# --- the recorded run and the page's views of it ---

RUN = recorded_gpu_run()


def test_the_recorded_run_is_a_real_gpu_with_every_part():
    assert "H200" in RUN["environment"]["gpu"] and not RUN["dry run"]
    assert len(RUN["planner"]) == len(CALIBRATION_SHAPES)
    for part in ("bench", "bench, cuDNN attention off", "backends", "sdpa shapes"):
        assert "error" not in RUN[part], part


def test_two_recorded_estimates_are_what_the_planner_says_now():
    """The stored estimate beside a measured row is the planner's: recomputing it gives the same bytes."""
    for row in RUN["planner"][:2]:
        now = estimate_step_memory(row["model_id"], row["batch"], row["seq_len"], precision=row["precision"],
                                   attention=row["attention"], gradient_checkpointing=row["checkpointing"])
        assert now.step_peak == row["estimated peak"], row["label"]


def test_the_page_summary_is_computed_from_the_rows():
    check = calibration(RUN)
    errors = [r["allocated peak"] for r in RUN["planner"]]
    assert check["rows"] == len(errors) == len(planner_rows(RUN))
    assert check["estimate error low"] <= check["estimate error high"]
    assert check["assumed context MiB"] == CUDA_CONTEXT_BYTES / MIB and check["assumed margin"] == ALLOCATOR_MARGIN
    assert check["margin covered"] == sum(r["margin needed"] <= ALLOCATOR_MARGIN for r in RUN["planner"])
    for row in RUN["planner"]:  # the arithmetic of add_estimates, on the recorded readings
        assert row["process at peak"] == row["context"] + row["reserved peak"]


def test_the_page_tables_have_a_row_for_each_measurement():
    assert len(bench_rows(RUN)) == 4 and {r["attention kernels"] for r in bench_rows(RUN)} == {
        "default", "cuDNN attention off"}
    beside = beside_rows(RUN)
    assert [r["where"].split(",")[0] for r in beside][-1].startswith("the article's table")
    assert all(0 < r["memory ratio"] < 1 for r in beside)
    assert len(shape_rows(RUN)) == 3
    assert len(backend_losses(RUN)) == len(RUN["backends"]["losses"]["plain PyTorch"])


def test_the_pace_and_the_first_meeting_sentences_follow_their_numbers():
    assert (pace_than(0.6), pace_than(1.0), pace_than(2.3)) == ("faster than", "about as fast as", "slower than")
    assert "cuDNN's attention is what pays it" in first_meeting(175, 34, 32, 27)
    assert "not cuDNN's alone" in first_meeting(175, 34, 90, 27)
    assert "no more than a later one" in first_meeting(35, 34, 32, 27)
