"""Print the FakeTensor estimates for bert-base at 512/1024 tokens and the time each took (chapter 1).

Run: .venv/bin/python benchmarks/estimator.py   (or `make bench-estimator`)
"""

import resource
import time

from bertmem.estimate import estimate_step_memory, model_config
from bertmem.plots import markdown_table


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


if __name__ == "__main__":
    main()
