"""Words chosen from numbers: a computed sentence whose verb depends on a value takes it from here (all chapters).

A number on a page changes with the run, the machine and the library versions; the word beside it ("faster",
"shrinks", "goes further") must change with it. Each function below returns the words for one kind of comparison,
and `tests/test_wording.py` renders every one with values on both sides of its threshold.
"""

from __future__ import annotations

from typing import Sequence

BAND = 0.03  # a ratio within 3 % of 1 reads as "about the same": below the noise of one timing on a shared CPU
NO_FAST_PATH = 3.0  # a precision taking over 3× fp32's time has no fast kernels here (emulated or converted)


def compare(ratio: float, lower: str, higher: str, same: str, band: float = BAND) -> str:
    """`lower` when `ratio` is below 1 - band, `higher` above 1 + band, else `same` (all chapters)."""
    if ratio < 1 - band:
        return lower
    return higher if ratio > 1 + band else same


def pace(time_ratio: float) -> str:
    """'faster', 'slower' or 'about as fast' for a time ratio against a reference (chapters 2, 3, 8)."""
    return compare(time_ratio, "faster", "slower", "about as fast")


def size_change(ratio: float) -> str:
    """'smaller', 'larger' or 'about as large' for a memory ratio against a reference (chapters 3, 5, 8)."""
    return compare(ratio, "smaller", "larger", "about as large")


def saving(ratio: float, large_below: float = 0.7) -> str:
    """How much a lever saves, from its ratio: 'a large saving', 'a modest saving', 'no saving' (chapter 8)."""
    if ratio < large_below:
        return "a large saving"
    return compare(ratio, "a modest saving", "no saving (it costs more)", "no saving")


def plural(count: int, one: str, many: str | None = None) -> str:
    """'1 miss', '2 misses' (A1)."""
    return f"{count} {one if count == 1 else many or one + 's'}"


def accumulation_speed(split_min: float, split_max: float) -> str:
    """Chapter 2: what the micro-batch splits' throughput (× the unsplit batch's) says, with its hypothesis."""
    span = f"{split_min:.2f}–{split_max:.2f}×"
    if split_min >= 1 - BAND:
        return (f"the accumulated splits ran at {span} the throughput of one pass: no slower. A hypothesis, not "
                "tested here: even a few sequences keep this CPU's cores busy, so the fixed cost of a pass "
                "(Python, dispatch, reading the weights once) weighs little next to the arithmetic.")
    if split_max <= 1 + BAND:
        return (f"the accumulated splits ran at {span} the throughput of one pass: slower. A hypothesis, not "
                "tested here: the fixed cost of each pass (Python, dispatch, reading the weights once) is paid "
                "once per micro-batch, and smaller micro-batches leave less arithmetic to hide it.")
    return (f"the accumulated splits ran at {span} the throughput of one pass: some faster, some slower, a spread "
            "this table cannot tell from the noise of two timed windows.")


def cpu_precision_timing(fp16_x: float, bf16_x: float, auto_choice: str) -> str:
    """Chapter 3: what fp16's and bf16's time (× fp32's) on this CPU says, and what `auto` picked and why."""
    if fp16_x > NO_FAST_PATH:
        fp16 = f"fp16 takes {fp16_x:.0f}× the fp32 time: this CPU has no fast fp16 path"
    else:
        fp16 = (f"fp16 takes {fp16_x:.2f}× the fp32 time ({pace(fp16_x)}): this CPU runs fp16 at a usable speed "
                "(CPUs with AVX512-FP16 or AMX-FP16 have fp16 kernels), which `choose_precision`, refusing fp16 "
                "on every CPU, does not check for")
    bf16 = f"bf16 takes {bf16_x:.2f}× the fp32 time ({pace(bf16_x)})"
    faster = pace(bf16_x) == "faster"
    if auto_choice == "bf16":
        verdict = "and the timing agrees: bf16 is faster here" if faster else "though bf16 is not faster here"
    else:
        verdict = "though bf16 is faster here" if faster else "and the timing agrees: bf16 is not faster here"
    auto = f"`auto` picks {auto_choice} here from the CPU's reported bf16 support, not from a timing, {verdict}"
    return f"On this machine's CPU, {fp16}; {bf16}. {auto}. Time yours."


def lora_and_freezing(lora_act: float, freeze_act: float) -> dict[str, str]:
    """Chapter 8: the words for LoRA's and freezing's saved activations (ratios to full fine-tuning's)."""
    further = ("goes further on activations" if freeze_act < lora_act * (1 - BAND)
               else "saves no more activations than LoRA" if freeze_act <= lora_act * (1 + BAND)
               else "keeps more activations than LoRA")
    return {"lora saving": saving(lora_act), "freeze vs lora": further,
            "lora activations": size_change(lora_act), "freeze activations": size_change(freeze_act)}


