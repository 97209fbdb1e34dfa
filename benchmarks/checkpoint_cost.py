"""What a checkpoint costs (chapter 5): the size of `checkpoint.pt` for the GPU profile's model with AdamW state,
the time `save_checkpoint` takes to write it here, and the share of a run that saves every 15 minutes.

bert-base-uncased is built from its configuration (random weights, same shapes and bytes); one optimizer step
fills AdamW's two moments. The write goes to a temporary folder on this machine's disk: Google Drive on Colab is
slower, so the table also shows the share at a few slower write speeds.

Run: .venv/bin/python benchmarks/checkpoint_cost.py [--model bert-base-uncased] [--repeats 3]
"""

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from bertmem.book.plots import markdown_table
from bertmem.core.units import MIB
from bertmem.loop.checkpoint import CHECKPOINT_NAME, capture_rng, save_checkpoint
from bertmem.memory.estimate import model_config
from bertmem.model.loading import classifier_from_config
from bertmem.profiles import get_profile

INTERVAL_MIN = get_profile("gpu", env={}).checkpoint_minutes  # the GPU profiles' --checkpoint-minutes


def filled_parts(model_id: str) -> dict:
    """The classifier, AdamW after one step (moments allocated), a schedule: what a checkpoint holds."""
    model = classifier_from_config(model_config(model_id))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    ids = torch.randint(1000, 2000, (2, 16))
    model(input_ids=ids, labels=torch.tensor([0, 1])).loss.backward()
    optimizer.step()
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    return dict(model=model, optimizer=optimizer, scheduler=scheduler)


def save_seconds(parts: dict, folder: Path, repeats: int) -> tuple[list[float], int]:
    """Wall time of each `save_checkpoint` into `folder`, and the file's size in bytes."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        save_checkpoint(folder, scaler=None, rng=capture_rng(), position={"epoch": 1, "step": 1}, history=[],
                        epochs=[], **parts)
        times.append(time.perf_counter() - start)
    return times, (folder / CHECKPOINT_NAME).stat().st_size


def main() -> None:
    """Measure the saves, print the size and the table (chapter 5)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="bert-base-uncased")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    parts = filled_parts(args.model)
    with tempfile.TemporaryDirectory() as folder:
        times, size = save_seconds(parts, Path(folder), args.repeats)
    here = statistics.median(times)
    rows = [{"where": f"{tempfile.gettempdir()} (measured)", "write speed (MiB/s)": size / MIB / here, "save (s)": here,
             f"share at {INTERVAL_MIN:g} min": here / (here + 60 * INTERVAL_MIN)}]
    for speed in (100, 50, 20):  # assumed speeds of a mounted Drive: not measured here
        seconds = size / MIB / speed
        rows.append({"where": f"assumed {speed} MiB/s", "write speed (MiB/s)": speed, "save (s)": seconds,
                     f"share at {INTERVAL_MIN:g} min": seconds / (seconds + 60 * INTERVAL_MIN)})
    print(f"{args.model}: checkpoint.pt is {size / MIB:.0f} MiB (weights and AdamW's two moments, fp32); "
          f"saves here: {', '.join(f'{t:.2f}' for t in times)} s")
    print(markdown_table(rows, floatfmt=".3g"))


if __name__ == "__main__":
    main()
