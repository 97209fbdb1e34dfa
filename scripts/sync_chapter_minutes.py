"""Write the introduction's table of minutes per chapter: measured on the CPU, estimated on GPUs.

The CPU column is read from the committed notebooks' execution timestamps (the CPU profile on the machine that
executed them); the GPU columns are `bertmem.book.chapters.chapter_minutes` for the GPU profile (and the full profile
on an A100), FLOP-count estimates. The CPU column also goes to the package (recorded/cpu-profile-minutes.json), where
each setup cell reads its chapter's minutes "here". Run after re-executing notebooks or changing chapter sizes:

    python scripts/sync_chapter_minutes.py      (tests/test_workload.py fails while book/intro.md disagrees)

Each chapter's CPU-side minutes (what a GPU run spends on imports, estimates, demonstrations and tokenizing) are
the wall times of the GPU profile's dry run; record a new dry run with

    python scripts/sync_chapter_minutes.py --cpu-work _build/gpu-profile-dry-run/dry-run.json
"""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INTRO = ROOT / "book" / "intro.md"
START, END = "<!-- chapter-minutes:start -->", "<!-- chapter-minutes:end -->"


def measured_minutes(path: Path) -> float | None:
    """Wall time of a committed notebook's execution: first cell started to last cell finished."""
    starts, ends = [], []
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        timing = cell.get("metadata", {}).get("execution", {})
        if "iopub.execute_input" in timing and "shell.execute_reply" in timing:
            starts.append(datetime.fromisoformat(timing["iopub.execute_input"].replace("Z", "+00:00")))
            ends.append(datetime.fromisoformat(timing["shell.execute_reply"].replace("Z", "+00:00")))
    return (max(ends) - min(starts)).total_seconds() / 60 if starts else None


def title(path: Path) -> str:
    """The notebook's first heading, without its number."""
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        match = re.search(r"^# (.+)$", "".join(cell["source"]), flags=re.MULTILINE)
        if cell["cell_type"] == "markdown" and match:
            return match.group(1).strip()
    return path.stem


def approx_minutes(minutes: float) -> str:
    """'≈ 7', or '< 1' where the estimate rounds to no minute at all."""
    return f"≈ {minutes:.0f}" if minutes >= 0.5 else "< 1"


def non_embedding_parameters(model_id: str) -> int:
    """N in Kaplan et al. (2020)'s C ≈ 6N FLOPs per token: the classifier's parameters (as `model_work` counts
    them) less its embeddings module's, built on the meta device (nothing allocated)."""
    import torch

    from bertmem.memory.estimate import model_config
    from bertmem.model.loading import classifier_from_config
    from bertmem.model.matmuls import non_embedding_parameters as outside_embeddings

    with torch.device("meta"):
        return outside_embeddings(classifier_from_config(model_config(model_id)))


def flop_note(tokens: int, counted: float, parameters: int, non_embedding: int) -> str:
    """The note's sentences on bert-base's FLOPs per training example of `tokens` tokens: the matmul count
    (`counted`) beside Kaplan et al.'s 6 · N · tokens (N the `non_embedding` parameters, all `parameters` less the
    embeddings'), worded from its ratio to the count, which is also the time estimates' fallback for an architecture
    the count does not cover (`bertmem.memory.speed.six_n_flops`)."""
    from bertmem.book.wording import percent_side

    kaplan = 6 * non_embedding * tokens
    return (f"For bert-base at {tokens} tokens the count is {counted / 1e9:.2f} GFLOP per training example. "
            f"Kaplan et al.'s 6 · N · tokens {{cite:p}}`kaplan2020scaling`, with N the {non_embedding / 1e6:.1f} M "
            f"non-embedding parameters, gives {kaplan / 1e9:.2f} GFLOP, {percent_side(kaplan / counted)} it: N "
            f"leaves out the embeddings' {(parameters - non_embedding) / 1e6:.1f} M parameters, which do no matrix "
            f"multiplies, and 6N leaves out the attention scores QKᵀ and their product with the values. The time "
            f"estimates fall back on the same 6 · non-embedding parameters · tokens for an architecture the count "
            f"does not cover (DeBERTa-v3).")


