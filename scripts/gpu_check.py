"""Execute every chapter under the GPU profile and record what the GPU did (`make gpu-check`).

For each notebook: wall time, the CUDA peak (`torch.cuda.max_memory_allocated` over the whole notebook), the
planner's estimate of one training step at the profile's micro-batch and length, and the versions; written to
results/gpu/<gpu-name>.json and a markdown summary beside it. Needs a CUDA GPU unless --allow-cpu (a dry run of
the script itself, for tests).

With --dry-run it executes every notebook under the GPU profile on this machine's CPU instead, shrunk by
environment overrides (MiniLM, 16 examples, 64 tokens): `make test` runs it so a branch that only the GPU profile
takes cannot raise unseen. `--cpu-bf16 other` runs it as the other kind of CPU would (native bf16 or not, forced
through $BERTMEM_CPU_BF16), so one machine exercises both kinds. It exits 1 when any notebook fails.

--as-t4 runs the chapters on a bigger card as a Colab T4 would, as far as a cap can: the process capped so that
its allocator plus the CUDA context measured in the kernel make a T4's 15,360 MiB
(`torch.cuda.set_per_process_memory_fraction`), fp16 with loss scaling (`BERTMEM_CUDA_CAPABILITY=7.5`: `auto`
picks what a T4 gets) and SDPA limited to the memory-efficient kernel (flash and cuDNN attention need sm80; a T4
has neither). A T4's own kernels and speed are not reproduced: its times are this card's. A chapter that does not
fit is recorded with its error.

Usage: python scripts/gpu_check.py [--output results/gpu] [--allow-cpu | --dry-run [--cpu-bf16 KIND]] [--as-t4]
           [notebook ...]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import json
import os
import re
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DRY_RUN_ENV = {  # the GPU profile's code paths at sizes a CPU runs in seconds (the model must exist offline)
    "BERTMEM_PROFILE": "gpu", "BERTMEM_DEVICE": "cpu", "BERTMEM_MODEL_ID": "sentence-transformers/all-MiniLM-L6-v2",
    "BERTMEM_MAX_LENGTH": "64", "BERTMEM_TRAIN_SIZE": "16", "BERTMEM_EVAL_SIZE": "16", "BERTMEM_MICRO_BATCH": "4",
    "BERTMEM_EFFECTIVE_BATCH": "8", "BERTMEM_LONG_MODEL_ID": "sentence-transformers/all-MiniLM-L6-v2",
    "CUDA_VISIBLE_DEVICES": ""}  # no GPU for the kernel even on a machine that has one
PROBE = """import json as _json, platform as _platform, torch as _torch, transformers as _transformers
from bertmem.core.devices import cpu_supports_bf16 as _cpu_bf16
_cuda = _torch.cuda.is_available()
print("GPU-CHECK " + _json.dumps({
    "cpu_bf16": _cpu_bf16(),
    "cuda_peak_bytes": _torch.cuda.max_memory_allocated() if _cuda else None,
    "gpu": _torch.cuda.get_device_name(0) if _cuda else "cpu",
    "torch": _torch.__version__, "transformers": _transformers.__version__,
    "python": _platform.python_version(),
    "cuda_reserved_peak_bytes": _torch.cuda.max_memory_reserved() if _cuda else None}))"""
T4_ENV = {"BERTMEM_CUDA_CAPABILITY": "7.5"}  # `auto` precision picks fp16 + GradScaler, as on a T4
T4_PRELUDE = """import json as _json
from bertmem.experiments.gpu_calibration import as_t4 as _as_t4
print("GPU-CHECK " + _json.dumps(_as_t4()))"""


@contextlib.contextmanager
def forced_env(env: dict[str, str]):
    """This process's environment with `env` added, as it was after."""
    old_env = dict(os.environ)
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(old_env)


