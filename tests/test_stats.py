"""The statistics helper: means with their noise, the noise verdict, robust step timing."""

import math

import pytest

from bertmem.experiments.stats import Summary, binomial_se, compare_accuracies, step_timing, summarize


def test_summarize_gives_sample_std_and_standard_error():
    s = summarize([0.8, 0.9, 1.0])
    assert (s.n, s.mean) == (3, pytest.approx(0.9))
    assert s.std == pytest.approx(0.1) and s.sem == pytest.approx(0.1 / math.sqrt(3))
    assert str(s) == "0.900 ± 0.100" and str(summarize([0.5])) == "0.500"
    assert summarize([0.5]) == Summary(1, 0.5, 0.0, 0.0)
    with pytest.raises(ValueError):
        summarize([])
    with pytest.raises(ValueError):
        summarize([float("nan")])


def test_binomial_standard_error():
    assert binomial_se(0.5, 100) == pytest.approx(0.05)
    with pytest.raises(ValueError):
        binomial_se(1.5, 10)


def test_one_seed_each_is_judged_by_the_test_set_size():
    small = compare_accuracies([0.80], [0.84], n_examples=200)  # SE of the difference ≈ 3.8 points
    assert small.within_noise and "200 test examples" in small.basis
    assert small.margin == pytest.approx(1.96 * small.se, rel=1e-3)  # one seed each: the normal quantile
    large = compare_accuracies([0.80], [0.84], n_examples=20000)
    assert not large.within_noise
    assert small.describe(" points", scale=100).startswith("+4.0 points (95 % interval ± 7.5): within noise")
    with pytest.raises(ValueError, match="n_examples"):
        compare_accuracies([0.8], [0.9])


def test_two_test_sets_of_different_sizes_each_count_their_own_noise():
    same = compare_accuracies([0.80], [0.84], n_examples=200)
    smaller_b = compare_accuracies([0.80], [0.84], n_examples=200, n_examples_b=50)
    expected = (binomial_se(0.80, 200) ** 2 + binomial_se(0.84, 50) ** 2) ** 0.5
    assert smaller_b.se == pytest.approx(expected) and smaller_b.se > same.se
    assert "200 and 50 test examples" in smaller_b.basis


def test_seed_spread_counts_when_larger_than_the_test_set_noise():
    noisy = compare_accuracies([0.70, 0.80, 0.90], [0.80, 0.90, 1.00], n_examples=100000)
    assert noisy.within_noise and "3 seeds" in noisy.basis  # 10 points apart, seeds spread by 10
    # variances add: seeds' (2 × 0.1² / 3) plus the binomial term of 100,000 examples
    assert noisy.se == pytest.approx(math.sqrt(2 * 0.01 / 3 + 0.8 * 0.2 / 1e5 + 0.9 * 0.1 / 1e5), rel=1e-6)
    assert noisy.margin / noisy.se > 2.7  # Student's t with about 4 degrees of freedom, not 2
    steady = compare_accuracies([0.800, 0.801, 0.799], [0.850, 0.851, 0.849])
    assert not steady.within_noise


def test_step_timing_is_robust_to_warmup_and_hiccups():
    t = step_timing([5.0, 3.0, 1.0, 1.1, 0.9, 1.0, 30.0])
    assert t.steps == 5 and t.median_s == pytest.approx(1.0)
    assert t.iqr_s == pytest.approx(0.1) and t.spread == pytest.approx(0.1)
    assert step_timing([2.0], warmup=2).median_s == 2.0
    with pytest.raises(ValueError):
        step_timing([])


def test_paired_comparison_of_identical_predictions_has_no_noise():
    from bertmem.experiments.stats import compare_paired

    same = [[1, 0, 1, 1], [0, 1, 1, 1]]
    verdict = compare_paired(same, same)
    assert (verdict.difference, verdict.low, verdict.high, verdict.within_noise) == (0.0, 0.0, 0.0, True)
    assert verdict.changed == 0 and verdict.describe(" points", 100).startswith(
        "no answer changed: right or wrong alike on all 8 pairs")  # not an interval of zero width
    moved = compare_paired(same, [[1, 0, 1, 1], [0, 1, 0, 1]])
    assert moved.changed == 1 and moved.describe(" points", 100).startswith("-12.5 points (95 % interval")


def test_paired_comparison_finds_a_small_difference_the_unpaired_test_calls_noise():
    from bertmem.experiments.stats import compare_paired

    # 1,000 test examples, three seeds: a right on 80 %; b right on those and 30 more (+3 points exactly)
    a = [[1] * 800 + [0] * 200 for _ in range(3)]
    b = [[1] * 830 + [0] * 170 for _ in range(3)]
    paired = compare_paired(a, b)
    assert paired.difference == pytest.approx(0.03) and not paired.within_noise
    assert 0 < paired.low < 0.03 < paired.high < 0.05
    assert paired.describe(" points", 100).startswith("+3.0 points (95 % interval +")
    assert "paired: 3 seeds × 1000 test examples" in paired.basis
    unpaired = compare_accuracies([0.80] * 3, [0.83] * 3, n_examples=1000)
    assert unpaired.within_noise and paired.margin < unpaired.margin / 2


def test_paired_interval_covers_the_true_difference_about_95_percent_of_the_time():
    import numpy as np

    from bertmem.experiments.stats import compare_paired

    rng = np.random.default_rng(1)

    def scores(difficulty, shift, seeds):  # right with probability sigmoid(1 + difficulty + seed effect + shift)
        logits = 1 + difficulty[None, :] + rng.normal(0, 0.1, (seeds, 1)) + shift
        return (rng.random(logits.shape) < 1 / (1 + np.exp(-logits))).astype(int)

    population = rng.normal(0, 1.5, 400_000)  # the true difference: over examples (and seeds: small effect)
    truth = float(np.mean(1 / (1 + np.exp(-(1.3 + population))) - 1 / (1 + np.exp(-(1 + population)))))
    covered = 0
    for _ in range(150):
        difficulty = rng.normal(0, 1.5, 300)
        verdict = compare_paired(scores(difficulty, 0.0, 3), scores(difficulty, 0.3, 3), resamples=400,
                                 seed=int(rng.integers(1 << 30)))
        covered += verdict.low <= truth <= verdict.high
    assert 0.88 <= covered / 150 <= 1.0


def test_paired_comparison_refuses_unpaired_tables():
    from bertmem.experiments.stats import compare_paired

    with pytest.raises(ValueError, match="same seeds"):
        compare_paired([[1, 0, 1]], [[1, 0]])
    with pytest.raises(ValueError, match="0 \\(wrong\\) or 1"):
        compare_paired([[1, 0.5]], [[1, 0]])


@pytest.mark.parametrize("value, text", [(1.24, "+1.2"), (-0.8, "-0.8"), (0.04, "+0.04"), (-0.003, "-0.003"),
                                         (0.0, "0.0"), (0.05, "+0.1")])
def test_an_interval_end_near_zero_shows_which_side_it_lies_on(value, text):
    from bertmem.experiments.stats import bound

    assert bound(value) == text


def test_an_interval_ending_just_below_zero_is_not_printed_as_plus_zero():
    from bertmem.experiments.stats import PairedComparison

    below = PairedComparison(-0.017, 0.008, 0.016, False, "paired: 3 seeds × 1000 test examples", -0.032, -0.0004)
    text = below.describe(" points", 100)
    assert "to -0.04)" in text and "+0.0" not in text and "larger than the noise" in text
