"""Every computed sentence's words flip with its numbers: each wording rendered on both sides of its threshold."""

import pytest

from bertmem.book.wording import (
    runs_part,
    seeds_direction,
    BAND,
    against_limit,
    autocast_activations,
    autocast_cut,
    matmul_speedup,
    micro_batch_cost,
    precision_against_record,
    precision_claim,
    cudnn_advice,
    estimate_side,
    first_meeting,
    longest_fit,
    pace_than,
    resolution,
    about_fraction,
    accumulation_advice,
    accumulation_speed,
    claim_verdict,
    compare,
    cpu_precision_timing,
    device_effect,
    fit_verdict,
    gradient_match,
    highest,
    mask_match,
    math_path_effect,
    norm_inflation,
    same_losses,
    epoch_paces,
    growth,
    lora_and_freezing,
    pace,
    peak_change,
    percent_side,
    plural,
    quadratic_claim,
    relative_size,
    saving,
    size_change,
    what_stops_first,
)


@pytest.mark.parametrize("ratio, word", [(0.5, "faster"), (1 - 2 * BAND, "faster"), (1.0, "about as fast"),
                                         (1 + BAND / 2, "about as fast"), (1 + 2 * BAND, "slower"), (3, "slower")])
def test_pace_flips_at_the_band(ratio, word):
    assert pace(ratio) == word


@pytest.mark.parametrize("ratio, words", [(263.11 / 289.91, "9% below"), (336.33 / 289.91, "16% above"),
                                          (1.0, "within a few percent of"), (1 + BAND / 2, "within a few percent of")])
def test_percent_side_flips_at_the_band(ratio, words):
    assert percent_side(ratio) == words


@pytest.mark.parametrize("ratio, word", [(0.5, "smaller"), (1.0, "about as large"), (1.2, "larger")])
def test_size_change_flips_at_the_band(ratio, word):
    assert size_change(ratio) == word


def test_compare_uses_the_band_it_is_given():
    assert compare(0.95, "lo", "hi", "same", band=0.1) == "same" and compare(0.95, "lo", "hi", "same") == "lo"


@pytest.mark.parametrize("ratio, word", [(0.49, "a large saving"), (0.89, "a modest saving"), (1.0, "no saving"),
                                         (1.3, "no saving (it costs more)")])
def test_saving_names_large_modest_and_none(ratio, word):
    assert saving(ratio) == word


def test_plural():
    assert plural(1, "miss", "misses") == "1 miss" and plural(2, "miss", "misses") == "2 misses"
    assert plural(3, "seed") == "3 seeds"


def test_accumulation_speed_hypothesis_follows_the_throughput():
    assert "no slower" in accumulation_speed(1 - BAND / 2, 1.14) and "weighs little" in accumulation_speed(0.99, 1.1)
    slow = accumulation_speed(0.6, 0.9)
    assert ": slower" in slow and "paid once per micro-batch" in slow and "weighs little" not in slow
    mixed = accumulation_speed(0.8, 1.2)
    assert "cannot tell from the noise" in mixed and "hypothesis" not in mixed


@pytest.mark.parametrize("fp16_x, words", [(83, "no fast fp16 path"), (3.5, "no fast fp16 path"),
                                           (2.9, "(slower): this CPU runs fp16 at a usable speed"),
                                           (1.03, "(about as fast): this CPU runs fp16 at a usable speed")])
def test_fp16_timing_words(fp16_x, words):
    assert words in cpu_precision_timing(fp16_x, 0.5, "bf16")


@pytest.mark.parametrize("bf16_x, auto, words", [
    (0.22, "bf16", "(faster). `auto` picks bf16 here from the CPU's reported bf16 support, not from a timing, and "
                   "the timing agrees"),
    (1.76, "bf16", "(slower). `auto` picks bf16 here from the CPU's reported bf16 support, not from a timing, "
                   "though bf16 is not faster here"),
    (0.5, "fp32", "though bf16 is faster here"),
    (1.0, "fp32", "(about as fast). `auto` picks fp32 here from the CPU's reported bf16 support, not from a timing, "
                  "and the timing agrees"),
    (141.2, "fp32", "bf16 takes 141× the fp32 time: this CPU has no fast bf16 path (PyTorch emulates it). `auto` "
                    "picks fp32 here")])
def test_bf16_timing_never_claims_auto_follows_it(bf16_x, auto, words):
    assert words in cpu_precision_timing(2.0, bf16_x, auto)


