"""A bench before and after it runs: its time on a GPU, said before it starts; the recorded CPU table (ch. 5)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bertmem.book.chapters import bench_runs, run_seconds, run_work
from bertmem.book.plots import markdown_table
from bertmem.experiments.bench import BenchConfig
from bertmem.memory.cards import CARDS, card_for


def estimated_minutes(bench: BenchConfig, card=None) -> float:
    """About how long the bench takes on a GPU (a T4 unless `card`): every variant once per seed, each in its own
    precision, with its checkpointing and its own matmul count (LoRA's adapters), as the chapter's minutes count
    it (`bertmem.book.chapters.bench_runs`) (chapter 5)."""
    card = card or CARDS["T4"]
    return sum(run_seconds(run, run_work(run, bench.model_id), card) for run in bench_runs(bench)) / 60


# The longest a Colab runtime lasts, for free users: "at most 12 hours" (https://research.google.com/colaboratory/faq.html)
COLAB_MAX_HOURS = 12


def long_run_warning(bench: BenchConfig, gpu_name: str | None, limit_minutes: float = 10.0) -> str | None:
    """A sentence to print before a GPU bench that runs longer than a chapter (about 10 min), else None."""

    card = card_for(gpu_name) or CARDS["T4"]
    minutes = estimated_minutes(bench, card)
    if minutes <= limit_minutes:
        return None
    where = gpu_name if card_for(gpu_name) else f"a {CARDS['T4'].name}"
    duration = f"{minutes / 60:.1f} hours" if minutes >= 90 else f"{minutes:.0f} minutes"
    return (f"this bench will take about {duration} on {where} (estimated: {len(bench.variants)} "
            f"variants × {len(bench.seeds)} seeds); fewer --seeds, a smaller --train-size or fewer --variants "
            "shorten it")


def recorded_bench(name: str = "bench-cpu") -> dict[str, Any]:
    """A bench table recorded with `make bench` and shipped with the package (chapter 5): works on Colab too."""
    from importlib.resources import files

    return json.loads(files("bertmem").joinpath("recorded", f"{name}.json").read_text(encoding="utf-8"))


def write_bench(result: dict[str, Any], folder: str | Path) -> Path:
    """bench.json and bench.md (table + hardware and versions) into folder (chapter 5)."""

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "bench.json").write_text(json.dumps(result, indent=1, default=str))
    env = ", ".join(f"{k} {v}" for k, v in result["environment"].items())
    # kept in bench.json; lists do not tabulate
    hidden = ("accuracies", "within noise", "compute per round (s)", "correct per seed")
    rows = [{k: v for k, v in row.items() if k not in hidden} for row in result["rows"]]
    parts = [f"# Recipe benchmark\n\n{env}\n", markdown_table(rows, floatfmt=".3g")]
    if result.get("estimated"):
        parts += ["\n## Estimated for a CUDA GPU (bert-base, 512 tokens, effective batch 32)\n",
                  markdown_table(result["estimated"], floatfmt=".3g")]
    (folder / "bench.md").write_text("\n".join(parts) + "\n")
    return folder / "bench.md"
