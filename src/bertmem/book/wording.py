"""Words chosen from numbers: a computed sentence whose verb depends on a value takes it from here (all chapters).

A number on a page changes with the run, the machine and the library versions; the word beside it ("faster",
"shrinks", "goes further") must change with it. Each function below returns the words for one kind of comparison,
and `tests/test_wording.py` renders every one with values on both sides of its threshold.
"""

from __future__ import annotations

from typing import Mapping, Sequence

BAND = 0.03  # a ratio within 3 % of 1 reads as "about the same": below the noise of one timing on a shared CPU
NO_FAST_PATH = 3.0  # a precision taking over 3× fp32's time has no fast kernels here (emulated or converted)


def compare(ratio: float, lower: str, higher: str, same: str, band: float = BAND) -> str:
    """`lower` when `ratio` is below 1 - band, `higher` above 1 + band, else `same` (all chapters)."""
    if ratio < 1 - band:
        return lower
    return higher if ratio > 1 + band else same


def percent_side(ratio: float) -> str:
    """'9% below', '16% above' or 'within a few percent of' for a count against a reference count (the
    introduction's minutes note, A3: 6N FLOPs against the matmul count)."""
    return compare(ratio, f"{1 - ratio:.0%} below", f"{ratio - 1:.0%} above", "within a few percent of")


def pace(time_ratio: float) -> str:
    """'faster', 'slower' or 'about as fast' for a time ratio against a reference (chapters 2, 3, 8)."""
    return compare(time_ratio, "faster", "slower", "about as fast")


def pace_than(time_ratio: float) -> str:
    """'faster than', 'slower than' or 'about as fast as' for a time ratio against a reference (A3)."""
    return compare(time_ratio, "faster than", "slower than", "about as fast as")


def first_meeting(first_ms: float, seen_ms: float, first_off_ms: float, seen_off_ms: float,
                  factor: float = 1.5) -> str:
    """A3: where a step on a length met for the first time costs more than one on a length already seen (by
    `factor`), with the default attention kernels and with cuDNN's attention off."""
    default_pays, off_pays = first_ms > factor * seen_ms, first_off_ms > factor * seen_off_ms
    if default_pays and not off_pays:
        return ("With the default kernels the first meeting with a length is what costs; with cuDNN's attention "
                "off, a new length costs little more than a seen one.")
    if default_pays:
        return "The first meeting with a length costs extra with cuDNN's attention off as well: not cuDNN's alone."
    if off_pays:
        return "Here only the run with cuDNN's attention off paid extra for a length's first meeting."
    return "Here the first meeting with a length cost no more than a later one, in either setting."


def cudnn_advice(first_ms: float, seen_ms: float, first_off_ms: float, seen_off_ms: float, noise: float) -> str:
    """A3: what to do about cuDNN's attention, from the step times on new and on seen lengths with it and
    without it. `noise`: how much two passes over one and the same shape differed (relative, one repeat); a
    difference inside it is not read as one."""
    new_faster = first_off_ms * (1 + noise) < first_ms
    seen_faster = seen_off_ms * (1 + noise) < seen_ms
    band = f"the {noise:.0%} by which one shape's two passes differed here"
    if new_faster and seen_faster:
        return (f"With cuDNN's attention on, steps took {first_ms / first_off_ms:.1f}× as long on new lengths "
                f"and, by less, {seen_ms / seen_off_ms - 1:.0%} longer on lengths already seen (more than {band}; "
                "one comparison in one process): with this card and torch version, switch it off "
                "(`torch.backends.cuda.enable_cudnn_sdp(False)`).")
    if new_faster:
        return (f"With cuDNN's attention off, new lengths were faster; on lengths already seen the difference "
                f"({seen_off_ms:.0f} against {seen_ms:.0f} ms) is inside {band}. What costs is the first "
                "meeting with a length: switch cuDNN's attention off for runs that meet many lengths, or pad to a "
                "multiple of 64 tokens so that a run meets at most 8 lengths up to 512 (fewer first meetings; not "
                "measured here).")
    return "Switching cuDNN's attention off did not make new lengths faster here: keep the default kernels."


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


