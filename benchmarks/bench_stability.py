"""Chapter 5's live bench, run again and again: does its story survive a rerun and another dataset? (ch. 5)

Runs the chapter's bench configuration (the CPU profile's chapter-5 sizes, two seeds, variants interleaved in
rounds) twice on the profile's dataset (the second time with other seeds) and once on another dataset, prints each
run's table, and compares the time ratios of the two same-data runs (they should agree within 10 %) and the
qualitative story of all three: which way each ratio points and which accuracy differences exceed the noise.

Run: .venv/bin/python benchmarks/bench_stability.py [--other-dataset rotten_tomatoes]
(~50 min on 2 cores: three benches of 12 runs each)
"""

import argparse
import warnings

from bertmem.book.chapters import chapter_bench, chapter_settings
from bertmem.book.plots import markdown_table
from bertmem.experiments.bench import BenchConfig, run_bench
from bertmem.profiles import get_profile

COLUMNS = ["variant", "activations ratio", "time ratio", "time ratio range", "epoch time ratio", "median step (s)",
           "step spread (IQR / median)", "accuracy", "accuracy std", "accuracy Δ vs noise"]


def live_bench(dataset: str | None = None, seeds: tuple[int, ...] | None = None) -> BenchConfig:
    """The bench chapter 5 runs live, optionally on another dataset or with other training seeds."""
    profile = get_profile()
    given = {name: value for name, value in (("dataset", dataset), ("seeds", seeds)) if value}
    return chapter_bench(chapter_settings("05", profile), profile, progress=False, **given)


def story(rows: list[dict]) -> dict[str, tuple]:
    """What a reader concludes from one run: direction of each ratio, and whether Δ accuracy is noise."""
    out = {}
    for r in rows[1:]:
        if "note" in r:
            continue
        time = r["time ratio"]  # within ±10 % of the baseline is "about as fast": rounds alone vary that much
        out[r["variant"]] = ("less memory" if r["activations ratio"] < 1 else "more memory",
                             "faster" if time < 0.9 else "slower" if time > 1.1 else "about as fast",
                             "within noise" if r.get("within noise", True) else "beyond noise")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--other-dataset", default="rotten_tomatoes")
    args = parser.parse_args()
    runs = {}
    plan = (("run 1", None, None), ("run 2 (seeds 2, 3)", None, (2, 3)),
            (f"run 3 ({args.other_dataset})", args.other_dataset, None))
    for label, dataset, seeds in plan:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = run_bench(live_bench(dataset, seeds))
        runs[label] = result["rows"]
        settings = result["settings"]
        print(f"\n## {label}: {settings['dataset']}, {settings['train_size']} train / {settings['eval_size']} test, "
              f"{settings['max_length']} tokens, seeds {settings['seeds']}\n")
        print(markdown_table([{k: r.get(k, "") for k in COLUMNS} for r in result["rows"]], floatfmt=".3g"))
    first, second = list(runs.values())[:2]
    print("\n## Time ratios (per-round compute, median over rounds), run 1 vs run 2\n")
    rows = []
    for a, b in zip(first, second):
        if "note" in a or "note" in b:
            continue
        rows.append({"variant": a["variant"], "run 1": a["time ratio"], "run 2": b["time ratio"],
                     "relative difference": b["time ratio"] / a["time ratio"] - 1})
    print(markdown_table(rows, floatfmt=".3f"))
    worst = max(abs(r["relative difference"]) for r in rows)
    print(f"\nlargest relative difference: {worst:.1%} ({'within' if worst <= 0.10 else 'OUTSIDE'} 10 %)")
    stories = {label: story(r) for label, r in runs.items()}
    print("\n## The story each run tells (memory, time, accuracy vs noise)\n")
    variants = list(next(iter(stories.values())))
    print(markdown_table([{"variant": v, **{label: ", ".join(s.get(v, ())) for label, s in stories.items()}}
                          for v in variants]))
    same = all(s == list(stories.values())[0] for s in stories.values())
    print(f"\nsame qualitative story in all runs: {'yes' if same else 'no'}")


if __name__ == "__main__":
    main()