def epoch_paces(lora_time: float, eight_bit_time: float) -> dict[str, str]:
    """Chapter 8: the pace of LoRA's and 8-bit AdamW's epoch against full fine-tuning's, each with its
    hypothesis, and whether time per epoch moves at all."""
    lora, eight_bit = pace(lora_time), pace(eight_bit_time)
    lora_why = {"faster": "; a hypothesis: it computes no weight gradients for the frozen matrices",
                "slower": "; a hypothesis: the adapters' small extra matmuls cost more here than the skipped "
                          "weight gradients save", "about as fast": ""}[lora]
    eight_bit_why = {"faster": "; only the optimizer differs", "slower": "; only the optimizer differs; a "
                     "hypothesis: dequantising and requantising its 8-bit state each step costs more than it "
                     "saves here", "about as fast": ""}[eight_bit]
    moves = "barely moves" if lora == eight_bit == "about as fast" else "moves too"
    return {"lora": lora + lora_why, "8-bit": eight_bit + eight_bit_why, "moves": moves}


def peak_change(before: float, *after: float) -> str:
    """'falls', 'rises' or 'stays' for a step peak moving from `before` to every value of `after` (chapter 8)."""
    words = {size_change(a / before) for a in after}
    if words == {"smaller"}:
        return "falls"
    return "rises" if words == {"larger"} else "changes little or moves both ways"


def misses(hits: int, total: int, missed: Sequence[str]) -> str:
    """A1: how many predictions match what their sentences say, quoting the misses, with the hypothesis."""
    line = f"{hits} of the {total} predictions match what the sentence was written to say."
    if not missed:
        return line
    quoted = ", ".join(f"“{text}”" for text in missed)
    noun = plural(len(missed), "miss", "misses").split(" ", 1)[1]
    return (f"{line} The {noun}: {quoted}; a "
            "hypothesis, not tested here: a model trained for one epoch on 800 short sentences leans on single "
            "words; check a model on sentences like your own before trusting it.")


FRACTIONS = {1 / 10: "a tenth", 1 / 5: "a fifth", 1 / 4: "a quarter", 1 / 3: "a third", 1 / 2: "half"}


def about_fraction(share: float, tolerance: float = 0.15) -> str:
    """'about a tenth' … 'about half' for a share within 15 % of a simple fraction, else a percentage (ch. 7)."""
    for value, name in FRACTIONS.items():
        if abs(share / value - 1) <= tolerance:
            return f"about {name}"
    return f"{share:.0%}"


def relative_size(ratio: float, band: float = 0.25) -> str:
    """'about the size of', 'smaller than' or 'larger than' for a ratio of two sizes (chapter 7)."""
    if ratio < 1 / (1 + band):
        return "smaller than"
    return "larger than" if ratio > 1 + band else "about the size of"


def claim_verdict(holds: bool) -> str:
    """'holds' or 'does not hold' (chapters 1, 9)."""
    return "holds" if holds else "does not hold"


def quadratic_claim(crossover_tokens: float, at: int = 512, tolerance: float = 0.15) -> str:
    """Chapter 1: whether "quadratic beyond 512" is roughly right, from where the s² term overtakes the rest."""
    if abs(crossover_tokens / at - 1) <= tolerance:
        return (f"roughly right for eager attention — the crossover happens to lie near {at} — but nothing "
                f"changes at {at} itself")
    return (f"off even for eager attention — the crossover lies at about {crossover_tokens:.0f} tokens, not "
            f"near {at} — and nothing changes at {at} itself")


def device_effect(ratio: float, where: str = "") -> str:
    """Chapter 1: what eager attention's saved bytes on this CPU against a GPU (a ratio) say about the device."""
    word = compare(ratio, "less than", "more than", "about as much as")
    lead = "The device barely matters here" if word == "about as much as" else "The device matters on its own"
    return (f"{lead}: eager attention on this CPU saves {ratio:.2f}× what it saves on a GPU{where} ({word}), so "
            "set a CPU kernel against a CPU one")


def growth(doubling: float) -> str:
    """'faster than linearly', 'about linearly' or 'slower than linearly' for the growth when a length doubles
    (chapter 9)."""
    return compare(doubling / 2, "slower than linearly", "faster than linearly", "about linearly")


def what_stops_first(longest_fit: int, positions: int = 512) -> str:
    """Chapter 9: whether a model runs out of positions or of memory first, from the longest length that fits."""
    if longest_fit > positions:
        return (f"up to there it is the {positions}-position table, not memory, that stops a longer sequence: "
                "the model lacks positions before it lacks memory")
    return f"memory, not the {positions}-position table, is what stops a longer sequence"