def table() -> str:
    """The markdown table between the markers of book/intro.md."""
    from bertmem.book.chapters import FIRST_RUN_MINUTES, MINUTES_CARDS, MODEL_LOAD_SECONDS, chapter_minutes
    from bertmem.book.time_check import rate_note, time_check
    from bertmem.memory.cards import CARDS
    from bertmem.memory.estimate import model_work
    from bertmem.profiles import get_profile

    gpu, full = get_profile("gpu", env={}), get_profile("full", env={})
    work = model_work(gpu.model_id)
    t4, l4, a100 = (chapter_minutes(gpu, CARDS[c]) for c in MINUTES_CARDS)
    full_a100 = chapter_minutes(full, CARDS["A100"])
    record = cpu_profile_record()["minutes"]
    lines = ["| chapter | CPU profile, 2-core CPU (measured) | GPU profile, Colab T4 | GPU profile, L4 "
             "| GPU profile, A100 | full profile, A100 |", "|---|---|---|---|---|---|"]
    totals = [0.0] * 5
    for path in sorted((ROOT / "book").glob("*.ipynb")):
        key = path.stem.split("_")[0]
        cpu = record.get(key)  # what the setup cells quote
        values = [cpu or 0.0, t4[key], l4[key], a100[key], full_a100[key]]
        totals = [a + b for a, b in zip(totals, values)]
        cells = ["—" if cpu is None else f"{cpu:.1f}"] + [approx_minutes(v) for v in values[1:]]
        lines.append(f"| {title(path)} | " + " | ".join(cells) + " |")
    lines.append("| **whole book** | " + f"{totals[0]:.1f} | " + " | ".join(f"≈ {v:.0f}" for v in totals[1:]) + " |")
    flops = flop_note(gpu.max_length, work.example_flops(gpu.max_length), work.parameters,
                      non_embedding_parameters(gpu.model_id))
    faster = [str(int(k)) if k.isdigit() else k for k in l4 if l4[k] < a100[k]]  # the assumed shares' order
    l4_card, a100_card = CARDS["L4"], CARDS["A100"]
    shares = (f"the same {l4_card.utilisation:.0%} share is" if l4_card.utilisation == a100_card.utilisation
              else f"shares of {l4_card.utilisation:.0%} and {a100_card.utilisation:.0%} are")
    t4, timed = CARDS["T4"], [CARDS[c] for c in MINUTES_CARDS]
    others = ", ".join(f"{card.name} {card.utilisation:.0%}" for card in timed if not card.measured_tflops)
    measured = ", ".join(f"{p} {v:g} TFLOP/s" for p, v in t4.measured_tflops.items())
    held = time_check()  # what each measured rate rests on, and how many held runs test it
    rests = " ".join(f"{note[:1].upper()}{note[1:]}." for note in (rate_note(t4, p, held) for p in t4.measured_tflops))
    sources = ",".join(f"{card.source}" for card in timed)
    note = (f"\nMinutes. GPU columns are estimates, not measurements: each training example costs the model's "
            f"matrix multiplies, forward and backward, as [chapter 5](05_optimized_loop.ipynb) counts them (with "
            f"each run's own LoRA adapters or frozen layers, and gradient checkpointing's second forward), and each "
            f"evaluated one its forward pass's, every example counted at the chapter's full token limit. Training "
            f"runs at the throughput published BERT-class runs reached on a T4 ({measured} in that "
            f"count; {{cite:p}}`{t4.measured_source}`), on the other cards at an assumed share of the dense "
            f"datasheet peak ({others}; {{cite:p}}`{sources}`); evaluation runs in fp32, as `evaluate` does. "
            f"{rests} "
            f"Each chapter adds its CPU-side work (imports, estimates, demonstrations, tokenizing: the GPU "
            f"profile's dry run, measured on a 2-core CPU like Colab's) and {MODEL_LOAD_SECONDS:.0f} s to load "
            f"bert-base per fine-tune and once for its own measurements. A fresh runtime adds about "
            f"{FIRST_RUN_MINUTES:.0f} minutes once, for the install cell and the downloads. {flops}")
    if faster:
        where = f"chapter{'s' * (len(faster) > 1)} {', '.join(faster)}"
        note += (f" Where the L4 comes out faster than the A100 before rounding ({where}), the order is the "
                 f"assumption's, not a measurement: {shares} applied to the two cards' fp32 peaks "
                 f"({l4_card.peak_tflops['fp32']:g} against {a100_card.peak_tflops['fp32']:g} TFLOP/s without "
                 "TF32), which count in every chapter because evaluation runs in fp32, while the L4 has about a "
                 "fifth of the A100's memory bandwidth (300 against 1,555 GB/s; "
                 f"{{cite:p}}`{l4_card.source},{a100_card.source}`).")
    return "\n".join(lines) + "\n" + note


