"""Dynamic padding on a GPU: what a micro-batch costs the first time its length appears, and after (A3).

Chapter 5's full recipe pads each micro-batch to its own longest text, so a run meets many sequence lengths. This
times one forward + backward of a randomly initialised bert-base classifier (micro-batch 8, autocast in the
card's half precision) over a list of lengths twice: the first pass meets each length for the first time, the
second has seen them all. It does so with PyTorch's default choice of attention kernels and with cuDNN's attention
switched off, each setting on its own lengths (drawn without replacement from 64-511, so no setting meets a length
another one has already met in this process), and once more padded to 512 tokens (one shape), so the table says
whether the first meeting with a length costs extra, and whether it does so without cuDNN's attention.

`--draw shared` draws as the run recorded in appendix A3 did (before the draws were made disjoint): 48 draws from
64-511, the smallest distinct ones kept (82-285 for 24 lengths), one list met by both dynamic settings in turn, so
the second meets lengths the first has already met.

Run: python benchmarks/sdpa_shapes.py [--lengths 24] [--draw disjoint|shared] [--json FILE]
     (a CUDA GPU; about a minute on an H200)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from bertmem.core.devices import cuda_available, device_name, synchronize  # noqa: E402
from bertmem.experiments.gpu_calibration import BASE, random_classifier  # noqa: E402
from bertmem.loop.precision import autocast_context, choose_precision  # noqa: E402
from bertmem.memory.planner import random_batch  # noqa: E402

WITHOUT_CUDNN = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def step_seconds(model, batch: dict, precision: str, device: torch.device) -> float:
    """One forward + backward, timed to the GPU's end."""
    synchronize(device)
    start = time.perf_counter()
    with autocast_context(precision, device.type):
        loss = model(**batch).loss
    loss.backward()
    synchronize(device)
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def two_passes(model, lengths: list[int], precision: str, device: torch.device, kernels) -> dict:
    """Median step time over the lengths on first meeting, then again with every length seen."""
    batches = [{k: v.to(device) for k, v in random_batch(model, 8, n, seed=n).items()} for n in lengths]
    with kernels():
        first = [step_seconds(model, b, precision, device) for b in batches]
        again = [step_seconds(model, b, precision, device) for b in batches]
    return {"first pass median (ms)": 1e3 * statistics.median(first),
            "first pass total (s)": sum(first), "second pass median (ms)": 1e3 * statistics.median(again),
            "second pass total (s)": sum(again), "distinct lengths": len(set(lengths))}


DRAWS = ("disjoint", "shared")


def drawn_lengths(count: int, draw: str) -> dict[str, list[int]]:
    """The lengths (64-511) each dynamic setting meets: disjoint draws, or one shared list (A3's recorded run)."""
    generator = torch.Generator().manual_seed(0)
    if draw == "shared":  # the recorded run's draw, kept so its table can be reproduced
        shared = sorted(set(torch.randint(64, 512, (count * 2,), generator=generator).tolist()))[:count]
        return {"default": shared, "off": shared}
    drawn = (64 + torch.randperm(448, generator=generator)[:2 * count]).tolist()  # all distinct
    return {"default": sorted(drawn[:count]), "off": sorted(drawn[count:])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, default=24, help="distinct lengths to meet")
    parser.add_argument("--json", help="write the rows here as well")
    parser.add_argument("--device", default="cuda", help="cpu: a check of the script itself")
    parser.add_argument("--draw", choices=DRAWS, default="disjoint",
                        help="disjoint: each dynamic setting its own lengths; shared: one list for both, as the "
                             "run recorded in A3 drew them")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not cuda_available():
        print("needs a CUDA GPU (--device cpu checks the script)", file=sys.stderr)
        return 2
    device = torch.device(args.device)
    precision = choose_precision("auto", device.type, verbose=False).precision
    lengths = drawn_lengths(args.lengths, args.draw)
    rows = {}
    # a warm-up at a length no measured pass uses: CUDA's and cuBLAS's own start-up is not counted
    settings = [("default kernels, dynamic padding", contextlib.nullcontext, lengths["default"]),
                ("cuDNN attention off, dynamic padding", lambda: sdpa_kernel(WITHOUT_CUDNN), lengths["off"]),
                ("default kernels, padded to 512", contextlib.nullcontext, [512] * args.lengths)]
    model = random_classifier(BASE, "sdpa").to(device).train()
    step_seconds(model, {k: v.to(device) for k, v in random_batch(model, 8, 40).items()}, precision, device)
    for name, kernels, these in settings:
        model = random_classifier(BASE, "sdpa").to(device).train()  # a fresh model: no state carried over
        rows[name] = two_passes(model, these, precision, device, kernels)
        print(name, json.dumps({k: round(v, 3) for k, v in rows[name].items()}), flush=True)
    result = {"gpu": device_name(device), "torch": torch.__version__, "precision": precision,
              "cudnn sdpa enabled by default": torch.backends.cuda.cudnn_sdp_enabled(), "lengths": lengths,
              "draw": args.draw, "rows": rows}
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