def accumulation_advice(split_min: float, split_max: float) -> str:
    """Chapter 2: what accumulation cost in speed here (from the splits' throughput), and the advice that follows."""
    if split_min >= 1 - BAND:
        return ("Here accumulation bought memory at no cost in speed; where it costs speed (a GPU can be such a "
                "place), the largest micro-batch that fits is the faster choice.")
    if split_max <= 1 + BAND:
        return "Here accumulation bought memory at a cost in speed: use the largest micro-batch that fits."
    return ("Whether accumulation cost speed here, this table cannot tell; on a GPU, measure it, and prefer the "
            "largest micro-batch that fits.")


def micro_batch_cost(ratios: list[float], small: str, planned: str) -> str:
    """Chapter 5: what the smaller micro-batch cost against the planned one, from each round's training-time ratio
    (small / planned; each round ran both on the same examples): a verdict only where every round agrees."""
    span = (f"{min(ratios):.2f}–{max(ratios):.2f}×" if len(ratios) > 1 else f"{ratios[0]:.2f}×")
    rounds = plural(len(ratios), "round")
    every = f"in every one of {rounds}" if len(ratios) > 1 else "in its one round"
    if min(ratios) > 1 + BAND:
        return f"micro-batch {small} took {span} the training time of {planned} {every}: slower"
    if max(ratios) < 1 - BAND:
        return f"micro-batch {small} took {span} the training time of {planned} {every}: faster"
    if min(ratios) >= 1 - BAND and max(ratios) <= 1 + BAND:
        return (f"micro-batch {small} took {span} the training time of {planned} over {rounds}: about as fast, "
                f"within {BAND:.0%}")
    return (f"micro-batch {small} took {span} the training time of {planned} over {rounds}: not every round was "
            f"more than {BAND:.0%} slower, nor every round {BAND:.0%} faster, so this run cannot say which is faster")


def cpu_precision_timing(fp16_x: float, bf16_x: float, auto_choice: str) -> str:
    """Chapter 3: what fp16's and bf16's time (× fp32's) on this CPU says, and what `auto` picked and why."""
    if fp16_x > NO_FAST_PATH:
        fp16 = f"fp16 takes {fp16_x:.0f}× the fp32 time: this CPU has no fast fp16 path"
    else:
        fp16 = (f"fp16 takes {fp16_x:.2f}× the fp32 time ({pace(fp16_x)}): this CPU runs fp16 at a usable speed "
                "(CPUs with AVX512-FP16 or AMX-FP16 have fp16 kernels), which `choose_precision`, refusing fp16 "
                "on every CPU, does not check for")
    bf16 = (f"bf16 takes {bf16_x:.0f}× the fp32 time: this CPU has no fast bf16 path (PyTorch emulates it)"
            if bf16_x > NO_FAST_PATH else f"bf16 takes {bf16_x:.2f}× the fp32 time ({pace(bf16_x)})")
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
    word = compare(ratio, "less", "more", "about as much")
    lead = "The device barely matters here" if word == "about as much" else "The device matters on its own"
    return (f"{lead}: eager attention on this CPU saves {ratio:.2f}× what it saves on a GPU{where} ({word}), so "
            "set a CPU kernel against a CPU one")


def growth(ratio: float, linear: float = 2.0) -> str:
    """'faster than linearly', 'about linearly' or 'slower than linearly' for a cost that grew `ratio`× where a
    linear one grows `linear`× (2 when a length doubles from zero) (chapter 9)."""
    return compare(ratio / linear, "slower than linearly", "faster than linearly", "about linearly")


def what_stops_first(longest_fit: int, positions: int = 512) -> str:
    """Chapter 9: whether a model runs out of positions or of memory first, from the longest length that fits."""
    if longest_fit > positions:
        return (f"up to there it is the {positions}-position table, not memory, that stops a longer sequence: "
                "the model lacks positions before it lacks memory")
    return f"memory, not the {positions}-position table, is what stops a longer sequence"


def fit_verdict(needed: float, available: float) -> str:
    """'fits' or 'does not fit' for the memory a step needs against what a card has (chapter 1)."""
    return "fits" if needed <= available else "does not fit"


