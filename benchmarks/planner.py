"""The planner against real CPU steps (activations and peak within 5 %), against GPU memory that others measured
and published (the allocator margin fitted on some rows, the rest held out), its answers for three GPUs, and the
time model against published throughputs (chapters 1 and 5).

Run: .venv/bin/python benchmarks/planner.py   (or `make bench-planner`)
"""

import itertools
import time

from bertmem.book.plots import markdown_table
from bertmem.book.published import (
    SOURCES,
    comparison,
    fit_margin,
    published_rows,
    tensor_peak_mib,
    throughput_comparison,
)
from bertmem.memory.cards import parse_memory
from bertmem.memory.estimate import model_config
from bertmem.memory.planner import PlanRequest, plan_micro_batch, planner_vs_measured
from bertmem.model.loading import MINILM_ID, classifier_from_config, load_classifier, tiny_bert_config


def validation_rows() -> list[dict]:
    """16 + 4 configurations: a small BERT (random weights) and MiniLM (pretrained), CPU kernels."""
    small = tiny_bert_config(vocab_size=30522, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                             intermediate_size=1024, max_position_embeddings=512, attention_probs_dropout_prob=0.1)
    rows = []
    grid = itertools.product(((8, 128), (4, 256)), ("fp32", "bf16"), ("eager", "sdpa"), (False, True))
    for (batch, seq), precision, attention, ckpt in grid:
        model = classifier_from_config(small, attention)
        rows.append({"model": "small BERT", **planner_vs_measured(small, model, batch, seq, precision, attention,
                                                                   ckpt)})
    for precision, attention, ckpt in (("fp32", "sdpa", False), ("bf16", "sdpa", False), ("fp32", "eager", True),
                                       ("bf16", "eager", True)):
        model = load_classifier(MINILM_ID, 2, attention)
        rows.append({"model": "MiniLM-L6", **planner_vs_measured(model_config(MINILM_ID), model, 8, 128, precision,
                                                                  attention, ckpt)})
    for row in rows:
        row["activation error"] = f"{row['activation error']:+.2%}"
        row["peak error"] = f"{row['peak error']:+.2%}"
    return rows


def card_rows() -> list[dict]:
    """bert-base at 512 tokens, effective batch 32: T4 (fp16), L4 and A100 (bf16), with and without checkpointing."""
    rows = []
    for card, memory, precision in (("T4 16 GB", "15GiB", "fp16"), ("L4 24 GB", "22GiB", "bf16"),
                                    ("A100 40 GB", "39GiB", "bf16")):
        for ckpt in (False, True):
            start = time.perf_counter()
            plan = plan_micro_batch(PlanRequest(model_id="bert-base-uncased", max_length=512, precision=precision,
                                                memory_bytes=parse_memory(memory), effective_batch=32,
                                                gradient_checkpointing=ckpt), fresh=True)  # timed: an estimate
            rows.append({"card (usable memory)": f"{card} ({memory})", "precision": precision,
                         "checkpointing": "yes" if ckpt else "no", "largest micro-batch": plan.largest_fitting_batch,
                         "plan": f"{plan.micro_batch} × {plan.accumulation_steps}",
                         "estimated peak (GiB)": plan.estimated_peak_bytes / 2**30, "peak during": plan.peak_phase,
                         "planner time (s)": time.perf_counter() - start})
    return rows


def published_sections() -> None:
    """Every published row in its own terms; the margin refitted here must equal the planner's."""
    from bertmem.memory.planner import ALLOCATOR_MARGIN

    rows = published_rows(("fit", "held-out", "check", "other-framework"))
    peaks = {row: tensor_peak_mib(row) for row in rows}
    margin = fit_margin([(row, peaks[row]) for row in rows if row.role == "fit"])
    table = comparison(rows, margin, peaks)
    print(f"\n## Against published GPU measurements: allocator margin fitted on the fit rows = {margin:.3f} "
          f"(the planner uses {ALLOCATOR_MARGIN:.3f})\n")
    print(markdown_table([r for r in table if r["role"] != "other-framework"], floatfmt=".0f"))
    ratios = [float(r["planner / published"]) for r in table if r["role"] in ("fit", "held-out")]
    print(f"\nratios {min(ratios):.2f} to {max(ratios):.2f}; checks that disagree: "
          f"{[r['step'] for r in table if r['role'] == 'check' and r['planner / published'] != 'agrees']}")
    print("\n## TensorFlow rows (another framework's memory: shown, not a target)\n")
    print(markdown_table([r for r in table if r["role"] == "other-framework"], floatfmt=".0f"))
    excluded = published_rows(("excluded",))
    print(f"\n{len(excluded)} rows left out, each with its reason in recorded/published_gpu_memory.csv: "
          + "; ".join(sorted({f"{r.source}: {r.note}" for r in excluded})))
    print("\n## The time model (matmul FLOPs at the rate the chapter minutes use: a T4's published rate, "
          "else 30 % of the datasheet peak) against published throughputs\n")
    print(markdown_table(throughput_comparison(), floatfmt=".2f"))
    print("\nSources:\n" + "\n".join(f"- {key}: {title}, {url}" for key, (title, url) in SOURCES.items()))


if __name__ == "__main__":
    print("## Planner vs a real CPU step (steady state, AdamW; CPU kernels)\n")
    print(markdown_table(validation_rows(), floatfmt=".1f"))
    print("\n## bert-base-uncased, 512 tokens, effective batch 32, SDPA (estimated for CUDA kernels)\n")
    print(markdown_table(card_rows(), floatfmt=".2f"))
    published_sections()
