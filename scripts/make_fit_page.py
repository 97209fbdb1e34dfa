"""Generate the "Will it fit?" page's data (book/_static/will_it_fit_data.js) from the planner, and the package's
stored lines (src/bertmem/recorded/fit-lines.json, what `bertmem plan` answers from) with it.

    python scripts/make_fit_page.py [--workers 2] [--models ID ...] [--lengths 128 512 ...] [--output PATH]
    python scripts/make_fit_page.py --constants-only   # cards, constants, time defaults, validation; lines kept
    python scripts/make_fit_page.py --fresh            # estimate everything, reusing nothing from the file

Prints the number of configurations, the file's size and the wall time. Two estimates per configuration and
member under FakeTensorMode (nothing allocated), three where micro-batch 1 is off the lines (ModernBERT's eager
attention); a LoRA or frozen-layers family estimates three or four members
(`bertmem.book.fit_page.affine_family`). Estimates the file at --output already holds, made with the same torch
and transformers, are reused unless --fresh.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # every model's configuration is vendored

from bertmem.book.fit_page import (  # noqa: E402
    FIT_LENGTHS,
    grid,
    page_constants,
    page_data,
    read_page_data,
    validation_summary,
    reusable,
    write_page_data,
    write_stored_lines,
)
from bertmem.memory.stored import LINES_FILE  # noqa: E402
from bertmem.model.known import KNOWN_MODELS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
PACKAGE_LINES = ROOT / "src" / "bertmem" / "recorded" / LINES_FILE


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--models", nargs="+", default=list(KNOWN_MODELS), choices=list(KNOWN_MODELS))
    parser.add_argument("--lengths", nargs="+", type=int, default=list(FIT_LENGTHS))
    parser.add_argument("--output", type=Path, default=ROOT / "book" / "_static" / "will_it_fit_data.js")
    parser.add_argument("--lines-output", type=Path, default=None,
                        help="the package's stored lines, written from the same data (default: the package's "
                             f"{LINES_FILE} where every model and length was estimated for the default --output)")
    parser.add_argument("--no-validation", action="store_true", help="skip the published-readings summary")
    parser.add_argument("--fresh", action="store_true", help="reuse no estimate from the file at --output")
    parser.add_argument("--constants-only", action="store_true",
                        help="refresh only what the estimated lines do not hold (cards, constants, time defaults, "
                             "and the validation note unless --no-validation)")
    args = parser.parse_args(argv)
    whole = (args.output == parser.get_default("output") and args.models == list(KNOWN_MODELS)
             and args.lengths == list(FIT_LENGTHS))
    args.lines_output = args.lines_output or (PACKAGE_LINES if whole else None)  # a part never replaces them
    if args.constants_only:
        data = {**read_page_data(args.output), **page_constants()}
        if not args.no_validation:
            data["validation"] = validation_summary()
        size = write_page_data(args.output, data)
        lines = write_stored_lines(args.lines_output, data) if args.lines_output else 0
        print(f"refreshed the constants of {args.output.name}: {size / 1e6:.2f} MB"
              + (f"; {args.lines_output.name}: {lines / 1e6:.2f} MB" if lines else ""))
        return 0
    start = time.perf_counter()
    configs = grid(args.models, args.lengths)
    previous = None if args.fresh or not args.output.exists() else read_page_data(args.output)
    reused = sum(map(len, reusable(previous).values()))
    print(f"{len(configs)} configurations, {args.workers} worker(s), {reused} estimated members reused"
          f"{' from ' + args.output.name if reused else ''}", flush=True)
    data = page_data(args.models, args.lengths, workers=args.workers, validation=not args.no_validation,
                     previous=previous)
    size = write_page_data(args.output, data)
    if args.lines_output:
        write_stored_lines(args.lines_output, data)
    minutes = (time.perf_counter() - start) / 60
    print(f"wrote {args.output.relative_to(ROOT) if args.output.is_relative_to(ROOT) else args.output}: "
          f"{size / 1e6:.2f} MB, {len(data['models'])} models, {len(data['cards'])} cards, "
          f"{len(data['peaks'])} configurations, in {minutes:.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main())
