"""`bertmem train`, `bench` and `plan` (also `python -m bertmem`): argument parsing only (chapters 5 and A1)."""

from __future__ import annotations

import argparse
import json
import sys

from .planner import ALLOCATOR_MARGIN, CUDA_CONTEXT_BYTES, OPTIMIZERS
from .precision import PRECISIONS, REQUESTS
from .profile import get_profile


def _size(raw: str) -> int | None:
    """A subset size; 'all' means the whole split."""
    if raw.lower() in ("all", "none"):
        return None
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of examples or 'all', got {raw!r}") from None
    if value < 2:
        raise argparse.ArgumentTypeError(f"a subset needs at least 2 examples, got {value}")
    return value


def _recipe_arguments(parser: argparse.ArgumentParser) -> None:
    """Switches shared by `train` and `bench`: data sizes, batch, learning rate, seed, device."""
    profile = get_profile()
    parser.add_argument("--model", default=profile.model_id, help="Hub id, local folder, or 'tiny-bert'")
    parser.add_argument("--dataset", default=profile.dataset, help="imdb, rotten_tomatoes, sst2, a Hub id or a file")
    parser.add_argument("--train-size", type=_size, default=profile.train_size, help="training examples or 'all'")
    parser.add_argument("--eval-size", type=_size, default=profile.eval_size, help="evaluation examples or 'all'")
    parser.add_argument("--max-length", type=int, default=profile.max_length, help="tokens per example")
    parser.add_argument("--lr", type=float, default=profile.learning_rate, help="peak learning rate")
    parser.add_argument("--epochs", type=int, default=profile.epochs)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default=profile.device, help="cpu or cuda")
    parser.add_argument("--no-progress", action="store_true", help="hide progress bars")


def build_parser() -> argparse.ArgumentParser:
    """The `bertmem` command line: `train` one run, `bench` the recipe variants."""
    parser = argparse.ArgumentParser(prog="bertmem",
                                     description="Fine-tune BERT-family classifiers on a memory budget.")
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="fine-tune once and write metrics.json, config.json and loss.png")
    _recipe_arguments(t)
    t.add_argument("--eval-dataset", help="file or dataset for evaluation (default: eval split, or rows held out)")
    t.add_argument("--text-column", default="text")
    t.add_argument("--label-column", default="label")
    t.add_argument("--batch-size", type=int, default=get_profile().batch_size, help="micro-batch per process")
    t.add_argument("--accumulation-steps", type=int, default=1)
    t.add_argument("--precision", choices=REQUESTS, default="auto")
    t.add_argument("--layerwise-decay", type=float, default=None, help="LLRD factor in (0, 1], e.g. 0.95")
    t.add_argument("--warmup-ratio", type=float, default=0.1)
    t.add_argument("--weight-decay", type=float, default=0.01)
    t.add_argument("--max-grad-norm", type=float, default=1.0, help="clip at this norm; 0 turns clipping off")
    t.add_argument("--max-steps", type=int, default=None)
    t.add_argument("--attention", choices=("sdpa", "eager"), default="sdpa")
    t.add_argument("--no-group-by-length", action="store_true", help="random batches instead of length-grouped")
    t.add_argument("--pad-to-max-length", action="store_true", help="pad every batch to --max-length (baseline)")
    t.add_argument("--gradient-checkpointing", action="store_true")
    t.add_argument("--oom-backoff", action="store_true", help="halve the micro-batch on CUDA out-of-memory")
    t.add_argument("--checkpoint-every", type=int, default=None, help="save a checkpoint every N optimizer steps")
    t.add_argument("--resume", action="store_true", help="continue from OUTPUT_DIR/checkpoint.pt")
    t.add_argument("--overwrite", action="store_true", help="replace the results of a previous run in OUTPUT_DIR")
    t.add_argument("--backend", choices=("plain", "accelerate", "trainer"), default="plain",
                   help="accelerate: run under `accelerate launch` for several processes")
    t.add_argument("--save-model", action="store_true", help="save the fine-tuned model to OUTPUT_DIR/model")
    t.add_argument("--output-dir", required=True)
    b = sub.add_parser("bench", help="the recipe variants side by side -> bench.json and bench.md")
    _recipe_arguments(b)
    b.add_argument("--effective-batch", type=int, default=get_profile().effective_batch,
                   help="examples per optimizer step in every variant (default: the profile's)")
    b.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2],
                   help="training seeds: one round of every variant per seed (accuracy mean ± std); "
                        "--seed picks the data subset")
    b.add_argument("--output-dir", default="results/bench")
    b.add_argument("--no-estimate", action="store_true", help="skip the estimated bert-base table")
    p = sub.add_parser("plan", help="the largest micro-batch that fits a memory budget (estimated, no GPU needed)")
    p.add_argument("--model", default="bert-base-uncased", help="known BERT id, Hub id or local model folder")
    p.add_argument("--max-length", type=int, default=512, help="tokens per example")
    p.add_argument("--precision", choices=PRECISIONS, default="fp16")
    p.add_argument("--memory", default="auto",
                   help="device memory, e.g. 15GiB or 16GB; 'auto' reads the free memory of the CUDA device")
    p.add_argument("--effective-batch", type=int, default=32, help="examples per optimizer step")
    p.add_argument("--attention", choices=("sdpa", "eager"), default="sdpa")
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default="adamw")
    p.add_argument("--cuda-context", default=f"{CUDA_CONTEXT_BYTES // 2**20}MiB",
                   help="memory the CUDA context takes outside PyTorch's tensors (an assumption; measure yours)")
    p.add_argument("--allocator-margin", type=float, default=ALLOCATOR_MARGIN,
                   help="extra fraction of the peak for allocator rounding and fragmentation")
    p.add_argument("--kernels", choices=("cuda", "cpu"), default="cuda", help="whose kernel choices to estimate")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    return parser