def test_lora_and_freezing_words_follow_the_ratios():
    now = lora_and_freezing(lora_act=0.89, freeze_act=0.49)
    assert now["lora saving"] == "a modest saving" and now["freeze vs lora"] == "goes further on activations"
    assert now["lora activations"] == "smaller"
    flipped = lora_and_freezing(lora_act=0.4, freeze_act=0.6)
    assert flipped["lora saving"] == "a large saving"
    assert flipped["freeze vs lora"] == "keeps more activations than LoRA"
    assert lora_and_freezing(0.8, 0.8)["freeze vs lora"] == "saves no more activations than LoRA"
    assert lora_and_freezing(1.1, 1.0)["lora activations"] == "larger"


def test_epoch_paces_give_each_direction_its_own_hypothesis():
    fast = epoch_paces(0.62, 2.76)
    assert fast["lora"].startswith("faster; a hypothesis: it computes no weight gradients")
    assert fast["8-bit"].startswith("slower; only the optimizer differs; a hypothesis") and fast["moves"] == "moves too"
    slow = epoch_paces(1.4, 0.9)
    assert slow["lora"].startswith("slower; a hypothesis: the adapters") and slow["8-bit"].startswith("faster")
    still = epoch_paces(1.0, 1.01)
    assert still == {"lora": "about as fast", "8-bit": "about as fast", "moves": "barely moves"}


@pytest.mark.parametrize("before, after, word", [(2.98, (1.82, 1.63), "falls"), (1.0, (1.5, 1.2), "rises"),
                                                 (1.0, (0.5, 1.5), "changes little or moves both ways"),
                                                 (1.0, (1.0,), "changes little or moves both ways")])
def test_peak_change(before, after, word):
    assert peak_change(before, *after) == word


@pytest.mark.parametrize("share, words", [(0.10, "about a tenth"), (0.11, "about a tenth"), (0.5, "about half"),
                                          (0.26, "about a quarter"), (0.7, "70%"), (0.04, "4%")])
def test_about_fraction(share, words):
    assert about_fraction(share) == words


@pytest.mark.parametrize("ratio, words", [(0.96, "about the size of"), (1.2, "about the size of"),
                                          (0.5, "smaller than"), (2.0, "larger than")])
def test_relative_size(ratio, words):
    assert relative_size(ratio) == words


def test_claim_verdict_and_the_quadratic_claim_flip():
    assert claim_verdict(True) == "holds" and claim_verdict(False) == "does not hold"
    assert quadratic_claim(475).startswith("roughly right") and "near 512" in quadratic_claim(475)
    far = quadratic_claim(300)
    assert far.startswith("off even for eager attention") and "about 300 tokens" in far


def test_device_effect_flips_with_the_ratio():
    assert device_effect(1.26).startswith("The device matters on its own") and "(more), so" in device_effect(1.26)
    assert device_effect(1.01).startswith("The device barely matters here")
    assert "(less)" in device_effect(0.7) and "(about as much)" in device_effect(1.01)
    assert "on a GPU at 1,024 tokens (more), so" in device_effect(1.3, " at 1,024 tokens")


@pytest.mark.parametrize("doubling, words", [(2.8, "faster than linearly"), (2.0, "about linearly"),
                                             (1.5, "slower than linearly")])
def test_growth(doubling, words):
    assert growth(doubling) == words


def test_growth_is_judged_against_the_linear_ratio_it_is_given():
    linear = (8192 - 512) / (4096 - 512)  # the cost above 512 tokens, from 4,096 to 8,192 tokens
    assert growth(linear, linear) == "about linearly" and growth(2.0 * 1.07, 2.0) == "faster than linearly"
    assert growth(2.79, linear) == "faster than linearly" and growth(1.8, linear) == "slower than linearly"


def test_what_stops_first_flips_at_the_position_table():
    assert "lacks positions before it lacks memory" in what_stops_first(8192)
    assert what_stops_first(512).startswith("memory, not the 512-position table")


@pytest.mark.parametrize("needed, available, word", [(12.0, 15.0, "fits"), (15.0, 15.0, "fits"),
                                                     (23.7, 15.0, "does not fit")])
def test_fit_verdict_flips_at_the_budget(needed, available, word):
    assert fit_verdict(needed, available) == word


@pytest.mark.parametrize("ratio, words", [(1.0, "saves as much as eager attention on the same CPU (1.00×)"),
                                          (1.015, "saves as much as"), (1.3, "(more)"), (0.6, "(less)")])