CPU_WORK = ROOT / "src" / "bertmem" / "recorded" / "cpu-work.json"


CPU_PROFILE = ROOT / "src" / "bertmem" / "recorded" / "cpu-profile-minutes.json"


# A chapter's recorded minutes change only when its measured time moves more than this share (or 0.1 min): two
# executions of one notebook differ by a few percent, and every setup cell quotes the record its kernel read, so a
# record that followed every execution would always be one run ahead of the pages quoting it.
NOISE = 0.15


def cpu_profile_record(previous: dict[str, float] | None = None) -> dict:
    """The introduction's CPU column and the setup cells' "here" line: each notebook's minutes, one decimal, the
    `previous` record's kept where the new time is within `NOISE` of it."""
    from bertmem.book.chapters import cpu_profile_minutes  # the record as the setup cells read it

    previous = cpu_profile_minutes() if previous is None else previous
    minutes = {}
    for path in sorted((ROOT / "book").glob("*.ipynb")):
        key, measured = path.stem.split("_")[0], measured_minutes(path)
        if measured is None:
            continue
        old = previous.get(key)
        within = old is not None and abs(measured - old) <= max(0.1, NOISE * old)
        minutes[key] = old if within else round(measured, 1)
    return {"what": "CPU profile, each notebook executed on a 2-core CPU (its cells' timestamps)", "minutes": minutes}


HERE = re.compile(r"here \(cpu profile, on a CPU\): (\d+\.\d) min")


def quoted_minutes(path: Path) -> float | None:
    """The minutes a committed notebook's setup cell printed for this machine, if it printed them."""
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        for output in cell.get("outputs", []):
            found = HERE.search("".join(output.get("text", "")))
            if found:
                return float(found.group(1))
    return None


def stale_quotes(record: dict[str, float]) -> list[str]:
    """The notebooks whose setup cell quotes other minutes than the record: re-execute them (once is enough)."""
    return [path.name for path in sorted((ROOT / "book").glob("*.ipynb"))
            if quoted_minutes(path) not in (None, record.get(path.stem.split("_")[0]))]


def record_cpu_work(dry_run: Path) -> None:
    """Write each dry-run chapter's wall time (seconds) into the package's recorded/cpu-work.json (others stay)."""
    result = json.loads(dry_run.read_text(encoding="utf-8"))
    failed = [r["notebook"] for r in result["chapters"] if r.get("error")]
    if failed:
        raise SystemExit(f"{dry_run}: these notebooks failed in the dry run, so their times mean little: {failed}")
    if result.get("jobs", 1) > 1:  # two kernels sharing two cores: each notebook's time is not its own
        raise SystemExit(f"{dry_run}: ran {result['jobs']} notebooks at once; record from a run with --jobs 1")
    seconds = json.loads(CPU_WORK.read_text(encoding="utf-8"))["seconds"]  # a dry run of some chapters: theirs
    seconds.update({r["notebook"].split("_")[0]: round(r["wall_time_s"], 1) for r in result["chapters"]})
    CPU_WORK.write_text(json.dumps({"what": "GPU-profile dry run on a 2-core CPU: MiniLM, 16 examples, 64 tokens",
                                    "seconds": seconds}, indent=1) + "\n", encoding="utf-8")
    print(f"{CPU_WORK.name}: {seconds}")


def main() -> None:
    import sys

    if sys.argv[1:2] == ["--cpu-work"]:
        record_cpu_work(Path(sys.argv[2]))
    text = INTRO.read_text(encoding="utf-8")
    if START not in text or END not in text:
        raise SystemExit(f"{INTRO} has no {START} ... {END} block")
    head, rest = text.split(START, 1)
    _, tail = rest.split(END, 1)
    INTRO.write_text(f"{head}{START}\n{table()}\n{END}{tail}", encoding="utf-8")
    record = cpu_profile_record()
    recorded = json.dumps(record, indent=1) + "\n"
    if CPU_PROFILE.read_text(encoding="utf-8") != recorded:  # the package's data: a new version
        CPU_PROFILE.write_text(recorded, encoding="utf-8")
        print(f"{CPU_PROFILE.name} changed: run python scripts/release.py bump")
    stale = stale_quotes(record["minutes"])
    if stale:
        print(f"these setup cells quote other minutes than the record: re-execute {' '.join(stale)}")
    print(f"{INTRO.name}: chapter minutes updated")


if __name__ == "__main__":
    main()