def plan_main(args: argparse.Namespace) -> dict:
    """Estimate the largest micro-batch under the budget and print the plan (text or JSON)."""
    from .devices import cuda_free_bytes
    from .planner import PlanRequest, parse_memory, plan_micro_batch

    context = parse_memory(args.cuda_context)
    if args.memory == "auto":
        memory = cuda_free_bytes()
        if memory is None:
            raise ValueError("--memory auto reads a CUDA GPU's free memory, and this machine has none: "
                             "pass the card's memory, e.g. --memory 15GiB")
        context = 0  # free memory is measured after this process made its CUDA context
    else:
        memory = parse_memory(args.memory)
    request = PlanRequest(model=args.model, max_length=args.max_length, precision=args.precision, memory_bytes=memory,
                          effective_batch=args.effective_batch, attention=args.attention,
                          gradient_checkpointing=args.gradient_checkpointing, optimizer=args.optimizer,
                          cuda_context_bytes=context,
                          allocator_margin=args.allocator_margin, kernels=args.kernels)
    plan = plan_micro_batch(request)
    print(json.dumps(plan.as_dict()) if args.json else plan.describe())
    return plan.as_dict()


def train_main(args: argparse.Namespace) -> dict:
    """Build RunConfig + TrainConfig from the arguments and run one experiment."""
    from .experiment import RunConfig, run_experiment
    from .train import TrainConfig

    run = RunConfig(model=args.model, dataset=args.dataset, eval_dataset=args.eval_dataset,
                    text_column=args.text_column, label_column=args.label_column, train_size=args.train_size,
                    eval_size=args.eval_size, max_length=args.max_length, batch_size=args.batch_size,
                    group_by_length=not args.no_group_by_length, pad_to_max_length=args.pad_to_max_length,
                    attention=args.attention, backend=args.backend, output_dir=args.output_dir,
                    save_model=args.save_model, overwrite=args.overwrite)
    config = TrainConfig(epochs=args.epochs, learning_rate=args.lr, weight_decay=args.weight_decay,
                         warmup_ratio=args.warmup_ratio, seed=args.seed, device=args.device,
                         max_steps=args.max_steps, progress=not args.no_progress,
                         layerwise_decay=args.layerwise_decay, accumulation_steps=args.accumulation_steps,
                         max_grad_norm=args.max_grad_norm or None, precision=args.precision,
                         gradient_checkpointing=args.gradient_checkpointing, oom_backoff=args.oom_backoff,
                         checkpoint_dir=args.output_dir if (args.checkpoint_every or args.resume) else None,
                         checkpoint_every=args.checkpoint_every, resume=args.resume)
    summary = run_experiment(run, config)
    if summary["rank"] == 0:
        print(json.dumps({"output_dir": args.output_dir, **summary["final"]}))
    return summary


def bench_main(args: argparse.Namespace) -> dict:
    """Run the variants, add the bert-base estimate, print and save the tables."""
    from .bench import BenchConfig, run_bench, write_bench
    from .estimate import estimated_rows

    bench = BenchConfig(model=args.model, dataset=args.dataset, train_size=args.train_size, eval_size=args.eval_size,
                        max_length=args.max_length, effective_batch=args.effective_batch, learning_rate=args.lr,
                        epochs=args.epochs, seed=args.seed, seeds=tuple(args.seeds), device=args.device,
                        progress=not args.no_progress)
    result = run_bench(bench)
    if not args.no_estimate:
        result["estimated"] = estimated_rows()
    path = write_bench(result, args.output_dir)
    print(path.read_text())
    return result


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `bertmem` console script: bad arguments exit 2, an interrupted run 130/143, one line each."""
    from .interrupts import TrainingInterrupted, sigterm_interrupts

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with sigterm_interrupts():  # also while data and model load: no traceback on SIGTERM
            {"train": train_main, "bench": bench_main, "plan": plan_main}[args.command](args)
    except (ValueError, TypeError, FileNotFoundError) as err:
        parser.exit(2, f"bertmem {args.command}: error: {err}\n")
    except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM: the checkpoint (if any) is already saved
        message = str(stop) if isinstance(stop, TrainingInterrupted) else "interrupted"
        code = stop.exit_code if isinstance(stop, TrainingInterrupted) else 130
        parser.exit(code, f"bertmem {args.command}: {message or 'interrupted'}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
