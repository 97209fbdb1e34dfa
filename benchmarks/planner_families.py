"""The planner per model family on a GPU (A3, "Will it fit?"): one training step of each family's base model,
each in a fresh process, measured by the CUDA allocator and NVML, with the planner's estimate beside it.

A3 measured two BERT checkpoints in one process, where the CUDA context grew as kernels loaded (751 → 773 MiB);
here every shape starts from an idle card, so its context is its own. Shapes (`FAMILY_SHAPES`): bert-base,
roberta-base, deberta-v3-base (eager: its relative attention has no SDPA path), electra-base, xlm-roberta-base and
ModernBERT-base, each 8 × 512 tokens in fp16; `--more` adds 128 tokens and bf16. Weights are random, built from
the vendored configurations (a lent GPU has no Hub; shapes and memory are the pretrained models').

Every row: allocated and reserved peaks, the process's use of the card (NVML, idle card subtracted), its CUDA
context, the planner's estimate and need, and whether the planner would have said "fits" where the process used
more (`planner short`).

--dry-run: 2-layer versions of every family on this machine's CPU (the timeline stands in for the allocator).

Usage: python benchmarks/planner_families.py [--output planner-families.json] [--more] [--dry-run]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch  # noqa: E402

from bertmem.core.devices import card_used_bytes, cuda_available  # noqa: E402
from bertmem.experiments.gpu_calibration import (  # noqa: E402
    TINY,
    StepShape,
    add_estimates,
    config_for,
    fresh_process_row,
    measure_shape,
)
from bertmem.experiments.run import environment_info  # noqa: E402

FAMILIES = (("google-bert/bert-base-uncased", "sdpa"), ("FacebookAI/roberta-base", "sdpa"),
            ("microsoft/deberta-v3-base", "eager"), ("google/electra-base-discriminator", "sdpa"),
            ("FacebookAI/xlm-roberta-base", "sdpa"), ("answerdotai/ModernBERT-base", "sdpa"))
FAMILY_SHAPES = tuple(StepShape(model, 8, 512, "fp16", attention) for model, attention in FAMILIES)
MORE_SHAPES = (tuple(StepShape(model, 8, 128, "fp16", attention) for model, attention in FAMILIES)
               + tuple(StepShape(model, 8, 512, "bf16", attention) for model, attention in FAMILIES))
ONE_SHAPE_S = 120  # about 30 s expected per shape on an H100, start-up included


def measure_one(shape: StepShape, dry_run: bool) -> dict:
    """One shape in this process, from an idle card: the row, with the card's use before CUDA started."""
    device = "cpu" if dry_run else "cuda"
    idle = None if dry_run else card_used_bytes(torch.device("cuda", 0))  # before this process's context
    row = measure_shape(shape, device, config=config_for(shape.model_id, TINY if dry_run else None))
    return {**row, "idle used": idle}


def with_estimate(row: dict, dry_run: bool) -> dict:
    """The planner beside one measured row, against that row's own idle card."""
    overrides = TINY if dry_run else None
    out = add_estimates([row], row["idle used"], config_for=lambda model_id: config_for(model_id, overrides),
                        kernels="cpu" if dry_run else "cuda")[0]
    if "process at peak" in out:
        out["planner short"] = out["planner needs"] < out["process at peak"]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", default="planner-families.json")
    parser.add_argument("--more", action="store_true", help="add 128 tokens and bf16 for every family")
    parser.add_argument("--dry-run", action="store_true", help="2-layer versions on this machine's CPU")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # the child process: one shape, by index
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    shapes = FAMILY_SHAPES + (MORE_SHAPES if args.more else ())
    if args.one is not None:
        Path(args.result).write_text(json.dumps(measure_one(shapes[args.one], args.dry_run)))
        return 0
    if not args.dry_run and not cuda_available():
        print("needs a CUDA GPU (--dry-run checks the script on the CPU)", file=sys.stderr)
        return 2
    out = Path(args.output)
    result = {"environment": environment_info(), "dry run": args.dry_run, "rows": [],
              "weights": "random (built from the configuration): the same shapes as the pretrained model"}
    row_file = out.with_name(out.stem + ".row.json")
    for index, shape in enumerate(shapes):
        command = [sys.executable, __file__, "--one", str(index), "--result", str(row_file)]
        command += (["--dry-run"] if args.dry_run else []) + (["--more"] if args.more else [])
        row = fresh_process_row(command, row_file, ONE_SHAPE_S, {**asdict(shape), "label": shape.label()})
        if "error" not in row:  # the planner beside it, in this process (FakeTensor: no GPU needed)
            row = with_estimate(row, args.dry_run)
        result["rows"].append(row)
        out.write_text(json.dumps(result, indent=1))
        print(f"{row['label']}: {row.get('error') or row.get('estimate error')}", flush=True)
    return 1 if any("error" in row for row in result["rows"]) else 0


if __name__ == "__main__":
    sys.exit(main())
