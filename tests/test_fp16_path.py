"""The T4's path through `train`, on the CPU: fp16 autocast with a GradScaler (chapters 3 and 5).

`choose_precision` refuses fp16 on a CPU, so every other test runs fp32 or bf16 and the scaler stays
disabled. Here the precision choice is injected as a T4 would make it (fp16 + GradScaler), and torch's CPU
autocast in float16 with `torch.amp.GradScaler("cpu")` runs the same branches a T4 runs.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import pytest
import torch
from torch.utils.data import DataLoader

from bertmem.core.faults import interrupt_after
from bertmem.loop import combined as train_module
from bertmem.loop.combined import train
from bertmem.loop.config import RunConfig, TrainConfig
from bertmem.loop.precision import PrecisionChoice, choose_precision
from bertmem.model.loading import tiny_classifier

QUIET = RunConfig(progress=False)
ROWS = [{"input_ids": torch.tensor([101, 7 + i % 2] + [200 + (5 * i + j) % 700 for j in range(12)] + [102]),
         "attention_mask": torch.ones(15, dtype=torch.long), "labels": torch.tensor(i % 2)} for i in range(32)]


@pytest.fixture
def t4_precision(monkeypatch):
    """`train` chooses as on a T4 (compute capability 7.5): fp16 with a GradScaler, here on the CPU."""
    t4 = choose_precision("auto", "cuda", capability=(7, 5), verbose=False)
    assert t4.precision == "fp16" and t4.use_scaler
    monkeypatch.setattr(train_module, "choose_precision",
                        lambda *args, **kwargs: PrecisionChoice("fp16", "cpu", t4.reason))


def initial_scale(monkeypatch, scale: float) -> None:
    """Start every GradScaler at `scale` (2**16 by default): a large one makes fp16 gradients overflow."""
    monkeypatch.setattr(torch.amp, "GradScaler", functools.partial(torch.amp.GradScaler, init_scale=scale))


def loader() -> DataLoader:
    return DataLoader(ROWS, batch_size=4)


def test_fp16_steps_scale_the_loss_and_record_the_scale(t4_precision):
    model = tiny_classifier(seed=0)
    before = [p.detach().clone() for p in model.parameters()]
    result = train(model, loader(), TrainConfig(epochs=2, learning_rate=1e-3), run=QUIET)
    scales = [record["loss_scale"] for record in result.history]
    assert result.precision == "fp16" and len(scales) == 16
    assert all(s <= 2.0**16 and float(s).is_integer() for s in scales)
    drops = sum(b < a for a, b in zip([2.0**16] + scales, scales))
    assert result.skipped_steps == drops < 16  # each skipped step halves the scale; most steps step
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert result.losses[-1] < result.losses[0]


def test_an_overflowing_scale_skips_steps_without_moving_the_schedule(t4_precision, monkeypatch):
    initial_scale(monkeypatch, 2.0**40)  # 2^40 × a loss of ~0.7 overflows fp16 (max 65504) in backward
    model = tiny_classifier(seed=0)
    before = [p.detach().clone() for p in model.parameters()]
    config = TrainConfig(learning_rate=1e-3, warmup_ratio=0.5, max_steps=3)
    result = train(model, loader(), config, run=QUIET)
    assert [r["loss_scale"] for r in result.history] == [2.0**39, 2.0**38, 2.0**37]
    assert result.skipped_steps == 3
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters())), "a skipped step changed weights"
    assert {r["lr"] for r in result.history} == {result.history[0]["lr"]}, "the schedule moved on a skipped step"


def test_resume_restores_the_scaler_as_an_uninterrupted_run_has_it(t4_precision, monkeypatch, tmp_path):
    initial_scale(monkeypatch, 2.0**22)  # some early steps overflow: the scale the run reaches matters
    config = TrainConfig(epochs=2, learning_rate=1e-3, accumulation_steps=2, seed=3)
    reference = tiny_classifier(seed=0)
    expected = train(reference, loader(), config, run=QUIET)
    assert expected.skipped_steps > 0

    saving = RunConfig(progress=False, output_dir=str(tmp_path), checkpoint_every=1)
    with pytest.raises(KeyboardInterrupt):
        train(interrupt_after(tiny_classifier(seed=0), 11), loader(), config, run=saving)
    resumed_model = tiny_classifier(seed=0)
    resumed = train(resumed_model, loader(), config, run=replace(saving, resume=True))
    assert resumed.losses == expected.losses
    assert [r["loss_scale"] for r in resumed.history] == [r["loss_scale"] for r in expected.history]
    assert resumed.skipped_steps == expected.skipped_steps
    for (name, a), b in zip(reference.state_dict().items(), resumed_model.state_dict().values()):
        assert torch.equal(a, b), name


def test_accumulation_scales_every_micro_batch_and_unscales_once_per_step(t4_precision, monkeypatch):
    calls = {"scale": 0, "unscale_": 0, "step": 0}
    for name in calls:
        original = getattr(torch.amp.GradScaler, name)

        def counting(self, *args, _name=name, _original=original, **kwargs):
            calls[_name] += 1
            return _original(self, *args, **kwargs)
        monkeypatch.setattr(torch.amp.GradScaler, name, counting)
    result = train(tiny_classifier(seed=0), loader(), TrainConfig(accumulation_steps=4, max_grad_norm=1.0),
                   run=QUIET)
    assert len(result.history) == 2 and all("grad_norm" in r for r in result.history)
    assert calls == {"scale": 8, "unscale_": 2, "step": 2}


def test_the_resume_test_fails_when_the_scaler_state_is_not_restored(t4_precision, monkeypatch, tmp_path):
    """The resume test above can fail: without the scaler's saved state the resumed run diverges."""
    monkeypatch.setattr(torch.amp.GradScaler, "load_state_dict", lambda self, state: None)
    with pytest.raises(AssertionError):
        test_resume_restores_the_scaler_as_an_uninterrupted_run_has_it(None, monkeypatch, tmp_path)