def math_path_effect(ratio: float, band: float = 0.02) -> str:
    """Chapter 1: what the CPU's SDPA math path saves for backward against eager attention on the same CPU."""
    word = compare(ratio, "less", "more", "as much", band=band)
    if word == "as much":
        return f"saves as much as eager attention on the same CPU ({ratio:.2f}×)"
    return f"saves {ratio:.2f}× what eager attention saves on the same CPU ({word})"


def highest(means: Mapping[str, float], tie: float = 1e-9) -> str:
    """The name with the highest mean, or every name sharing it, marked tied (chapters 4, 9)."""
    top = max(means.values())
    best = [name for name, mean in means.items() if top - mean <= tie]
    return best[0] if len(best) == 1 else " and ".join(best) + " (tied)"


def same_losses(largest_difference: float, rounding: float = 1e-5) -> str:
    """Chapter 5: whether two runs' losses agree up to floating-point rounding, from their largest difference."""
    if largest_difference == 0:
        return "identical losses (largest difference 0)"
    if largest_difference <= rounding:
        return f"the same losses up to rounding (largest difference {largest_difference:.1e})"
    return f"losses that differ by up to {largest_difference:.1e}, more than rounding"


def gradient_match(relative_difference: float, rounding: float = 1e-4) -> str:
    """Chapter 2: an accumulated gradient against the one-batch gradient, from their relative difference."""
    # fp32 sums over ~1e5 terms in another order differ by ~sqrt(n)·eps ≈ 4e-5 at worst; seen here: 5e-7.
    # The post's rule misses by ~1e-1, so the bound decides with three orders of magnitude to spare.
    return "equal (fp32 round-off)" if relative_difference < rounding else "DIFFERENT"


def norm_inflation(ratio: float, steps: int, tolerance: float = 1e-3) -> str:
    """Chapter 2: what the Trainer's logged gradient norm under accumulation (× the unsplit batch's) shows."""
    if abs(ratio - 1) <= tolerance:
        return "no inflation in this transformers version"
    if abs(ratio - steps) <= tolerance * steps:
        return f"inflated by the {steps} accumulation steps"
    return f"inflated {ratio:.2f}×, not by the accumulation steps' {steps}×"


def mask_match(bytes_per_token_pair: float, layers: int, element_bytes: int = 4, tolerance: float = 0.15) -> str:
    """Chapter 9: whether fused attention's n² term is one n × n mask of `element_bytes` per layer, the padding-mask
    bias chapter 1 finds left quadratic under fused attention."""
    per_layer = bytes_per_token_pair / layers
    lead = f"{bytes_per_token_pair:.0f} bytes per token pair, {per_layer:.1f} per layer"
    if abs(per_layer / element_bytes - 1) <= tolerance:
        return (f"{lead}: what one {element_bytes}-byte $n \\times n$ mask per layer takes, the padding-mask bias "
                "chapter 1 finds left quadratic under fused attention")
    return (f"{lead}: not one {element_bytes}-byte $n \\times n$ mask per layer, so something else grows with "
            "$n^2$ here (untested)")


def resolution(effect: float, margin: float) -> str:
    """Chapter 5: 'could' or 'could not' — whether a comparison whose 95 % interval has half-width `margin`
    resolves an effect of size `effect` (both in the same unit)."""
    return "could" if margin < effect else "could not"


def against_limit(low: float, high: float, limit: float) -> str:
    """Chapter 5: where a duration known only as a range `low`–`high` stands against a limit (Colab's hours):
    'within' when all of it is, 'more than' when none of it is, else 'on either side of'."""
    if high <= limit:
        return "within"
    return "more than" if low > limit else "on either side of"


def longest_fit(tokens: int, card: str = "a T4") -> str:
    """Chapter 9: the longest single sequence that fits a card, or that none of the lengths tried does."""
    if tokens:
        return f"one sequence fits {card} up to {tokens:,} tokens"
    return f"no length above fits {card} with one sequence"


def estimate_side(below: int, rows: int) -> str:
    """A3: on which side of the measured peak the estimates fall, from how many rows are below it."""
    if below == rows:
        return f"below it in all {rows} rows (it never overestimated)"
    if below == 0:
        return f"above it in all {rows} rows (it never underestimated)"
    return f"below it in {below} of {rows} rows and above it in the rest"


