"""The loop that grows: `train` with every feature off is chapter 0's `train_baseline`, bit for bit; each
feature alone changes only what it should (chapters 0, 2-5)."""

import inspect

import pytest
import torch
from torch.utils.data import DataLoader

from bertmem.book.demos import synthetic_batch
from bertmem.loop.baseline import train_baseline
from bertmem.loop.combined import train
from bertmem.loop.config import RunConfig, TrainConfig
from bertmem.model.loading import tiny_classifier

QUIET = RunConfig(progress=False)  # no progress bars in tests

EXAMPLES = [dict(zip(("input_ids", "attention_mask", "labels"), row))
            for row in zip(*synthetic_batch(48, generator=torch.Generator().manual_seed(3)).values())]
RECIPE = dict(epochs=2, learning_rate=1e-3, weight_decay=0.01, warmup_ratio=0.25, seed=5)
ALL_OFF = dict(fused_optimizer=False)  # the fused kernel is chapter 5's, off here


def loader(batch_size=8, shuffle=True):
    return DataLoader(EXAMPLES, batch_size=batch_size, shuffle=shuffle,
                      generator=torch.Generator().manual_seed(1) if shuffle else None)


def weights(model):
    return [t.detach().clone() for t in model.state_dict().values()]


def baseline_run(batch_size=8, shuffle=True, dropout=0.1):
    model = tiny_classifier(seed=0, dropout=dropout)
    result = train_baseline(model, loader(batch_size, shuffle), progress=False, **RECIPE)
    return result, weights(model)


def full_run(batch_size=8, shuffle=True, dropout=0.1, run=QUIET, **features):
    model = tiny_classifier(seed=0, dropout=dropout)
    result = train(model, loader(batch_size, shuffle), TrainConfig(**RECIPE, **ALL_OFF, **features), run=run)
    return result, weights(model)


def identical(a, b):
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


def test_baseline_fits_on_one_screen():
    """Chapter 0 shows the whole loop in one cell, formatted at the page's 88 columns."""
    assert len(inspect.getsource(train_baseline).splitlines()) <= 45


def test_every_feature_off_is_the_baseline_bit_for_bit():
    (base, base_weights), (full, full_weights) = baseline_run(), full_run()
    assert base.losses == full.losses and len(base.losses) == 12
    assert [h["lr"] for h in base.history] == [h["lr"] for h in full.history]
    assert identical(base_weights, full_weights)


@pytest.mark.parametrize("features", [dict(checkpoint_every=2), dict(oom_backoff=True),
                                      dict(guard_non_finite=False), dict(max_steps=100)],
                         ids=["checkpoints", "oom-backoff-unused", "no-guard", "max-steps-beyond-end"])
def test_features_that_must_not_change_the_numbers(features, tmp_path):
    if "checkpoint_every" in features:  # a run setting, not the recipe's
        features = dict(run=RunConfig(progress=False, output_dir=str(tmp_path), **features))
    (base, base_weights), (full, full_weights) = baseline_run(), full_run(**features)
    assert not features.get("run") or (tmp_path / "checkpoint.pt").exists()
    assert base.losses == full.losses and identical(base_weights, full_weights)


def test_accumulation_alone_equals_the_big_batch():
    # no dropout and a fixed order: 2 windows of 4 are the same 8 examples as one batch of 8
    (base, base_weights) = baseline_run(8, shuffle=False, dropout=0.0)
    (acc, acc_weights) = full_run(4, shuffle=False, dropout=0.0, accumulation_steps=2)
    assert len(acc.losses) == len(base.losses)  # optimizer steps, not micro-batches
    assert acc.losses == pytest.approx(base.losses, abs=1e-5)
    assert all(torch.allclose(a, b, atol=1e-5) for a, b in zip(base_weights, acc_weights))


def test_gradient_checkpointing_alone_recomputes_the_same_numbers():
    (base, base_weights), (ckpt, ckpt_weights) = baseline_run(), full_run(gradient_checkpointing=True)
    assert ckpt.losses == pytest.approx(base.losses, abs=1e-6)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(base_weights, ckpt_weights))


def test_mixed_precision_alone_changes_the_arithmetic_not_the_schedule(bf16_cpu):
    (base, base_weights), (amp, amp_weights) = baseline_run(), full_run(precision="bf16")
    assert amp.precision == "bf16" and len(amp.losses) == len(base.losses)
    assert [h["lr"] for h in amp.history] == [h["lr"] for h in base.history]
    assert amp.losses != base.losses and amp.losses == pytest.approx(base.losses, abs=0.05)
    assert all(a.dtype == b.dtype for a, b in zip(base_weights, amp_weights))  # fp32 master weights stay fp32


def test_layerwise_decay_alone_changes_only_the_learning_rates():
    (base, base_weights), (llrd, llrd_weights) = baseline_run(), full_run(layerwise_decay=0.5)
    # the history records the first group's rate: the embeddings', base × 0.5^L for L = 2 layers, at every step
    assert [h["lr"] for h in llrd.history] == pytest.approx([0.25 * h["lr"] for h in base.history], rel=1e-12)
    assert llrd.losses[1:] != base.losses[1:] and len(llrd.losses) == len(base.losses)
    assert not identical(base_weights, llrd_weights)


def test_a_progress_bar_does_not_change_the_run():
    # tqdm.auto, handed a DataLoader, would start a spare iterator that draws from torch's global generator
    quiet = baseline_run()[0].losses
    model = tiny_classifier(seed=0, dropout=0.1)
    shown = train_baseline(model, loader(), progress=True, **RECIPE).losses
    assert shown == quiet


def test_the_combined_loop_reads_on_one_screen():
    """Chapter 5 shows `train` whole: at most 60 lines, decorator and docstring included."""
    from bertmem.loop.combined import train

    assert len(inspect.getsource(train).splitlines()) <= 60
