"""The time per epoch estimate against the training times the book holds and can estimate ("Will it fit?", #57).

`bertmem plan` and the page estimate an epoch as micro-steps of the larger of the model's matmul FLOPs (the count
the bench's MFU uses, `bertmem.model.matmuls`) over the card's training rate and A3's per-step floor
(`bertmem.memory.speed.epoch_estimate`). This prints, for each measured or published training run the book holds,
the estimate for the same card, precision, micro-batch and padded tokens beside the measured time, and the rate the
run reached; then the published rows it leaves out and why (`bertmem.book.time_check.left_out`: the rows the table
marks excluded, and TF32, which no card's rate covers). No GPU needed: the times are recorded.

Usage: python benchmarks/epoch_estimates.py [--markdown]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from bertmem.book.plots import as_table, markdown_table  # noqa: E402
from bertmem.book.time_check import left_out, time_check, time_check_summary  # noqa: E402

COLUMNS = ("source", "card", "step", "estimated (s)", "measured (s)", "estimated / measured", "bound", "rate",
           "reached (TFLOP/s)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="a Markdown table (default: aligned text)")
    args = parser.parse_args(argv)
    rows = time_check()
    print(markdown_table(rows, COLUMNS, floatfmt=".3g") if args.markdown
          else repr(as_table(rows, COLUMNS, floatfmt=".3g")))
    summary = time_check_summary(rows)
    print(f"\n{summary['runs']} runs: estimate / measured from {summary['low']:.2f} to {summary['high']:.2f}, "
          f"median {summary['median']:.2f}")
    print(f"left out: {summary['left_out']}:")
    for row in left_out():
        why = ("no card's rate covers " + row["precision"].upper() if row["no rate"] else "marked excluded")
        print(f"  {row['source']}, {row['card']}, {row['step']}: {why} ({row['note']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
