"""Measure on a CUDA GPU what the book otherwise estimates or measures on a CPU (`make gpu-measure`).

One run, three parts, each written to the JSON file as soon as it is done (a run cut short keeps what it has):

1. planner: one steady-state training step per shape of `CALIBRATION_SHAPES` (batch × length × precision ×
   attention × checkpointing): the allocator's peaks and the card's used memory (NVML);
2. bench: chapter 5's fp32 baseline against the full recipe on IMDb (same examples, same effective batch, two
   seeds): CUDA peak, examples/s and MFU against the matmul peak measured for the precision used;
3. backends: chapter 5's plain loop, Accelerate and the Trainer on the same batches, device and precision.

The models are built from their configurations with seeded random weights (same shapes and cost: a lent machine
has no Hub); the tokenizer is the uncased WordPiece vocabulary bert-base-uncased and MiniLM share, passed as a
folder. `--add-estimates FILE` (any machine, no GPU) then puts the planner's estimates beside the measured rows
and writes the markdown summary beside the JSON.

--dry-run: a 2-layer model and a few examples on this machine's CPU, so every line runs in a test.

Usage: python scripts/gpu_measure.py --tokenizer DIR [--output FILE] [--dry-run]
       python scripts/gpu_measure.py --add-estimates FILE
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from bertmem.core.runtime import quiet_bitsandbytes_notice  # noqa: E402

quiet_bitsandbytes_notice()  # before transformers and peft import bitsandbytes where it is installed

import peft  # noqa: E402
import torch  # noqa: E402  (importing torch creates no CUDA context: NVML still reads the idle card)
import transformers  # noqa: E402
from torch.utils.data import DataLoader  # noqa: E402

from bertmem.core.units import GIB  # noqa: E402
from bertmem.core.devices import card_properties, card_used_bytes, cuda_available, set_cudnn_attention  # noqa: E402
from bertmem.data.loaders import DataConfig, load_frames  # noqa: E402
from bertmem.experiments.bench import BenchConfig, run_bench, write_json_atomic  # noqa: E402
from bertmem.experiments.run import environment_info  # noqa: E402
from bertmem.experiments.gpu_calibration import (  # noqa: E402
    BASE, CALIBRATION_SHAPES, TINY, add_estimates, config_for, measure_shape, model_folder, random_classifier)
from bertmem.loop import RunConfig, TrainConfig, train, train_with_accelerate, train_with_trainer  # noqa: E402
from bertmem.loop.precision import choose_precision  # noqa: E402
from bertmem.model.loading import load_tokenizer  # noqa: E402

PARTS = ("planner", "bench", "backends")
GPU_SIZES = {"bench_train": 1024, "bench_eval": 512, "bench_length": 512, "effective_batch": 32,
             "backend_examples": 128, "backend_length": 128, "backend_micro_batch": 8}
DRY_SIZES = {"bench_train": 16, "bench_eval": 8, "bench_length": 64, "effective_batch": 8,
             "backend_examples": 16, "backend_length": 32, "backend_micro_batch": 4}


def environment(device: str, idle_used: int | None) -> dict:
    """The versions every result records (`environment_info`), peft's, the card, its driver and the memory it
    used before this process touched CUDA."""
    return {**environment_info(), "peft": peft.__version__, "date": time.strftime("%Y-%m-%d"),
            "card idle used": idle_used, "float32 matmul precision": torch.get_float32_matmul_precision(),
            **card_properties(torch.device(device))}


def planner_part(device: str, overrides: dict | None) -> list[dict]:
    """Part 1: every calibration shape measured (a shape that fails is a row with its error)."""
    rows = []
    for shape in CALIBRATION_SHAPES:
        start = time.perf_counter()
        try:
            row = measure_shape(shape, device, config=config_for(shape.model_id, overrides))
        except Exception as err:  # an out-of-memory row is a result too
            row = {"label": shape.label(), "error": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"}
        row["seconds"] = round(time.perf_counter() - start, 1)
        print(f"planner {row['label']}: {row.get('allocated peak') or row.get('error')} ({row['seconds']} s)",
              flush=True)
        rows.append(row)
    return rows


def bench_part(folder: Path, device: str, sizes: dict) -> dict:
    """Part 2: chapter 5's fp32 baseline and full recipe, two seeds, interleaved."""
    bench = BenchConfig(model_id=str(folder), dataset="imdb", train_size=sizes["bench_train"],
                        eval_size=sizes["bench_eval"], max_length=sizes["bench_length"],
                        effective_batch=sizes["effective_batch"], accumulation_steps=4, learning_rate=2e-5,
                        epochs=1, seeds=(0, 1), device=device, variants=("fp32 baseline", "full recipe"),
                        progress=False)
    result = run_bench(bench)
    result["settings"]["model_id"] = "bert-base-uncased (random weights)"
    return result


