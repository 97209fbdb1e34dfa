"""The recipe fast on a GPU (chapter 5, A3): the fp32 baseline against chapter 5's recipe as A3 measured it and
with the changes meant to make it fast, each variant in a fresh process, all in one call on a lent card.

Variants (`VARIANTS`), each trained by `bertmem train`'s own path (`run_experiment`) on the same IMDb reviews:

  fp32 baseline            micro-batch 32, padded to --max-length, eager attention, fp32 (PyTorch's default
                           fp32 matmul precision: TF32 off)
  fp32 baseline, TF32      the same, `torch.set_float32_matmul_precision("high")`
  recipe                   micro-batch 8 × 4, the card's half precision, SDPA, length-grouped dynamic padding,
                           layer-wise learning rates, PyTorch's own choice of attention kernels (A3's recipe)
  recipe, kernel rule      the same under `bertmem train`'s rule (`--cudnn-attention auto`: cuDNN's attention
                           off where PyTorch would run it first)
  recipe + buckets         the rule, and each batch's length rounded up to a multiple of 64
  recipe + planned batch   buckets, and the largest micro-batch that fits --memory (default a T4's 15 GiB),
                           accumulated to the effective batch
  recipe + planned batch, compiled
                           the same with `--compile default` (torch.compile; its compilations counted)

Every row: whole-epoch training time and examples/s over it, MFU and useful MFU against a matmul peak measured
in that process, the CUDA allocator's peak, the shapes and lengths one epoch met, whether SDPA picks cuDNN's
attention for a padded batch, and the attention-kernel line the run printed. The models are built from the
configuration with random weights (a lent GPU has no Hub; shapes and cost are the pretrained model's).

--dry-run: a 2-layer model and a few examples on this machine's CPU, so every line runs in a test.

On a lent card (no Hub): carry the IMDb Parquet files and set BERTMEM_DATA_MIRROR to their folder, carry the
tokenizer's four files and pass their folder; the script checks both before any variant starts. One seed takes
about 5 minutes on an H100; rows are written as they finish, and the first failing row stops the run.

Usage: python benchmarks/recipe_on_gpu.py --tokenizer DIR --output FILE [--seeds 0] [--memory 15GiB]
       python benchmarks/recipe_on_gpu.py --tokenizer DIR --output FILE --dry-run
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import torch  # noqa: E402
from transformers import AutoConfig  # noqa: E402

from bertmem.core.devices import model_picks_cudnn, peak_memory_bytes, reset_peak_memory  # noqa: E402
from bertmem.core.units import MIB  # noqa: E402
from bertmem.data.loaders import DataConfig  # noqa: E402
from bertmem.experiments.fit import FitRequest  # noqa: E402
from bertmem.experiments.gpu_calibration import BASE, TINY, fresh_process_row, model_folder  # noqa: E402
from bertmem.experiments.run import environment_info, run_experiment  # noqa: E402
from bertmem.loop.config import RunConfig, TrainConfig  # noqa: E402
from bertmem.loop.precision import DTYPES  # noqa: E402

VARIANTS = ("fp32 baseline", "fp32 baseline, TF32", "recipe", "recipe, kernel rule", "recipe + buckets",
            "recipe + planned batch", "recipe + planned batch, compiled")
GPU_SIZES = {"train": 2048, "eval": 256, "max_length": 512, "effective_batch": 32, "device": "cuda"}
DRY_SIZES = {"train": 32, "eval": 16, "max_length": 64, "effective_batch": 8, "device": "cpu"}
BUCKET = 64
ONE_VARIANT_S = 180  # a variant that hangs is cut off, its row says so (about 60 s expected on an H100)


def variant_settings(variant: str, folder: Path, sizes: dict, seed: int, memory: str):
    """(run, data, recipe, fit, TF32 allowed) of one variant: each is the one before plus one change."""
    if variant not in VARIANTS:
        raise SystemExit(f"unknown variant {variant!r}: choose from {VARIANTS}")
    device, effective = sizes["device"], sizes["effective_batch"]
    run = RunConfig(model_id=str(folder), attention="eager", device=device, progress=False)
    data = DataConfig(dataset="imdb", train_size=sizes["train"], eval_size=sizes["eval"],
                      max_length=sizes["max_length"], micro_batch=effective, group_by_length=False,
                      pad_to_max_length=True)
    recipe = TrainConfig(epochs=1, learning_rate=2e-5, seed=seed, warmup_ratio=0.1)
    if variant.startswith("fp32 baseline"):
        return run, data, recipe, None, variant.endswith("TF32")
    run = dataclasses.replace(run, attention="sdpa", cudnn_attention="on" if variant == "recipe" else "auto")
    planned = variant.startswith("recipe + planned batch")
    bucketed = planned or variant == "recipe + buckets"
    run = dataclasses.replace(run, compile="default" if variant.endswith("compiled") else "off")
    data = dataclasses.replace(data, micro_batch=effective // 4, group_by_length=True, pad_to_max_length=False,
                               pad_to_multiple_of=BUCKET if bucketed else None)
    recipe = dataclasses.replace(recipe, precision="auto", accumulation_steps=4, layerwise_decay=0.95)
    fit = (FitRequest(memory=memory, effective_batch=effective, plan_micro_batch=True)
           if planned else None)
    return run, data, recipe, fit, False


def run_one(variant: str, seed: int, folder: Path, sizes: dict, memory: str) -> dict:
    """One variant, one seed, in this process: the row."""
    run, data, recipe, fit, tf32 = variant_settings(variant, folder, sizes, seed, memory)
    if tf32:
        torch.set_float32_matmul_precision("high")
    device = torch.device(sizes["device"])
    reset_peak_memory(device)
    summary = run_experiment(run, data, recipe, fit=fit)
    times = [e["train_time_s"] for e in summary["epochs"]]
    epoch_s = statistics.mean(times)
    lengths = {int(shape.split("×")[1]) for shape in summary["shapes"]}
    config = AutoConfig.from_pretrained(folder)
    peak = peak_memory_bytes(device)
    used = summary["utilisation"] or {}
    return {"variant": variant, "seed": seed, "micro-batch": (summary["plan"] or {}).get("micro_batch",
                                                                                       data.micro_batch),
            "precision": summary["precision"], "float32 matmul precision": torch.get_float32_matmul_precision(),
            "epoch time (s)": epoch_s, "examples/s (epoch)": summary["train_examples"] / epoch_s,
            "MFU": used.get("MFU"), "useful MFU": used.get("useful MFU"), "peak TFLOP/s": used.get("peak TFLOP/s"),
            "CUDA peak (MiB)": None if peak is None else peak / MIB, "shapes": len(summary["shapes"]),
            "lengths": len(lengths), "attention kernels": summary["attention_kernels"],
            "SDPA picks cuDNN": model_picks_cudnn(config, device, DTYPES[summary["precision"]]),
            "compilations": summary["compilations"],
            "accuracy": summary["final"]["accuracy"]}


def run_all(args, sizes: dict, folder: Path, out: Path) -> dict:
    """Every variant and seed, each in a fresh process; the file is rewritten after each row, and the first
    failing row stops the run (a missing file would fail every row in turn)."""
    result = {"environment": environment_info(), "sizes": sizes, "variants": list(VARIANTS), "rows": [],
              "dry run": args.dry_run}
    row_file = out.with_name(out.stem + ".row.json")
    for seed in args.seeds:
        for variant in VARIANTS:
            command = [sys.executable, __file__, "--one", variant, "--seed", str(seed), "--folder", str(folder),
                       "--result", str(row_file), "--memory", args.memory] + (["--dry-run"] if args.dry_run else [])
            row = fresh_process_row(command, row_file, ONE_VARIANT_S, {"variant": variant, "seed": seed})
            result["rows"].append(row)
            out.write_text(json.dumps(result, indent=1))
            print(json.dumps({k: v for k, v in row.items() if k != "error"}), flush=True)
            if "error" in row:
                print(f"{variant}: {row['error']}", file=sys.stderr)
                return result
    return result


def check_inputs(tokenizer: Path) -> None:
    """The data mirror and the tokenizer, before any variant starts (a lent card has no Hub)."""
    mirror = os.environ.get("BERTMEM_DATA_MIRROR")
    found = mirror and all((Path(mirror) / "imdb" / f"{split}.parquet").is_file() for split in ("train", "test"))
    missing = [] if found else ["BERTMEM_DATA_MIRROR/imdb/{train,test}.parquet"]
    if not any((tokenizer / name).is_file() for name in ("vocab.txt", "tokenizer.json")):
        missing.append(f"a tokenizer in {tokenizer}")
    if missing:
        raise SystemExit(f"missing: {', '.join(missing)}: carry them and set BERTMEM_DATA_MIRROR")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", help="folder with the uncased WordPiece tokenizer's files")
    parser.add_argument("--output", default="recipe-on-gpu.json", help="the JSON file of rows")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0], help="one seed is about 5 minutes on an H100")
    parser.add_argument("--memory", default="15GiB", help="the budget the planned micro-batch must fit (a T4's)")
    parser.add_argument("--dry-run", action="store_true", help="a 2-layer model on this machine's CPU")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # the child process: one variant
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    parser.add_argument("--result", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sizes = DRY_SIZES if args.dry_run else GPU_SIZES
    if args.one:
        row = run_one(args.one, args.seed, Path(args.folder), sizes, args.memory)
        Path(args.result).write_text(json.dumps(row))
        return 0
    if sizes["device"] == "cuda" and not torch.cuda.is_available():
        print("needs a CUDA GPU (--dry-run checks the script on the CPU)", file=sys.stderr)
        return 2
    if not args.tokenizer:
        parser.error("--tokenizer DIR is needed")
    if not args.dry_run:  # a dry run may read the Hub or a mirror, as the chapters do
        check_inputs(Path(args.tokenizer))
    with tempfile.TemporaryDirectory() as scratch:
        folder = model_folder(BASE, TINY if args.dry_run else None, Path(args.tokenizer), Path(scratch) / "model")
        run_all(args, sizes, folder, Path(args.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
