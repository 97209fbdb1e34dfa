"""Put the work columns (padded and non-padding tokens, matmul FLOPs) and MFU, padded and useful, into a
recorded bench that predates them, from its training batches rebuilt with the same data, tokenizer and seeds.

A recorded bench computed its MFU as 6 · parameters · tokens; this recomputes every round's MFU from the
model's matrix multiplies (`bertmem.experiments.cost`) over the round's own time and peak. The bench's
timings, peaks and accuracies are left as they were measured.

Usage: python scripts/add_work.py src/bertmem/recorded/bench-cpu.json
       python scripts/add_work.py src/bertmem/recorded/gpu-nvidia-h200.json --model bert-base-uncased \
           --key bench --key "bench, cuDNN attention off"
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

import json  # noqa: E402
import importlib.metadata  # noqa: E402
import tempfile  # noqa: E402

from bertmem.book.bench_info import write_bench  # noqa: E402
from bertmem.experiments.bench import BenchConfig, add_work, variant_shape, write_json_atomic  # noqa: E402
from bertmem.model.loading import load_tokenizer  # noqa: E402

MINILM = "sentence-transformers/all-MiniLM-L6-v2"  # the uncased WordPiece vocabulary bert-base-uncased shares


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="a bench.json, or a GPU run holding benches under --key")
    parser.add_argument("--key", action="append", help="the bench inside the file (default: the file itself)")
    parser.add_argument("--model", help="the model whose configuration gives the matmul shape (default: the "
                        "bench's model_id)")
    parser.add_argument("--tokenizer", default=MINILM, help=f"tokenizer to rebuild the batches (default {MINILM})")
    args = parser.parse_args(argv)
    whole = json.loads(args.path.read_text())
    tokenizer = load_tokenizer(args.tokenizer)
    version = importlib.metadata.version("bertmem")
    source = (f"tokens, FLOPs and MFU from the training batches rebuilt with bertmem {version} "
              f"(scripts/add_work.py, tokenizer {args.tokenizer}); timings and peaks as measured")
    for key in args.key or [None]:
        result = whole if key is None else whole[key]
        settings = result["settings"]
        bench = BenchConfig(model_id=args.model or settings["model_id"])
        labels = 2  # the recorded benches are binary sentiment
        shapes = {v: variant_shape(bench, v, labels) for v in settings["variants"]}
        add_work(result, tokenizer, shapes, source)
        for row in result["rows"]:
            if "MFU" in row:
                print(f"{key or args.path.name}: {row['variant']}: {row['padded tokens per epoch']:,.0f} padded "
                      f"and {row['tokens per epoch']:,.0f} own tokens per epoch; MFU {row['MFU']:.1%}, useful "
                      f"{row['useful MFU']:.1%}")
    write_json_atomic(args.path, whole)
    if not args.key:  # a bench file: its markdown table beside it, as `bertmem bench` writes it
        with tempfile.TemporaryDirectory() as folder:
            args.path.with_suffix(".md").write_text(write_bench(whole, folder).read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
