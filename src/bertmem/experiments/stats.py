"""Means with their noise, robust timings, and "is this difference real?" (chapters 3, 4, 5, 6).

Two kinds of noise decide whether two accuracies differ: the seed (initialisation, data order, dropout), seen
as the spread over seeds, and the finite test set, seen as the binomial standard error sqrt(p(1 - p) / n) of an
accuracy measured on n examples.

`compare_paired` is the comparison to use when both variants trained with the same seeds and were scored on the
same test examples (chapter 5's bench): it resamples seeds and examples together, so an example both variants get
right (or both wrong) adds no noise to their difference. `compare_accuracies` has only the accuracies: it treats the
two test-set scores as independent, which overstates that part, so its verdict errs towards "within noise"; with
few seeds the seed term's own uncertainty is large, so its margin is Student's t at the Welch-Satterthwaite degrees
of freedom, not 2."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Sequence

CONFIDENCE = 0.95  # a difference inside the two-sided 95 % interval is called noise


def bound(value: float) -> str:
    """An interval's end with its sign: '+1.2', '-0.8'; one that rounds to zero keeps the digit that shows which
    side of zero it lies on ('+0.04', '-0.003'), and exactly zero reads '0.0' (chapters 3-9)."""
    if value == 0:
        return "0.0"
    return f"{value:+.1f}" if abs(value) >= 0.05 else f"{value:+.1g}"


@dataclass(frozen=True)
class Summary:
    """Mean, sample standard deviation and standard error of repeated measurements (chapters 4, 5)."""

    n: int
    mean: float
    std: float  # sample standard deviation (n - 1); 0 for one value
    sem: float  # standard error of the mean, std / sqrt(n)

    def __str__(self) -> str:
        return f"{self.mean:.3f}" if self.n == 1 else f"{self.mean:.3f} ± {self.std:.3f}"


def summarize(values: Sequence[float]) -> Summary:
    """Summary of one or more measurements (a seed each)."""
    values = [float(v) for v in values]
    if not values or any(math.isnan(v) for v in values):
        raise ValueError(f"need one or more numbers (no NaN) to summarize, got {values}")
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return Summary(len(values), statistics.fmean(values), std, std / math.sqrt(len(values)))


def binomial_se(accuracy: float, n_examples: int) -> float:
    """Standard error of an accuracy measured on n test examples: sqrt(p(1 - p) / n)."""
    if n_examples < 1 or not 0 <= accuracy <= 1:
        raise ValueError(f"need an accuracy in [0, 1] and n_examples >= 1, got {accuracy}, {n_examples}")
    return math.sqrt(max(accuracy * (1 - accuracy), 1e-12) / n_examples)


@dataclass(frozen=True)
class Comparison:
    """The difference b − a of two measured quantities, its standard error and the verdict (chapters 3-6)."""

    difference: float
    se: float
    margin: float  # half-width of the 95 % interval: the t (or normal) quantile times the SE
    within_noise: bool
    basis: str  # what the standard error comes from

    def describe(self, unit: str = "", scale: float = 1.0) -> str:
        """e.g. '+1.2 points (95 % interval ± 3.1): within noise (3 seeds and 400 test examples)'."""
        verdict = "within noise" if self.within_noise else "larger than the noise"
        return (f"{self.difference * scale:+.1f}{unit} (95 % interval ± {self.margin * scale:.1f}): {verdict} "
                f"({self.basis})")


def compare_accuracies(a: Sequence[float], b: Sequence[float], n_examples: int | None = None,
                       n_examples_b: int | None = None) -> Comparison:
    """Is mean(b) − mean(a) outside its 95 % interval? Seed spread and test-set size both count (chapters 3-6).

    `n_examples_b`: b's test-set size where it differs from a's (two different test sets, chapter 9).
    """
    from scipy import stats as scipy_stats

    sa, sb = summarize(a), summarize(b)
    seed_var, binom_var, basis, df = 0.0, 0.0, [], math.inf
    if sa.n > 1 and sb.n > 1:
        va, vb = sa.sem ** 2, sb.sem ** 2
        seed_var = va + vb
        if seed_var > 0:  # Welch-Satterthwaite degrees of freedom of the seed term
            df = seed_var ** 2 / (va ** 2 / (sa.n - 1) + vb ** 2 / (sb.n - 1))
        basis.append(f"{min(sa.n, sb.n)} seeds")
    if n_examples:
        n_b = n_examples_b or n_examples
        binom_var = binomial_se(sa.mean, n_examples) ** 2 + binomial_se(sb.mean, n_b) ** 2
        basis.append(f"{n_examples} test examples" if n_b == n_examples else f"{n_examples} and {n_b} test examples")
    if not basis:
        raise ValueError("one seed each and no test-set size: nothing tells the noise; pass n_examples")
    variance = seed_var + binom_var
    if math.isfinite(df) and seed_var > 0:  # the binomial term is known exactly: it adds no uncertainty
        df = variance ** 2 / (seed_var ** 2 / df)
    se = math.sqrt(variance)
    quantile = scipy_stats.t.ppf(0.5 + CONFIDENCE / 2, df) if math.isfinite(df) else scipy_stats.norm.ppf(
        0.5 + CONFIDENCE / 2)
    margin = float(quantile * se)
    difference = sb.mean - sa.mean
    return Comparison(difference, se, margin, abs(difference) <= margin, " and ".join(basis))


BOOTSTRAP_RESAMPLES = 4000


@dataclass(frozen=True)
class PairedComparison(Comparison):
    """A paired difference with its percentile interval [low, high] (chapter 5)."""

    low: float = 0.0
    high: float = 0.0
    changed: int | None = None  # (seed, example) pairs whose right/wrong differs; None: not counted
    pairs: int | None = None

    def describe(self, unit: str = "", scale: float = 1.0) -> str:
        """e.g. '+1.2 points (95 % interval −0.8 to +3.1): within noise (paired: 3 seeds × 500 test examples)';
        where no answer changed, says so instead of an interval of zero width (chapter 8)."""
        if self.changed == 0:
            return f"no answer changed: right or wrong alike on all {self.pairs} pairs ({self.basis})"
        verdict = "within noise" if self.within_noise else "larger than the noise"
        return (f"{self.difference * scale:+.1f}{unit} (95 % interval {bound(self.low * scale)} to "
                f"{bound(self.high * scale)}): {verdict} ({self.basis})")


def compare_paired(correct_a: Sequence[Sequence[float]], correct_b: Sequence[Sequence[float]],
                   resamples: int = BOOTSTRAP_RESAMPLES, seed: int = 0) -> PairedComparison:
    """Accuracy of b minus a, paired by seed and test example: a two-way bootstrap (chapter 5).

    `correct_a[s][i]` is 1 when variant a, trained with the s-th seed, got test example i right; b has the
    same seeds and examples in the same order. Each resample draws seeds and examples with replacement and
    takes the mean difference; the interval is the 2.5th to 97.5th percentile. Resampling both ways counts
    the seed-by-example interaction twice, so the interval is slightly wide, never narrow; with two or three
    seeds it sees only a rough sample of the seed spread.
    """
    import numpy as np

    a, b = np.asarray(correct_a, dtype=float), np.asarray(correct_b, dtype=float)
    if a.ndim != 2 or a.shape != b.shape or a.size == 0:
        raise ValueError(f"need two equal (seeds, examples) tables of 0/1 scores, got shapes {a.shape} and "
                         f"{b.shape}: train both variants with the same seeds, score them on the same examples")
    if not np.isin(a, (0, 1)).all() or not np.isin(b, (0, 1)).all():
        raise ValueError("scores must be 0 (wrong) or 1 (right) per seed and test example")
    seeds, examples = a.shape
    diff = b - a
    rng = np.random.default_rng(seed)
    draws = np.empty(resamples)
    for k in range(resamples):  # one resample: seeds and examples drawn independently, with replacement
        rows = rng.integers(0, seeds, seeds)
        cols = rng.integers(0, examples, examples)
        draws[k] = diff[rows][:, cols].mean()
    low, high = np.percentile(draws, [100 * (1 - CONFIDENCE) / 2, 100 * (1 + CONFIDENCE) / 2])
    difference = float(diff.mean())
    basis = f"paired: {seeds} seed{'s' * (seeds > 1)} × {examples} test examples"
    return PairedComparison(difference, float(draws.std(ddof=1)), float(high - low) / 2,
                            bool(low <= 0 <= high), basis, float(low), float(high), int((diff != 0).sum()),
                            int(diff.size))


@dataclass(frozen=True)
class Timing:
    """Per-step times after a warm-up: the median and its spread (interquartile range) (chapter 5)."""

    steps: int
    median_s: float
    iqr_s: float

    @property
    def spread(self) -> float:
        """IQR relative to the median."""
        return self.iqr_s / self.median_s if self.median_s else float("nan")


def step_timing(step_times: Sequence[float], warmup: int = 2) -> Timing:
    """Median and IQR of the step times after `warmup` steps (first steps pay for allocation and caches).

    With `warmup` steps or fewer in all, every step counts (a short run has nothing else to time).
    """
    times = [float(t) for t in step_times][warmup:] or [float(t) for t in step_times]
    if not times:
        raise ValueError("no step times to summarize")
    if len(times) == 1:
        return Timing(1, times[0], 0.0)
    q1, _, q3 = statistics.quantiles(times, n=4, method="inclusive")
    return Timing(len(times), statistics.median(times), q3 - q1)
