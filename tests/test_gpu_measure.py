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

from bertmem.book.gpu_measured import (
    backend_losses,
    beside_rows,
    bench_rows,
    calibration,
    planner_rows,
    recorded_gpu_run,
    run_provenance,
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


def test_the_provenance_names_the_card_the_versions_and_the_estimates_beside_it():
    lines = run_provenance(RUN).splitlines()
    env = RUN["environment"]
    assert len(lines) == 4 and lines[0].startswith(f"recorded run: {env['gpu']} (")
    assert f"torch {env['torch']}" in lines[0] and f"on {env['date']}" in lines[0]
    assert lines[1] == (f"estimates beside it: torch {RUN['estimates made with']['torch']}, transformers "
                        f"{RUN['estimates made with']['transformers']}")
    assert lines[3] == f"weights: {RUN['weights']}"


def test_the_recorded_run_is_a_real_gpu_with_every_part():
    assert "H200" in RUN["environment"]["gpu"] and not RUN["dry run"]
    assert len(RUN["planner"]) == len(CALIBRATION_SHAPES)
    for part in ("bench", "bench, cuDNN attention off", "backends", "sdpa shapes"):
        assert "error" not in RUN[part], part


@pytest.mark.slow
def test_every_recorded_estimate_is_what_the_planner_says_now():
    """The stored estimate beside each measured row is the planner's: recomputing it gives the same bytes."""
    for row in RUN["planner"]:
        now = estimate_step_memory(row["model_id"], row["batch"], row["seq_len"], precision=row["precision"],
                                   attention=row["attention"], gradient_checkpointing=row["checkpointing"])
        assert now.step_peak == row["estimated peak"], row["label"]


def test_every_derived_figure_follows_from_the_recorded_readings():
    idle = RUN["environment"]["card idle used"]
    request = PlanRequest()
    for row in RUN["planner"]:
        context = row["card used now"] - idle - row["reserved now"]
        assert row["context"] == context and row["process at peak"] == context + row["reserved peak"]
        assert row["planner needs"] == request.needed_bytes(row["estimated peak"])
        assert row["planner error"] == pytest.approx(row["planner needs"] / row["process at peak"] - 1)
        assert row["margin needed"] == pytest.approx(row["reserved peak"] / row["estimated peak"] - 1)
        assert row["allocator slack"] == pytest.approx(row["reserved peak"] / row["allocated peak"] - 1)
        assert row["estimate error"] == pytest.approx(row["estimated peak"] / row["allocated peak"] - 1)


def test_the_flags_the_page_recommends_cover_every_recorded_row():
    check = calibration(RUN)
    request = PlanRequest(cuda_context_bytes=check["covering context MiB"] * MIB,
                          allocator_margin=check["covering margin"])
    short = [r["label"] for r in RUN["planner"] if request.needed_bytes(r["estimated peak"]) < r["process at peak"]]
    assert not short, short
    defaults = PlanRequest()  # and the package's defaults leave the rows the page counts short
    assert check["planner short"] == sum(defaults.needed_bytes(r["estimated peak"]) < r["process at peak"]
                                         for r in RUN["planner"])
    assert check["margin covered"] == sum(r["margin needed"] <= ALLOCATOR_MARGIN for r in RUN["planner"])
    own = [PlanRequest(cuda_context_bytes=r["context"]).needed_bytes(r["estimated peak"]) < r["process at peak"]
           for r in RUN["planner"]]  # the planner's rounding of needed_bytes, each row with its own context
    assert abs(check["short with measured context"] - sum(own)) <= 1
    assert check["assumed context MiB"] == CUDA_CONTEXT_BYTES / MIB


def test_the_page_tables_have_a_row_for_each_measurement():
    assert len(planner_rows(RUN)) == len(RUN["planner"])
    assert {(r["attention kernels"], r["variant"]) for r in bench_rows(RUN)} == {
        (k, v) for k in ("default", "cuDNN attention off") for v in ("fp32 baseline", "full recipe")}
    beside = beside_rows(RUN)
    assert "(A2_post_audit.md)" in beside[-1]["where"]  # the blog post, linked to the page that describes it
    assert all(0 < r["memory ratio"] < 1 for r in beside)
    assert [r["setting"] for r in shape_rows(RUN)] == list(RUN["sdpa shapes"]["rows"])
    assert [r["optimizer step"] for r in backend_losses(RUN)] == list(
        range(1, len(RUN["backends"]["losses"]["plain PyTorch"]) + 1))


@pytest.mark.slow
def test_a_model_folder_for_the_chapters_and_a_second_run_attached(tmp_path):
    """--save-model writes what from_pretrained reads (random weights, the tokenizer's files, not MiniLM's
    weights); --attach puts one part of another run into a file under a new key."""
    folder = tmp_path / "bert"
    done = subprocess.run([sys.executable, str(SCRIPT), "--tokenizer", str(packaged_minilm_path()), "--save-model",
                           str(folder)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    config = json.loads((folder / "config.json").read_text())
    assert config["num_hidden_layers"] == 12 and config["hidden_size"] == 768  # bert-base, not MiniLM
    assert (folder / "vocab.txt").is_file() and (folder / "model.safetensors").stat().st_size > 400 * 2**20
    main, other = tmp_path / "main.json", tmp_path / "other.json"
    main.write_text(json.dumps({"bench": {"rows": [1]}}))
    other.write_text(json.dumps({"bench": {"rows": [2]}, "planner": []}))
    done = subprocess.run([sys.executable, str(SCRIPT), "--attach", str(main), "second", f"{other}#bench"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and json.loads(main.read_text()) == {"bench": {"rows": [1]}, "second": {"rows": [2]}}


@pytest.mark.slow
def test_the_planner_per_family_runs_every_family_in_its_own_process_in_a_dry_run(tmp_path):
    out = tmp_path / "families.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "planner_families.py"), "--dry-run",
                           "--output", str(out)], capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["model_id"].split("/")[-1] for r in rows] == [
        "bert-base-uncased", "roberta-base", "deberta-v3-base", "electra-base-discriminator", "xlm-roberta-base",
        "ModernBERT-base"]
    assert all(r["estimated peak"] > 0 and r["measured by"] == "timeline" for r in rows)
    assert next(r for r in rows if "deberta" in r["model_id"])["attention"] == "eager"