def test_math_path_effect_flips_with_the_ratio(ratio, words):
    assert words in math_path_effect(ratio)


def test_highest_names_one_winner_or_every_tied_one():
    assert highest({"α = 1.0": 0.742, "α = 0.95": 0.737}) == "α = 1.0"
    assert highest({"tail": 0.677, "head+tail": 0.677, "head": 0.627}) == "tail and head+tail (tied)"
    assert highest({"a": 0.5, "b": 0.5 + 1e-12}) == "a and b (tied)"


@pytest.mark.parametrize("difference, words", [(0.0, "identical losses"),
                                               (3e-8, "the same losses up to rounding"),
                                               (1e-5, "the same losses up to rounding"),
                                               (2e-3, "more than rounding")])
def test_same_losses_flips_at_rounding(difference, words):
    assert words in same_losses(difference)


def test_gradient_match_and_norm_inflation_flip():
    assert gradient_match(2e-7) == "equal (fp32 round-off)" and gradient_match(0.088) == "DIFFERENT"
    # the bound sits between fp32 round-off in another summation order and the post's miss
    assert gradient_match(5e-5) == "equal (fp32 round-off)" and gradient_match(2e-3) == "DIFFERENT"
    assert norm_inflation(4.0, 4) == "inflated by the 4 accumulation steps"
    assert norm_inflation(1.0, 4) == "no inflation in this transformers version"
    assert "not by the accumulation steps" in norm_inflation(2.0, 4)


def test_mask_match_says_whether_the_quadratic_term_is_one_mask_per_layer():
    assert "what one 4-byte" in mask_match(48.5, 12) and "not one" not in mask_match(48.5, 12)
    assert "what one 2-byte" in mask_match(25.2, 12, element_bytes=2)
    assert "not one 4-byte" in mask_match(25.2, 12) and "untested" in mask_match(25.2, 12)
    assert "not one 4-byte" in mask_match(100, 12)


def test_accumulation_advice_follows_the_splits():
    assert "at no cost in speed" in accumulation_advice(1.06, 1.16)
    assert "at a cost in speed" in accumulation_advice(0.6, 0.9)
    assert "cannot tell" in accumulation_advice(0.95, 1.08)


def test_resolution_limit_and_longest_fit_flip():
    assert (resolution(0.2, 1.6), resolution(0.2, 0.1)) == ("could not", "could")
    assert (against_limit(13.0, 20.0, 12), against_limit(5.0, 8.8, 12)) == ("more than", "within")
    assert against_limit(5.4, 74.6, 12) == "on either side of"  # a point estimate of 10.6 h is not "within"
    assert longest_fit(2048) == "one sequence fits a T4 up to 2,048 tokens"
    assert longest_fit(0) == "no length above fits a T4 with one sequence"


def test_estimate_side_names_the_side_or_both():
    assert estimate_side(13, 13) == "below it in all 13 rows (it never overestimated)"
    assert estimate_side(0, 13) == "above it in all 13 rows (it never underestimated)"
    assert estimate_side(4, 13) == "below it in 4 of 13 rows and above it in the rest"


def test_autocast_cut_reads_its_amount_and_its_order_from_the_ratios():
    assert "shrink by less than half" in autocast_cut(0.91, 0.65, "8 × 128", "32 × 512")
    assert "by less at 8 × 128 than at 32 × 512" in autocast_cut(0.91, 0.65, "8 × 128", "32 × 512")
    assert "shrink by half or more" in autocast_cut(0.45, 0.5, "s", "l")
    assert "about equally at both sizes" in autocast_cut(0.45, 0.45, "s", "l")
    assert "by less at l than at s" in autocast_cut(0.5, 0.7, "s", "l")
    assert "barely, if at all" in autocast_cut(0.99, 1.0, "s", "l")


