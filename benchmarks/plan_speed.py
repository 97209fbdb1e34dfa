"""How long `bertmem plan` takes, as a reader runs it: a new process per command, from start to its last line.

Where the "Will it fit?" page's stored lines cover the choice the command reads its answer off them
(`bertmem.memory.stored`); elsewhere, and with --fresh, it estimates under FakeTensorMode. The table gives each
command's median wall time over --repeats runs, its range, and where its answer came from. Run it on an idle
machine: the times are the machine's, not a property of the code.

Usage: python benchmarks/plan_speed.py [--repeats 5] [--markdown]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(SRC))  # this checkout's bertmem, here and in the timed processes

from bertmem.book.plots import as_table, markdown_table  # noqa: E402

COMMANDS = {  # what a reader asks: covered by the lines, then what they do not cover, then the same --fresh
    "the default (bert-base, 512 tokens, T4)": [],
    "roberta-large, 384, LoRA r = 16, A10": ["--model", "FacebookAI/roberta-large", "--max-length", "384",
                                             "--lora-r", "16", "--memory", "a10"],
    "bert-large, 4 frozen layers, 11 GiB": ["--model", "bert-large-uncased", "--freeze-layers", "4",
                                            "--memory", "11GiB", "--gradient-checkpointing"],
    "ModernBERT-base, 2048 tokens, eager, L4": ["--model", "answerdotai/ModernBERT-base", "--max-length", "2048",
                                                "--attention", "eager", "--memory", "l4"],
    "bert-base, 200 tokens (not stored)": ["--max-length", "200"],
    "the default, --fresh": ["--fresh"],
}


def timed(flags: list[str]) -> tuple[float, str]:
    """One `bertmem plan --json` in a new process: seconds, and where its answer came from."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "bertmem", "plan", *flags, "--json"], capture_output=True,
                          text=True, check=True, env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(SRC)})
    seconds = time.perf_counter() - start
    source = json.loads(done.stdout)["estimated_from"]
    return seconds, "stored lines" if source.startswith("the stored lines") else "estimated now"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--markdown", action="store_true", help="a Markdown table (default: aligned text)")
    args = parser.parse_args(argv)
    rows = []
    for name, flags in COMMANDS.items():
        runs = [timed(flags) for _ in range(args.repeats)]
        seconds = [s for s, _ in runs]
        rows.append({"command": name, "answer from": runs[0][1], "median (s)": statistics.median(seconds),
                     "fastest (s)": min(seconds), "slowest (s)": max(seconds)})
    columns = ("command", "answer from", "median (s)", "fastest (s)", "slowest (s)")
    print(markdown_table(rows, columns, floatfmt=".2f") if args.markdown
          else repr(as_table(rows, columns, floatfmt=".2f")))
    print(f"\n{args.repeats} runs each, a new process per run; {os.cpu_count()} CPU cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
