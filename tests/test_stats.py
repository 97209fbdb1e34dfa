"""The statistics helper: means with their noise, the noise verdict, robust step timing."""

import math

import pytest

from bertmem.stats import Summary, binomial_se, compare_accuracies, step_timing, summarize


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