def run_notebook(path: Path, env: dict[str, str], timeout: int = 600, prelude: str | None = None) -> dict:
    """Execute one notebook (its own folder as working directory) plus a probe cell, after `prelude` (--as-t4's
    cap) when given; its record."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.read(path, as_version=4)
    notebook.cells.append(nbformat.v4.new_code_cell(PROBE))
    if prelude is not None:
        notebook.cells.insert(0, nbformat.v4.new_code_cell(prelude))
    start = time.perf_counter()
    error = None
    with forced_env(env):  # the kernel inherits this process's environment
        try:
            NotebookClient(notebook, timeout=timeout, kernel_name="python3",
                           resources={"metadata": {"path": str(path.parent)}}).execute()
        except Exception as err:  # a failing chapter is a result too
            last = re.sub(r"\x1b\[[0-9;]*m", "", str(err)).strip().splitlines()[-1:] or [""]  # no ANSI colours
            error = f"{type(err).__name__}: {last[0][:300]}"
    record = {"notebook": path.name, "wall_time_s": round(time.perf_counter() - start, 1), "error": error,
              "slowest_cells": slowest_cells(notebook, 3)}
    for cell in [notebook.cells[-1]] + ([notebook.cells[0]] if prelude is not None else []):
        for output in cell.get("outputs", []):
            for line in output.get("text", "").splitlines():
                if line.startswith("GPU-CHECK "):
                    record.update(json.loads(line.removeprefix("GPU-CHECK ")))
    return record


def slowest_cells(notebook, top: int) -> list[list]:
    """The `top` slowest code cells of an executed notebook: [cell number, seconds, its first line]."""
    from datetime import datetime

    timed = []
    for number, cell in enumerate(notebook.cells):
        execution = cell.get("metadata", {}).get("execution", {})
        if "iopub.execute_input" in execution and "shell.execute_reply" in execution:
            # "…Z": Python 3.10's fromisoformat reads no Z
            seconds = (datetime.fromisoformat(execution["shell.execute_reply"].replace("Z", "+00:00"))
                       - datetime.fromisoformat(execution["iopub.execute_input"].replace("Z", "+00:00")))
            timed.append([number, round(seconds.total_seconds(), 1), cell.source.splitlines()[0][:60]])
    return sorted(timed, key=lambda row: -row[1])[:top]


def longest_first(paths: list[Path]) -> list[Path]:
    """The notebooks in the order that ends soonest on several workers: longest dry run first (as recorded in the
    package's cpu-work.json; one not recorded goes first, being unknown)."""
    from bertmem.book.chapters import cpu_work_minutes

    minutes = cpu_work_minutes()
    return sorted(paths, key=lambda path: -minutes.get(path.stem.split("_")[0], float("inf")))


def run_notebooks(paths: list[Path], env: dict[str, str], timeout: int, prelude: str | None,
                  jobs: int = 1) -> Iterator[dict]:
    """Each notebook's record as it finishes; with jobs > 1, that many kernels at once, each in its own process
    with one torch thread (two single-threaded kernels on two cores finish sooner than one with two threads)."""
    if jobs <= 1:
        for path in paths:
            yield run_notebook(path, env, timeout, prelude)
        return
    env = {**env, "OMP_NUM_THREADS": "1"}  # torch reads it at import: one intra-op thread per kernel
    spawn = multiprocessing.get_context("spawn")  # no forked copy of this process's torch threads
    with ProcessPoolExecutor(max_workers=jobs, mp_context=spawn) as pool:
        futures = [pool.submit(run_notebook, path, env, timeout, prelude) for path in longest_first(paths)]
        for future in as_completed(futures):
            yield future.result()


def cpu_bf16_env(kind: str) -> dict[str, str]:
    """$BERTMEM_CPU_BF16 for a dry run: 'native' leaves this CPU's answer, 'other' forces the other kind's, 'on' and
    'off' force one."""
    from bertmem.core.devices import CPU_BF16_ENV, other_cpu_bf16

    forced = {"on": "1", "off": "0", "other": other_cpu_bf16()}
    return {CPU_BF16_ENV: forced[kind]} if kind in forced else {}


def planner_estimate(profile) -> dict:
    """The estimated peak of one training step at the profile's micro-batch and length (precision auto)."""
    from bertmem.loop.precision import choose_precision
    from bertmem.memory.estimate import estimate_step_memory

    device = "cuda" if profile.device.startswith("cuda") else "cpu"
    precision = choose_precision("auto", device, verbose=False).precision
    report = estimate_step_memory(profile.model_id, profile.micro_batch, profile.max_length, precision=precision,
                                  device=device)
    return {"estimate_step_peak_bytes": report.step_peak, "estimate_peak_phase": report.peak_phase,
            "estimate_precision": precision, "estimate_batch": profile.micro_batch,
            "estimate_max_length": profile.max_length}


def summary(records: list[dict], gpu: str) -> str:
    """The markdown table that sits beside the JSON."""
    lines = [f"# GPU check: {gpu}\n", "| notebook | wall time (min) | CUDA peak (GiB) | reserved peak (GiB) | error |",
             "|---|---|---|---|---|"]

    def gib(value: int | None) -> str:
        return "" if value is None else f"{value / 2**30:.2f}"

    for r in records:
        lines.append(f"| {r['notebook']} | {r['wall_time_s'] / 60:.1f} | {gib(r.get('cuda_peak_bytes'))} | "
                     f"{gib(r.get('cuda_reserved_peak_bytes'))} | {r['error'] or ''} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", help="default: every notebook in book/")
    parser.add_argument("--output", default=str(ROOT / "results" / "gpu"))
    parser.add_argument("--allow-cpu", action="store_true", help="run without a GPU (tests the script only)")
    parser.add_argument("--dry-run", action="store_true",
                        help="the GPU profile at tiny sizes on the CPU (CI); writes dry-run.{json,md}")
    parser.add_argument("--cpu-bf16", choices=("native", "other", "on", "off"), default="native",
                        help="with --dry-run: run as this CPU is, as the other kind (native bf16 or not), or force")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per notebook (a lent card's call: 600)")
    parser.add_argument("--as-t4", action="store_true",
                        help="cap the process to a T4's 15,360 MiB with its context, fp16, memory-efficient SDPA")
    parser.add_argument("--classes", type=int, default=None,
                        help="with --dry-run: every chapter reads a generated skewed file of this many classes "
                             "(BERTMEM_DATASET) instead of its own dataset; the long-text runs keep theirs")
    parser.add_argument("--jobs", type=int, default=1,
                        help="notebooks executed at once, one torch thread each (CI's dry run: 2 on 2 cores); "
                             "1 for the times a chapter records (scripts/sync_chapter_minutes.py --cpu-work)")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available() and not (args.allow_cpu or args.dry_run):
        print("gpu-check needs a CUDA GPU (torch.cuda.is_available() is False); nothing was run", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT / "src"))
    from bertmem.profiles import get_profile

    if args.dry_run:
        from bertmem.core.devices import CPU_BF16_ENV

        os.environ.pop(CPU_BF16_ENV, None)  # never one inherited from the caller: native is this CPU's own answer
        env = {**DRY_RUN_ENV, **cpu_bf16_env(args.cpu_bf16)}
        if args.classes:
            from bertmem.book.tickets import write_text_label_tickets

            path = write_text_label_tickets(Path(args.output) / f"tickets-{args.classes}-classes.csv", args.classes)
            env["BERTMEM_DATASET"] = str(path.resolve())
            print(f"dry run: every chapter reads {path.name} ({args.classes} skewed classes)", flush=True)
        print(f"dry run: {', '.join(f'{k}={v}' for k, v in env.items() if k.startswith('BERTMEM_CPU'))}"
              if any(k.startswith("BERTMEM_CPU") for k in env) else "dry run: this CPU's own bf16 support",
              flush=True)
    else:
        env = {"BERTMEM_PROFILE": "gpu"} if torch.cuda.is_available() else {}
    if args.as_t4:
        env.update(T4_ENV)
    prelude = T4_PRELUDE if args.as_t4 and torch.cuda.is_available() and not args.dry_run else None
    profile = get_profile(env={**os.environ, **env})
    paths = [Path(p) for p in args.notebooks] or sorted((ROOT / "book").glob("*.ipynb"))
    gpu = "dry-run" if args.dry_run else torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    gpu += " as a T4" if args.as_t4 else ""
    with forced_env(env):  # the estimate as the chapters see the machine (a T4's precision under --as-t4)
        result = {"gpu": gpu, "profile": profile.defaults_line(), "planner": planner_estimate(profile),
                  "jobs": args.jobs, "chapters": []}
    folder = Path(args.output)
    folder.mkdir(parents=True, exist_ok=True)
    stem = re.sub(r"[^A-Za-z0-9._-]+", "-", gpu).strip("-")
    order = {path.name: i for i, path in enumerate(paths)}
    for r in run_notebooks(paths, env, args.timeout, prelude, args.jobs):  # the files after each chapter:
        result["chapters"].append(r)  # a call cut short keeps what it has
        result["chapters"].sort(key=lambda record: order[record["notebook"]])
        print(f"{r['notebook']}: {r['wall_time_s']:.0f} s{' — ' + r['error'] if r['error'] else ''}", flush=True)
        (folder / f"{stem}.json").write_text(json.dumps(result, indent=1))
        (folder / f"{stem}.md").write_text(summary(result["chapters"], gpu))
    records = result["chapters"]
    print(summary(records, gpu))
    return 1 if any(r["error"] for r in records) else 0


if __name__ == "__main__":
    sys.exit(main())