def test_the_first_meeting_and_the_cudnn_advice_follow_their_numbers():
    assert (pace_than(0.6), pace_than(1.0), pace_than(2.3)) == ("faster than", "about as fast as", "slower than")
    assert "little more than a seen one" in first_meeting(175, 34, 32, 27)
    assert "not cuDNN's alone" in first_meeting(175, 34, 90, 27)
    assert "only the run with cuDNN's attention off" in first_meeting(35, 34, 90, 27)
    assert "no more than a later one" in first_meeting(35, 34, 32, 27)
    # A3's numbers: 26.9 against 33.6 ms on seen lengths (25 %), while one shape's two passes differed by 15 %
    advice = cudnn_advice(175, 33.6, 31.9, 26.9, noise=0.15)
    assert "5.5× as long on new lengths and, by less, 25% longer on lengths already seen (more than the 15%" in advice
    assert "inside the 30%" in cudnn_advice(175, 33.6, 31.9, 26.9, noise=0.30)
    assert "new lengths were faster; on lengths already seen" in cudnn_advice(175, 34, 32, 34, noise=0.03)
    assert "keep the default kernels" in cudnn_advice(32, 27, 40, 27, noise=0.03)
    assert "keep the default kernels" in cudnn_advice(36, 27, 32, 27, noise=0.15)  # 12 % faster: inside


@pytest.mark.parametrize("precision, before, after, words", [
    ("bf16", 55.2, 40.0, "under bf16 autocast they come out smaller (55.2 → 40.0 MiB)"),
    ("bf16", 55.2, 57.3, "under bf16 autocast they come out larger"),
    ("fp16", 55.2, 55.3, "under fp16 autocast they come out about as large"),
    ("fp32", 55.2, 55.2, "ran fp32 here (`auto` chose fp32 on this CPU), so it repeats accumulation ×4"),
])
def test_autocast_activations_follow_the_ratio_and_the_precision_that_ran(precision, before, after, words):
    assert words in autocast_activations(before, after, precision)


@pytest.mark.parametrize("peaks, words", [
    ({"fp32": 0.13, "bf16": 0.40}, "The bf16 matmul peak measured in the bench is 3.1× the fp32 one"),
    ({"fp32": 4.0, "fp16": 30.0}, "The fp16 matmul peak measured in the bench is 7.5× the fp32 one"),
    ({"fp32": 0.13}, "timed no 16-bit matmul on this machine: every row ran fp32"),
])
def test_matmul_speedup_says_when_no_16_bit_row_ran(peaks, words):
    assert words in matmul_speedup(peaks)


def test_precision_claims_are_untestable_when_the_row_ran_fp32():
    assert precision_claim(True, "bf16", 0.70, 0.71, "smaller") == (
        "the direction holds in this run (0.700× against 0.710×; the activations came out smaller, see above)")
    assert precision_claim(False, "bf16", 0.712, 0.708, "larger").startswith("the direction does not hold in this")
    untested = precision_claim(False, "fp32", 0.708, 0.708, "about as large")
    assert untested.startswith("this run cannot test the direction: its mixed-precision row ran fp32")
    assert untested.count("this run") == 1
    assert "Both runs' mixed-precision rows ran bf16" in precision_against_record("bf16", "bf16")
    assert "ran fp32, the recorded run's bf16" in precision_against_record("fp32", "bf16")


def test_micro_batch_cost_decides_only_where_every_round_agrees():
    assert micro_batch_cost([1.4, 1.2], "4 × 4", "16 × 1").endswith("every one of 2 rounds: slower")
    assert micro_batch_cost([0.8, 0.9], "4 × 4", "16 × 1").endswith(": faster")
    assert "about as fast" in micro_batch_cost([1.01, 0.99], "4 × 4", "16 × 1")
    assert "cannot say" in micro_batch_cost([1.2, 0.9], "4 × 4", "16 × 1")
    assert "not every round was more than 3% slower" in micro_batch_cost([1.02, 1.10], "4 × 4", "16 × 1")
    assert micro_batch_cost([1.2], "8 × 4", "32 × 1") == (
        "micro-batch 8 × 4 took 1.20× the training time of 32 × 1 in its one round: slower")


def test_the_seeds_direction_follows_each_seeds_difference():
    assert seeds_direction([0.041, 0.023]) == ("raised macro-F1 in both seeds (+4.1, +2.3 points): a direction, "
                                               "not yet its size")
    assert seeds_direction([0.041, -0.01]).startswith("raised macro-F1 in 1 of 2 seeds (+4.1, -1.0 points): no ")
    assert seeds_direction([-0.02, -0.01, -0.03]).startswith("lowered macro-F1 in all 3 seeds")
    assert seeds_direction([0.0, -0.01]).startswith("raised macro-F1 in 0 of 2 seeds")


def test_whether_two_optimizers_runs_parted_follows_the_gap():
    assert runs_part(0.0123) == "are not AdamW's: their training losses part by up to 0.012 at one step"
    assert runs_part(0.0).startswith("match AdamW's at every step")
