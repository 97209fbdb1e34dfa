"""The demonstration runs the chapters show: seeded, and each shows what its chapter claims."""

import pytest
import torch

from bertmem.book.demos import (
    accumulated_gradient,
    adamw_step_change,
    classifier_change,
    scaled_run,
    synthetic_batch,
    synthetic_batches,
)
from bertmem.loop.optim import layerwise_param_groups, post_param_groups
from bertmem.loop.precision import skipped_steps
from bertmem.model.loading import tiny_classifier


def test_synthetic_batches_are_seeded_and_learnable():
    a, b = synthetic_batches(2, 4, seed=3), synthetic_batches(2, 4, seed=3)
    assert all(torch.equal(x["input_ids"], y["input_ids"]) for x, y in zip(a, b))
    batch = synthetic_batch(6, length=10)
    assert batch["input_ids"].shape == (6, 10) and torch.equal(batch["labels"], batch["input_ids"][:, 1] % 2)


def test_weighted_accumulation_matches_the_big_batch_and_the_naive_rule_does_not():
    model = tiny_classifier(seed=0, dropout=0.0).eval()
    batch = synthetic_batch(16)
    from bertmem.loop.accumulation import split_batch

    reference = accumulated_gradient(model, [batch])
    weighted = accumulated_gradient(model, split_batch(batch, [6, 5, 5]))
    naive = accumulated_gradient(model, split_batch(batch, [6, 5, 5]), naive=True)
    assert torch.allclose(weighted, reference, atol=1e-6)
    assert not torch.allclose(naive, reference, atol=1e-6)


def test_same_lr_accumulation_equals_the_big_batch_step_and_times_four_does_not():
    big, same = adamw_step_change([32], 1e-3), adamw_step_change([8] * 4, 1e-3)
    times4 = adamw_step_change([8] * 4, 4e-3)
    assert torch.allclose(same, big, atol=1e-6) and times4.norm() > 3 * big.norm()


def test_scaled_run_overflows_in_fp16_and_not_in_bf16():
    fp16, fp16_losses = scaled_run("fp16", steps=12, init_scale=2.0**40)
    bf16, bf16_losses = scaled_run("bf16", steps=12)
    assert skipped_steps(fp16, 2.0**40) > 0 and fp16[-1] < 2.0**40
    assert set(bf16) == {1.0} and all(torch.isfinite(torch.tensor(bf16_losses)))  # no scaler: scale 1
    broken, _ = scaled_run("fp16", steps=6, ffn_scale=1e6, growth_interval=5, micro_sizes=(4, 4), clip=1.0)
    assert skipped_steps(broken, 2.0**16) == 6  # forward overflow: every step skipped


def test_skipped_steps_counts_the_steps_after_which_the_scale_shrank():
    assert skipped_steps([8.0, 4.0, 4.0, 8.0, 4.0], init_scale=8.0) == 2
    assert skipped_steps([], init_scale=8.0) == 0


def test_classifier_change_shows_the_posts_groups_never_train_the_head():
    batch = synthetic_batch(8)
    post_groups = classifier_change(tiny_classifier(seed=0), lambda m: post_param_groups(m, 2e-5, 0.95), batch)
    ours = classifier_change(tiny_classifier(seed=0), lambda m: layerwise_param_groups(m, 2e-5, 0.95), batch)
    assert post_groups == 0.0 and ours > 0.0


def test_launch_two_processes_rejects_unknown_strategies(tmp_path):
    from bertmem.book.demos import launch_two_processes

    with pytest.raises(ValueError, match="strategy"):
        launch_two_processes("pipeline", tmp_path, "tiny-bert", "imdb")


@pytest.mark.slow
def test_peak_line_predicts_a_third_batch():
    from bertmem.memory.estimate import estimate_step_memory, peak_line
    from bertmem.model.loading import tiny_bert_config

    config = tiny_bert_config()
    fixed, per = peak_line(config, 32)
    assert per > 0 and estimate_step_memory(config, 3, 32).step_peak == pytest.approx(fixed + 3 * per, rel=0.02)


@pytest.mark.slow
def test_batch_for_peak_finds_the_batch_behind_a_memory_figure():
    from bertmem.memory.estimate import batch_for_peak, estimate_step_memory
    from bertmem.model.loading import tiny_bert_config

    config = tiny_bert_config()
    figure = estimate_step_memory(config, 5, 128).step_peak  # activations set the peak at this length
    assert batch_for_peak(config, 128, figure) == 5
    assert batch_for_peak(config, 128, figure * 1.5) > 5 and batch_for_peak(config, 128, 1) == 1
    short = estimate_step_memory(config, 5, 32).step_peak  # here batches 1 and 2 peak in the optimizer step
    with pytest.raises(ValueError, match="another moment of the step"):
        batch_for_peak(config, 32, short)


def test_tiny_training_run_is_seeded_and_takes_overrides():
    from bertmem.book.demos import tiny_training_run

    batches = synthetic_batches(4, 8)
    calm, again = tiny_training_run(batches, epochs=3), tiny_training_run(batches, epochs=3)
    assert len(calm.losses) == 12 and calm.losses == again.losses
    wild = tiny_training_run(batches, epochs=3, learning_rate=1e2)
    assert wild.history[0]["lr"] > 100 * calm.history[0]["lr"] and max(wild.losses) > 2 * max(calm.losses)