def backends_part(folder: Path, device: str, sizes: dict, overrides: dict | None) -> dict:
    """Part 3: the same recipe through the three loops of chapter 5, same batches and precision: the losses."""
    frames = load_frames(DataConfig(dataset="imdb", train_size=sizes["backend_examples"], eval_size=8))
    tokenizer = load_tokenizer(str(folder))
    encoded = tokenizer(list(frames[0]["text"]), padding="max_length", truncation=True,
                        max_length=sizes["backend_length"], return_tensors="pt")
    labels = torch.tensor(frames[0]["label"].to_numpy())
    examples = [{**{k: v[i] for k, v in encoded.items()}, "labels": labels[i]} for i in range(len(labels))]
    precision = choose_precision("auto", device, verbose=False).precision
    recipe = TrainConfig(epochs=1, learning_rate=1e-4, accumulation_steps=2, layerwise_decay=0.9,
                         precision=precision, warmup_ratio=0.1)
    config = config_for(BASE, {**(overrides or {}), "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0})
    quiet = RunConfig(progress=False, device=device)
    losses = {}
    for name, loop in (("plain PyTorch", train), ("Accelerate", train_with_accelerate),
                       ("HF Trainer", train_with_trainer)):
        model = random_classifier(BASE, "sdpa", config=config).to(device)  # the same weights for each
        loader = DataLoader(examples, batch_size=sizes["backend_micro_batch"])  # the same order for each
        with tempfile.TemporaryDirectory() as scratch:
            os.chdir(scratch)  # the Trainer writes its run folder into the working directory
            try:
                losses[name] = [float(x) for x in loop(model, loader, recipe, run=quiet).losses]
            finally:
                os.chdir(ROOT)
        del model
    steps = {name: len(values) for name, values in losses.items()}
    if len(set(steps.values())) != 1:
        raise RuntimeError(f"the loops took different numbers of optimizer steps: {steps}")
    gap = max(abs(a - b) for name in losses for a, b in zip(losses[name], losses["plain PyTorch"]))
    return {"precision": precision, "losses": losses, "largest difference": gap,
            "settings": {"examples": len(examples), "max_length": sizes["backend_length"],
                         "micro_batch": sizes["backend_micro_batch"], "accumulation_steps": 2,
                         "learning_rate": 1e-4, "layerwise_decay": 0.9, "dropout": 0.0}}


def measure(args) -> int:
    """The three parts on the GPU (or the CPU in a dry run), into one JSON file."""
    idle_used = None if args.dry_run else card_used_bytes(torch.device("cuda", 0))  # before a CUDA context
    if not args.dry_run and not cuda_available():
        print("gpu-measure needs a CUDA GPU (torch.cuda.is_available() is False): nothing was run "
              "(--dry-run runs it at tiny sizes on the CPU)", file=sys.stderr)
        return 2
    device, sizes = ("cpu", DRY_SIZES) if args.dry_run else ("cuda", GPU_SIZES)
    overrides = TINY if args.dry_run else None
    if args.cudnn_attention == "off":
        set_cudnn_attention(False)
    output = Path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    result = {"environment": environment(device, idle_used), "dry run": args.dry_run,
              "cudnn attention": args.cudnn_attention, "config overrides": overrides,
              "weights": "random (built from the configuration): the same shapes and cost as the pretrained model",
              "seconds": {}}
    write_json_atomic(output, result)
    with tempfile.TemporaryDirectory() as scratch:
        folder = model_folder("bert-base-uncased", overrides, Path(args.tokenizer), Path(scratch) / "model")
        for part, run in (("planner", lambda: planner_part(device, overrides)),
                          ("bench", lambda: bench_part(folder, device, sizes)),
                          ("backends", lambda: backends_part(folder, device, sizes, overrides))):
            if part not in args.parts:
                continue
            start = time.perf_counter()
            try:
                result[part] = run()
            except Exception as err:  # the parts before it stay in the file
                result[part] = {"error": f"{type(err).__name__}: {str(err)[:500]}"}
                print(f"{part} failed: {result[part]['error']}", file=sys.stderr, flush=True)
            result["seconds"][part] = round(time.perf_counter() - start, 1)
            print(f"{part}: {result['seconds'][part]} s", flush=True)
            write_json_atomic(output, result)
    failed = [p for p in args.parts if "error" in result[p]
              or p == "planner" and any("error" in row for row in result[p])]  # a shape that failed fails the run
    return 1 if failed else 0


def add_estimates_to(path: Path) -> None:
    """The planner's estimates beside the measured rows, and the markdown summary beside the JSON."""
    result = json.loads(path.read_text())
    overrides = result.get("config overrides")
    idle = result["environment"].get("card idle used")
    with_estimates = iter(add_estimates([r for r in result["planner"] if "error" not in r], idle,
                                        config_for=lambda model_id: config_for(model_id, overrides)))
    # a shape that failed (out of memory, say) stays in the file as its error, in its place
    result["planner"] = [row if "error" in row else next(with_estimates) for row in result["planner"]]
    result["estimates made with"] = {"torch": torch.__version__, "transformers": transformers.__version__}
    write_json_atomic(path, result)
    path.with_suffix(".md").write_text(summary(result))
    print(summary(result))


def summary(result: dict) -> str:
    """The markdown table of the planner rows (what the closing note and a reviewer read)."""
    env = result["environment"]
    lines = [f"# Measured on {env.get('gpu', 'cpu')} ({env['date']}, torch {env['torch']})\n",
             "| shape | allocated peak (GiB) | estimate (GiB) | error | reserved peak (GiB) | process at peak (GiB) "
             "| planner needs (GiB) | planner error |", "|---|---|---|---|---|---|---|---|"]
    def cell(value, form: str = ".2f", unit: int = GIB) -> str:  # a CPU dry run has no allocator figures
        return "" if value is None else format(value / unit, form)

    for r in result["planner"]:
        if "error" in r:
            lines.append(f"| {r['label']} | {r['error']} |||||||")
            continue
        lines.append(f"| {r['label']} | {cell(r['allocated peak'])} | {cell(r['estimated peak'])} "
                     f"| {cell(r['estimate error'], '+.1%', 1)} | {cell(r['reserved peak'])} "
                     f"| {cell(r.get('process at peak'))} | {cell(r['planner needs'])} "
                     f"| {cell(r.get('planner error'), '+.1%', 1)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", help="folder with the uncased WordPiece tokenizer's files (MiniLM's model "
                        "folder will do: bert-base-uncased's vocabulary)")
    parser.add_argument("--output", default=str(ROOT / "results" / "gpu" / "measured.json"))
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes on the CPU (tests the script)")
    parser.add_argument("--parts", nargs="+", default=list(PARTS), choices=PARTS, help="what to measure")
    parser.add_argument("--cudnn-attention", choices=("default", "off"), default="default",
                        help="off: PyTorch's cuDNN attention kernel switched off for the whole run")
    parser.add_argument("--add-estimates", metavar="FILE", help="add the planner's estimates to a measured file")
    parser.add_argument("--attach", nargs=3, metavar=("FILE", "KEY", "OTHER"),
                        help="put the JSON file OTHER (a benchmark; OTHER#part: one part of a second run) "
                        "into FILE under KEY")
    parser.add_argument("--save-model", metavar="DIR", help="only write the random-weight bert-base-uncased folder "
                        "(with --tokenizer's files) to DIR: for running the chapters where the Hub is out of reach")
    args = parser.parse_args(argv)
    if args.save_model:
        if not args.tokenizer:
            parser.error("--save-model needs --tokenizer DIR")
        model_folder("bert-base-uncased", None, Path(args.tokenizer), Path(args.save_model))
        return 0
    if args.attach:
        path, key, other = args.attach
        other, _, part = other.partition("#")  # OTHER#part: one part of another run's file
        result = json.loads(Path(path).read_text())
        attached = json.loads(Path(other).read_text())
        result[key] = attached[part] if part else attached
        write_json_atomic(Path(path), result)
        return 0
    if args.add_estimates:
        add_estimates_to(Path(args.add_estimates))
        return 0
    if not args.tokenizer:
        parser.error("--tokenizer DIR is needed to measure")
    return measure(args)


if __name__ == "__main__":
    sys.exit(main())
