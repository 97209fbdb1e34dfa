"""The time per epoch estimate against every training time the book holds (the "Will it fit?" page, #57).

`bertmem plan` and the page estimate an epoch as micro-steps of the larger of 6 · parameters · tokens over the
card's training rate and A3's per-step floor (`bertmem.memory.speed.epoch_estimate`). This prints, for each
measured or published training run the book holds, the estimate for the same card, precision, micro-batch and
padded tokens beside the measured time, and the rate the run reached. No GPU needed: the times are recorded.

Usage: python benchmarks/epoch_estimates.py [--markdown]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from bertmem.book.time_check import time_check  # noqa: E402

COLUMNS = ("source", "card", "step", "estimated (s)", "measured (s)", "estimated / measured", "bound", "rate",
           "reached (TFLOP/s, 6PT)")


def cell(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="a Markdown table (default: aligned text)")
    args = parser.parse_args(argv)
    rows = time_check()
    table = [[cell(row[c]) for c in COLUMNS] for row in rows]
    if args.markdown:
        print("| " + " | ".join(COLUMNS) + " |\n|" + "---|" * len(COLUMNS))
        print("\n".join("| " + " | ".join(r) + " |" for r in table))
    else:
        widths = [max(len(c), *(len(r[i]) for r in table)) for i, c in enumerate(COLUMNS)]
        print("  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths)))
        print("\n".join("  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in table))
    ratios = [row["estimated / measured"] for row in rows]
    print(f"\n{len(rows)} runs: estimate / measured from {min(ratios):.2f} to {max(ratios):.2f}, "
          f"median {statistics.median(ratios):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
