"""Print the FakeTensor estimates for bert-base at 512/1024 tokens and the time each took (chapter 1), and the
step's peak over its timeline against PyTorch's MemTracker, with and without checkpointing.

Run: .venv/bin/python benchmarks/estimator.py   (or `make bench-estimator`)
"""

import resource
import time

from bertmem.book.plots import markdown_table
from bertmem.memory.estimate import estimate_step_memory, model_config, tracker_step_peak


def main() -> None:
    """One row per (sequence, batch, attention, precision) for bert-base, plus bert-large at 32 × 512 (CUDA)."""
    config = model_config("bert-base-uncased")
    config.max_position_embeddings = 1024  # extended (untrained) positions for the 1024-token rows
    rows = []
    for seq in (512, 1024):
        for batch in (8, 32):
            for attention in ("eager", "sdpa"):
                for precision in ("fp32", "bf16"):
                    start = time.perf_counter()
                    r = estimate_step_memory(config, batch, seq, precision=precision, attention=attention)
                    rows.append({"seq": seq, "batch": batch, "attention": attention, "precision": precision,
                                 "activations (GiB)": r.activations / 2**30, "total (GiB)": r.total / 2**30,
                                 "time (s)": time.perf_counter() - start})
    base_fixed = (r.parameters + r.gradients + r.optimizer_state) / 2**30
    for attention in ("eager", "sdpa"):
        start = time.perf_counter()
        r = estimate_step_memory("bert-large-uncased", 32, 512, attention=attention)
        rows.append({"seq": 512, "batch": 32, "attention": f"{attention} (bert-large)", "precision": "fp32",
                     "activations (GiB)": r.activations / 2**30, "total (GiB)": r.total / 2**30,
                     "time (s)": time.perf_counter() - start})
    print(markdown_table(rows, floatfmt=".2f"))
    print(f"max RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB; "
          f"bert-base weights+grads+AdamW: {base_fixed:.2f} GiB (config with 1024 positions)")


def timeline_rows() -> list[dict]:
    """bert-base, fp32 + AdamW (steady state): the timeline's peak, when it happens, the sum, and MemTracker."""
    rows = []
    for device in ("cpu", "cuda"):
        for attention, ckpt, (batch, seq) in (("eager", False, (8, 512)), ("eager", False, (32, 128)),
                                              ("eager", True, (8, 512)), ("eager", True, (32, 128)),
                                              ("sdpa", False, (8, 512)), ("sdpa", True, (8, 512))):
            kw = dict(attention=attention, gradient_checkpointing=ckpt, attention_dropout=0.1, device=device)
            r = estimate_step_memory("bert-base-uncased", batch, seq, **kw)
            tracked = tracker_step_peak("bert-base-uncased", batch, seq, **kw)
            at = r.peak_breakdown
            rows.append({"kernels": device, "attention": attention, "checkpointing": "yes" if ckpt else "no",
                         "batch × seq": f"{batch} × {seq}", "peak (MiB)": r.step_peak / 2**20,
                         "peak during": r.peak_phase, "sum (MiB)": r.total / 2**20,
                         "sum vs peak": f"{r.total / r.step_peak - 1:+.1%}", "MemTracker (MiB)": tracked / 2**20,
                         "error": f"{r.step_peak / tracked - 1:+.2%}",
                         "at the peak: activations / gradients / temporaries (MiB)":
                             f"{at['saved activations'] / 2**20:.0f} / {at['gradients'] / 2**20:.0f} / "
                             f"{at['temporaries'] / 2**20:.0f}"})
    return rows


if __name__ == "__main__":
    main()
    print("\n## The peak over the step's timeline vs the sum of the categories (bert-base, fp32, AdamW, "
          "attention dropout 0.1)\n")
    print(markdown_table(timeline_rows(), floatfmt=".0f"))
