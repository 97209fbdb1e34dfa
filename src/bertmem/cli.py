"""`bertmem train`, `bench`, `plan` and `predict` (also `python -m bertmem`): argument parsing only (ch. 5, A1)."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from bertmem.core.flags import add_config_flags, config_from_flags
from bertmem.core.locks import lock_output_folder
from bertmem.core.runtime import colab_runs_root, on_colab, where_runs_live
from bertmem.core.units import GIB
from bertmem.experiments.fit import FitRequest
from bertmem.experiments.predict import PredictConfig
from bertmem.loop.accelerate_loop import fsdp_launched
from bertmem.memory.planner import PlanRequest
from bertmem.memory.speed import EpochRequest
from bertmem.profiles import get_profile, learning_rate_for


def build_parser() -> argparse.ArgumentParser:
    """The `bertmem` command line: `train` one run, `bench` the recipe variants, `plan` a micro-batch.

    `train`'s flags are generated from RunConfig, DataConfig and TrainConfig (`bertmem.core.flags`), with the
    profile's defaults; `bench`'s from BenchConfig.
    """
    from bertmem.data.loaders import DataConfig
    from bertmem.experiments.bench import BenchConfig
    from bertmem.loop.config import RunConfig, TrainConfig

    profile = get_profile()
    parser = argparse.ArgumentParser(prog="bertmem", allow_abbrev=False,
                                     description="Fine-tune BERT-family classifiers on a memory budget.")
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", allow_abbrev=False,
                       help="fine-tune once and write metrics.json, config.json, loss.png, confusion.png and the model")
    add_config_flags(t, RunConfig, profile.run_config())
    add_config_flags(t, DataConfig, profile.data_config(), required=("dataset",))  # never a silent IMDb run
    add_config_flags(t, TrainConfig, profile.train_config())
    add_config_flags(t, FitRequest)
    t.add_argument("--recipe", choices=tuple(RECIPES), help="a preset of flags: book = chapter 5's full recipe ("
                   + " ".join(RECIPES["book"]) + "); flags given on the command line win")
    b = sub.add_parser("bench", allow_abbrev=False, help="the recipe variants side by side -> bench.json and bench.md")
    add_config_flags(b, BenchConfig, profile.bench_config())
    b.add_argument("--output-dir", default="auto", help="folder for bench.json, bench.md and each finished run "
                   "(a rerun skips those); auto: results/bench, on Colab bertmem-runs/bench on Google Drive when "
                   "it is mounted (default: auto)")
    b.add_argument("--overwrite", action="store_true", help="start over: drop the finished runs in OUTPUT_DIR")
    b.add_argument("--no-estimate", action="store_true", help="skip the estimated bert-base table")
    p = sub.add_parser("plan", allow_abbrev=False,
                       help="the largest micro-batch that fits a memory budget (estimated, no GPU needed)")
    planned = profile if profile.device.startswith("cuda") else get_profile("gpu")  # what a GPU would run
    add_config_flags(p, PlanRequest, planned.plan_request())
    add_config_flags(p, EpochRequest)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--fresh", action="store_true", help="estimate under FakeTensorMode now, with this machine's "
                   "torch and transformers, even where the stored lines of the \"Will it fit?\" page answer")
    parser.train_parser = t  # --recipe sets its defaults (main)
    f = sub.add_parser("predict", allow_abbrev=False,
                       help="label a file of new texts with a saved model -> a CSV of classes and probabilities")
    add_config_flags(f, PredictConfig)
    return parser


def plan_main(args: argparse.Namespace) -> dict:
    """Estimate the largest micro-batch under the budget and print the plan (text or JSON)."""
    import torch

    from bertmem.core.devices import cuda_available, cuda_free_bytes, device_capability, device_name
    from bertmem.memory.cards import CARD_MEMORY, DEFAULT_CARD, card_for, card_named, parse_memory
    from bertmem.memory.planner import SIZE_HAS_NO_SPEED, plan_epoch, plan_micro_batch, plan_precision

    context = parse_memory(args.cuda_context_bytes)
    card = card_named(args.memory_bytes)  # a named card: its speed gives the time per epoch
    no_card = SIZE_HAS_NO_SPEED
    if args.memory_bytes == "auto":
        memory = cuda_free_bytes()
        if memory is None:  # no GPU here: answer for the card most readers have
            memory, card = CARD_MEMORY[DEFAULT_CARD], card_named(DEFAULT_CARD)
            print(f"no CUDA GPU on this machine: planning for a {DEFAULT_CARD.upper()} "
                  f"({memory / GIB:.0f} GiB; --memory sets another budget or card)", file=sys.stderr)
        else:
            context = 0  # free memory is measured after this process made its CUDA context
            # this GPU, if the book knows it: its speed
            gpu = device_name(torch.device("cuda")) if cuda_available() else "this GPU"
            card, no_card = card_for(gpu), f"the book holds no speed for {gpu}"
    else:
        memory = parse_memory(args.memory_bytes)
    precision, why = plan_precision(args.precision, args.memory_bytes, device_capability())
    plan = plan_micro_batch(config_from_flags(PlanRequest, args, memory_bytes=memory, cuda_context_bytes=context,
                                              precision=precision), fresh=args.fresh)
    plan.precision_asked = args.precision  # the command keeps 'auto': the card's choice on the card, fp32 on a CPU
    plan.memory_asked = args.memory_bytes  # the card by its name, as the reader gave it
    plan.epoch, plan.no_epoch = plan_epoch(plan, card, config_from_flags(EpochRequest, args), no_card)
    if args.precision == "auto" and not args.json:
        print(f"precision {precision} ({why})")
    print(json.dumps(plan.as_dict()) if args.json else plan.describe())
    return plan.as_dict()


def predict_main(args: argparse.Namespace) -> dict:
    """Label every row of a file with a saved model and write the predictions CSV (A1)."""
    from bertmem.experiments.predict import predict_file, predict_summary

    summary = predict_file(config_from_flags(PredictConfig, args))
    print(predict_summary(summary), file=sys.stderr)
    print(json.dumps({k: summary[k] for k in ("output", "rows", "predicted", "without_text")}))
    return summary


def train_main(args: argparse.Namespace) -> dict:
    """Build RunConfig, DataConfig and TrainConfig from the flags and run one experiment."""
    from bertmem.core.devices import on_cuda
    from bertmem.data.loaders import DataConfig
    from bertmem.experiments.report import class_summary
    from bertmem.experiments.run import run_experiment
    from bertmem.loop.config import TINY_MODEL, TrainConfig

    if not args.output_dir:
        raise ValueError("bertmem train needs --output-dir: the folder its results go to")
    profile = get_profile()
    run = run_from_flags(args, profile)  # checkpoints, if any, live in the output folder
    auto, given = args.micro_batch == "auto", getattr(args, "given_flags", set())
    if auto and "--accumulation-steps" in given:
        raise ValueError("--micro-batch auto plans the accumulation steps for --effective-batch: drop "
                         "--accumulation-steps, or give both --micro-batch N and --accumulation-steps")
    if "--effective-batch" in given and "--accumulation-steps" in given:
        raise ValueError("--effective-batch and --accumulation-steps both set the examples per optimizer step: "
                         "give one of them")
    sizes = subset_sizes(args, profile, given)
    data = config_from_flags(DataConfig, args, micro_batch=profile.micro_batch if auto else args.micro_batch,
                             **sizes)
    config = config_from_flags(TrainConfig, args, learning_rate=model_learning_rate(args, profile, run.model_id))
    # an accumulation given by hand wins over a preset's effective batch (--recipe book)
    effective = None if "--accumulation-steps" in given and "--effective-batch" not in given else args.effective_batch
    fit = config_from_flags(FitRequest, args, plan_micro_batch=auto, effective_batch=effective)
    if auto and run.model_id == TINY_MODEL:
        raise ValueError("--micro-batch auto plans for a known model's size; tiny-bert is a test model: pass "
                         "--micro-batch N")
    planned = run.model_id != TINY_MODEL and (auto or on_cuda(run.device) or fit.memory is not None
                                              or fit.effective_batch is not None)
    if run.save_model and fsdp_launched():  # rank 0 alone cannot write weights that FSDP shards across processes
        if "--save-model" in given:
            raise ValueError("--save-model under FSDP is not supported: each process holds a shard of the weights; "
                             "train with DDP (accelerate launch --multi_gpu) to keep the model, or pass "
                             "--no-save-model")
        run = dataclasses.replace(run, save_model=False)
        print("bertmem train: no model saved under FSDP (each process holds a shard of the weights); train with "
              "DDP to keep one", file=sys.stderr)
    if run.checkpoint_dir:
        where = where_runs_live(Path(run.output_dir).absolute())
        print(f"bertmem train: {checkpoint_plan(run)}; {where}", file=sys.stderr, flush=True)
    summary = run_experiment(run, data, config, fit=fit if planned else None)
    if summary["rank"] != 0:
        return summary
    saved = summary["checkpoints"]
    if saved["saves"]:
        share = saved["share"]
        advice = (": raise --checkpoint-minutes or --checkpoint-every to save less often"
                  if saved["periodic_share"] > CHECKPOINT_SHARE_WARNING else "")
        print(f"bertmem train: {saved['saves']} checkpoints took {saved['time_s']:.1f} s, {100 * share:.1f} % of "
              f"the time spent training and saving{advice}", file=sys.stderr)
    print(class_summary(summary["final"], summary), file=sys.stderr)
    print(kept_files(run), file=sys.stderr)
    print(json.dumps({"output_dir": args.output_dir, **summary["final"]}))
    return summary


def model_learning_rate(args: argparse.Namespace, profile, model_id: str) -> float:
    """--learning-rate (--lr) as given, or BERTMEM_LEARNING_RATE; else the default of the model trained, by its size
    (`learning_rate_for`: a base-sized model on the CPU profile gets 2e-5, not MiniLM's 1e-4) (chapter 0)."""
    if "--learning-rate" in getattr(args, "given_flags", set()) or "learning_rate" in profile.overridden:
        return args.learning_rate
    return learning_rate_for(model_id)


def kept_files(run) -> str:
    """The run's last lines: where its results and model are, and the command that labels new rows with it (A1)."""
    folder = Path(run.output_dir)
    lines = [f"bertmem train: results in {folder}: metrics.json (per-class scores), confusion.png, loss.png"]
    if run.save_model:
        lines.append(f"bertmem train: model in {folder / 'model'}; label new rows with:\n"
                     f"  bertmem predict --model {folder / 'model'} --dataset NEW_FILE")
    else:
        lines.append("bertmem train: no model kept (--no-save-model): rerun without it to label new rows with "
                     "bertmem predict")
    return "\n".join(lines)


def subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """`bertmem`'s subcommands by name (train, bench, plan, predict) with their parsers."""
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


def given_flags(argv: list[str], parser: argparse.ArgumentParser) -> set[str]:
    """The long options a command line spells out ('--train-size=all' counts as '--train-size'), an alias under
    its flag's own name (`--gradient-accumulation-steps` is `--accumulation-steps`)."""
    own = {option: action.option_strings[0] for sub in subcommands(parser).values() for action in sub._actions
           for option in action.option_strings}
    return {own.get(flag, flag) for flag in (arg.split("=", 1)[0] for arg in argv if arg.startswith("--"))}


def subset_sizes(args: argparse.Namespace, profile, given: set[str]) -> dict:
    """--train-size and --eval-size: as given; not given, the profile's for a named dataset and every row of a
    file (a stratified fifth held out), said in one line (A1)."""
    from bertmem.data.frames import looks_like_path

    unset = [name for name in ("train_size", "eval_size") if f"--{name.replace('_', '-')}" not in given]
    a_file = looks_like_path(str(args.dataset)) or Path(args.dataset).expanduser().exists()
    sizes = {name: None if a_file else getattr(profile, name) for name in unset}
    if a_file and unset:
        said = {"train_size": "--train-size all (every training row)",
                "eval_size": "--eval-size all (a stratified fifth held out, or all of --eval-dataset)"}
        print(f"bertmem train: {', '.join(said[name] for name in unset)}: give numbers to use fewer",
              file=sys.stderr)
    return sizes


def run_from_flags(args: argparse.Namespace, profile):
    """`bertmem train`'s RunConfig, with `--checkpoint-minutes auto` resolved from the profile (chapter 5b)."""
    from bertmem.loop.config import RunConfig

    minutes = checkpoint_minutes(args.checkpoint_minutes, args.backend, profile)
    return config_from_flags(RunConfig, args, checkpoint_minutes=minutes)


def checkpoint_minutes(asked: float | str | None, backend: str, profile) -> float | None:
    """--checkpoint-minutes auto: the profile's (15 on the GPU profiles) for bertmem's own loop; the other
    backends keep their own checkpoints (chapter 5b)."""
    if asked != "auto":
        return asked
    return profile.checkpoint_minutes if backend == "plain" else None


CHECKPOINT_SHARE_WARNING = 0.1  # a larger share of training and saving time gets a hint


def checkpoint_plan(run) -> str:
    """'checkpoints every 15 minutes, every 50 steps and at each epoch's end' for a run that keeps them (ch. 5b)."""
    when = [f"every {run.checkpoint_minutes:g} minutes"] if run.checkpoint_minutes else []
    when += [f"every {run.checkpoint_every} steps"] if run.checkpoint_every else []
    return f"checkpoints {', '.join(when + ['at each epoch end and on Ctrl-C or SIGTERM'])}"


def bench_main(args: argparse.Namespace) -> dict:
    """Run the variants, add the bert-base estimate, print and save the tables."""
    from bertmem.book.bench_info import long_run_warning, write_bench
    from bertmem.core.devices import device_name
    from bertmem.experiments.bench import BenchConfig, FinishedRuns, run_bench
    from bertmem.memory.planner import estimated_rows

    bench = config_from_flags(BenchConfig, args,
                              learning_rate=model_learning_rate(args, get_profile(), args.model_id))
    folder = bench_folder(args.output_dir)
    if bench.device.startswith("cuda"):  # say how long before hours of GPU time begin
        import torch

        warning = long_run_warning(bench, device_name(torch.device(bench.device)))
        if warning:
            print(f"note: {warning}", file=sys.stderr, flush=True)
    with lock_output_folder(folder):
        finished = FinishedRuns(folder, bench, overwrite=args.overwrite)
        print(f"bertmem bench: each finished run is kept as it completes; {where_runs_live(folder.absolute())}"
              + (f"; finished runs found there, not run again: {len(finished)}" if len(finished) else ""),
              file=sys.stderr, flush=True)
        result = run_bench(bench, finished=finished)
        if not args.no_estimate:
            result["estimated"] = estimated_rows()
        path = write_bench(result, folder)
    print(path.read_text())
    return result


# Presets of `bertmem train` flags: the book's recipe (chapter 5's full recipe) spelled once, here.
RECIPES = {"book": ("--precision", "auto", "--attention", "sdpa", "--group-by-length", "--layerwise-decay", "0.95",
                    "--warmup-ratio", "0.1", "--max-grad-norm", "1.0", "--micro-batch", "auto",
                    "--effective-batch", "32")}


def recipe_defaults(name: str, train_parser: argparse.ArgumentParser) -> dict:
    """The preset's flags as parser defaults (dest -> value), parsed by the train parser itself."""
    flags = RECIPES[name]
    parsed = train_parser.parse_args([*flags, "--dataset", "-", "--output-dir", "-"])  # placeholders: not read
    dests = {a.dest for a in train_parser._actions for opt in a.option_strings if opt in flags}
    return {dest: getattr(parsed, dest) for dest in dests}


def bench_folder(output_dir: str) -> Path:
    """`--output-dir auto`: results/bench, or on Colab the runs folder (Google Drive when mounted) (chapter 5b)."""
    if output_dir != "auto":
        return Path(output_dir).expanduser()
    return colab_runs_root() / "bench" if on_colab() else Path("results/bench")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `bertmem` console script: bad arguments exit 2, an interrupted run 130/143, one line each."""
    from bertmem.core.interrupts import TrainingInterrupted, sigterm_interrupts

    try:
        parser = build_parser()  # get_profile() inside also quiets third-party import notices
    except ValueError as err:  # a bad BERTMEM_* variable: one line, not a traceback
        print(f"bertmem: error: {err}", file=sys.stderr)
        return 2
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    args.given_flags = given_flags(argv, parser)  # what the reader spelled out: a default may depend on it
    if getattr(args, "recipe", None):  # the preset's values become defaults; flags given still win
        parser.train_parser.set_defaults(**recipe_defaults(args.recipe, parser.train_parser))
        args = parser.parse_args(argv)
        args.given_flags = given_flags(argv, parser)
        print(f"bertmem train: --recipe {args.recipe} = {' '.join(RECIPES[args.recipe])}", file=sys.stderr)
    try:
        with sigterm_interrupts():  # also while data and model load: no traceback on SIGTERM
            {"train": train_main, "bench": bench_main, "plan": plan_main, "predict": predict_main}[args.command](args)
    except (ValueError, TypeError, FileNotFoundError) as err:
        parser.exit(2, f"bertmem {args.command}: error: {err}\n")
    except KeyboardInterrupt as stop:  # Ctrl-C or SIGTERM: the checkpoint (if any) is already saved
        message = str(stop) if isinstance(stop, TrainingInterrupted) else "interrupted"
        code = stop.exit_code if isinstance(stop, TrainingInterrupted) else 130
        parser.exit(code, f"bertmem {args.command}: {message or 'interrupted'}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
