"""Hold every member of sampled LoRA and frozen-layer families of the "Will it fit?" page's data against its own
estimate: the families store a first member and a step, checked at one member when the data was made
(`bertmem.book.fit_page.affine_family`); this checks the rest.

    python scripts/check_fit_families.py [--sample 40] [--seed 0] [--workers 2] [--data PATH]

Prints the families and members checked, how many were stored as a step, and every member that differs; exits 1
if one does. About two estimates per member (0.3-1.4 s each on this 2-core machine).
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # every model's configuration is vendored

from bertmem.book.fit_page import (  # noqa: E402
    FitConfig,
    pool_map,
    config_lines,
    expand,
    read_page_data,
)

ROOT = Path(__file__).resolve().parents[1]


def check_member(job: tuple[str, int, dict]) -> tuple[str, int, bool]:
    """Whether one member rebuilt from the data equals its own estimate."""
    key, value, stored = job
    model, length, precision, attention, checkpointing, adaptation = key.split("|")
    config = FitConfig(model, int(length), precision, attention, checkpointing == "1", adaptation)
    return key, value, stored == config_lines(config, value)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=40, help="families to check, drawn from those on a step")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument("--data", type=Path, default=ROOT / "book" / "_static" / "will_it_fit_data.js")
    args = parser.parse_args(argv)
    peaks = read_page_data(args.data)["peaks"]
    families = {k: v for k, v in peaks.items() if "direct" in v}
    on_a_step = sorted(k for k, v in families.items() if any("check" in s for s in v["segments"]))
    chosen = random.Random(args.seed).sample(on_a_step, min(args.sample, len(on_a_step)))
    jobs = [(key, v, expand(families[key], v)) for key in chosen for s in families[key]["segments"] if "check" in s
            for v in range(s["low"] + 1, s["high"]) if v != s["check"]]
    start = time.perf_counter()
    results = pool_map(check_member, jobs, args.workers)
    wrong = [(key, value) for key, value, same in results if not same]
    print(f"{len(on_a_step)} of {len(families)} families stored as a step; checked {len(chosen)} of them "
          f"(seed {args.seed}): {len(jobs)} members rebuilt from a checked step (not its ends or its check), "
          f"{len(wrong)} differ from their own "
          f"estimate ({(time.perf_counter() - start) / 60:.1f} min)")
    for key, value in wrong:
        print(f"  differs: {key} member {value}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
