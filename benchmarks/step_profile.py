"""A step profile you can read (chapter 5, A3): N steady micro-steps of a fine-tune, profiled with
torch.profiler — device busy share, kernels per micro-step, distinct shapes met, time outside forward/backward.

Runs anywhere: on a CPU "kernels" are aten operators and there is no device busy share; on CUDA the GPU's kernels.
Compare dynamic padding with buckets (`--pad-to-multiple-of 64`), or micro-batch 8 with 32, on your card.

Usage: python benchmarks/step_profile.py [--model ID] [--micro-batch 8] [--max-length 512] [--steps 12]
           [--pad-to-multiple-of 64] [--precision auto] [--attention sdpa] [--device cuda]
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch  # noqa: E402

from bertmem.data.loaders import DataConfig, build_loaders, load_frames  # noqa: E402
from bertmem.experiments.run import build_model  # noqa: E402
from bertmem.experiments.step_profile import profile_steps  # noqa: E402
from bertmem.loop.config import RunConfig  # noqa: E402
from bertmem.loop.precision import choose_precision  # noqa: E402
from bertmem.profiles import get_profile  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    profile = get_profile()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=profile.model_id)
    parser.add_argument("--dataset", default=profile.dataset)
    parser.add_argument("--micro-batch", type=int, default=8)
    parser.add_argument("--max-length", type=int, default=profile.max_length)
    parser.add_argument("--steps", type=int, default=12, help="profiled micro-steps, after 2 of warm-up")
    parser.add_argument("--pad-to-multiple-of", type=int, default=None)
    parser.add_argument("--precision", default="auto")
    parser.add_argument("--attention", default="sdpa", choices=("eager", "sdpa"))
    parser.add_argument("--device", default=profile.device)
    args = parser.parse_args(argv)
    run = RunConfig(model_id=args.model, attention=args.attention, device=args.device, progress=False)
    data = DataConfig(dataset=args.dataset, train_size=args.micro_batch * (args.steps + 2), eval_size=2,
                      max_length=args.max_length, micro_batch=args.micro_batch,
                      pad_to_multiple_of=args.pad_to_multiple_of)
    frames = load_frames(data)
    model, tokenizer = build_model(run, frames[0].attrs["label_names"], data.max_length)
    device = torch.device(args.device)
    model.to(device)
    batches = list(itertools.islice(build_loaders(data, tokenizer, frames).train, args.steps + 2))
    precision = choose_precision(args.precision, device.type, verbose=False).precision
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)
    result = profile_steps(model, batches, optimizer, precision, warmup=2)
    print(f"{args.model} on {device.type}, micro-batch {args.micro_batch}, {precision}, {args.attention}, "
          f"padding {'to multiples of ' + str(args.pad_to_multiple_of) if args.pad_to_multiple_of else 'dynamic'}")
    print("\n".join(result.lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