def autocast_cut(small: float, large: float, small_step: str, large_step: str) -> str:
    """Chapter 1: how much bf16 autocast shrinks the saved activations, from their ratios to fp32's at a small
    and a large step."""
    deepest = min(small, large)
    amount = ("by half or more" if deepest <= 0.5 else "by less than half" if deepest < 1 - BAND
              else "barely, if at all")
    if small > large * (1 + BAND):
        order = f"and by less at {small_step} than at {large_step}"
    elif large > small * (1 + BAND):
        order = f"and by less at {large_step} than at {small_step}"
    else:
        order = "about equally at both sizes"
    return (f"under bf16 autocast the activations shrink {amount} ({small:.2f}× fp32's at {small_step}, "
            f"{large:.2f}× at {large_step}), {order}")


def autocast_activations(before_mib: float, after_mib: float, precision: str) -> str:
    """Chapter 5: what autocast did to the saved activations (accumulation ×4 → mixed precision), or, where the
    mixed-precision row ran fp32 (`auto` on a CPU without native bf16), that this run cannot say."""
    moved = f"{before_mib:.1f} → {after_mib:.1f} MiB"
    if precision == "fp32":
        return (f"the mixed-precision row ran fp32 here (`auto` chose fp32 on this CPU), so it repeats "
                f"accumulation ×4 ({moved}) and says nothing about autocast")
    return f"under {precision} autocast they come out {size_change(after_mib / before_mib)} ({moved})"


def matmul_speedup(peaks: Mapping[str, float]) -> str:
    """Chapter 5: the 16-bit matmul peak the bench measured against fp32's, or that it timed none (every row fp32)."""
    low = next((p for p in ("bf16", "fp16") if p in peaks), None)
    if low is None or "fp32" not in peaks:
        return "The bench timed no 16-bit matmul on this machine: every row ran fp32"
    ratio = peaks[low] / peaks["fp32"]
    return f"The {low} matmul peak measured in the bench is {ratio:.1f}× the fp32 one on this machine"


def precision_claim(holds: bool, precision: str, mixed_ratio: float, accumulation_ratio: float,
                    activations: str) -> str:
    """Chapter 5: whether "mixed precision needs less memory than accumulation alone" holds in this run (with the
    two memory ratios and what the activations did), or that the run cannot test it: its row ran fp32."""
    if precision == "fp32":
        return ("this run cannot test the direction: its mixed-precision row ran fp32 (`auto` chose fp32 on this "
                f"CPU), the same arithmetic as accumulation alone ({mixed_ratio:.3f}× against "
                f"{accumulation_ratio:.3f}×)")
    return (f"the direction {claim_verdict(holds)} in this run ({mixed_ratio:.3f}× against {accumulation_ratio:.3f}×; "
            f"the activations came out {activations}, see above)")


def precision_against_record(here: str, recorded: str) -> str:
    """Chapter 5: a line when this run's mixed-precision rows ran another precision than the recorded bench's."""
    if here == recorded:
        return f"Both runs' mixed-precision rows ran {here}."
    return (f"This run's mixed-precision rows ran {here}, the recorded run's {recorded}: those rows compare "
            "different arithmetic, so their time and memory ratios do not carry over from one run to the other.")


def seeds_direction(differences: Sequence[float], what: str = "macro-F1") -> str:
    """'raised macro-F1 in both seeds (+4.1, +2.3 points): a direction, not yet its size' and its siblings: how
    many paired seeds moved one way, with each difference (A1)."""
    up, down, n = sum(d > 0 for d in differences), sum(d < 0 for d in differences), len(differences)
    points = ", ".join(f"{100 * d:+.1f}" for d in differences) + " points"
    every = "both seeds" if n == 2 else f"all {n} seeds"
    if up == n or down == n:
        return f"{'raised' if up == n else 'lowered'} {what} in {every} ({points}): a direction, not yet its size"
    return f"raised {what} in {up} of {n} seeds ({points}): no direction at this size"


def runs_part(gap: float, reference: str = "AdamW's") -> str:
    """'are not AdamW's: their training losses part by up to 0.012 at one step' or 'match AdamW's at every step':
    whether two optimizers' runs differed at all (chapter 8)."""
    if gap > 0:
        return f"are not {reference}: their training losses part by up to {gap:.2g} at one step"
    return f"match {reference} at every step: their training losses are equal"
