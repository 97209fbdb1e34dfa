"""The device follows the model: no helper lets a CPU tensor reach a model placed on another device.

CI has no GPU, so the model is placed on `second_device.DEVICE` — real CPU data that reports another device —
and every helper runs on it with CPU batches from ordinary loaders. A helper that forgets to move a tensor to
the model's device raises `DeviceMixingError` here, as it would crash on a GPU.
"""

import contextlib
import dataclasses
import random
from types import SimpleNamespace

import pytest
import torch
from second_device import DEVICE, DeviceMixingError, OnSecondDevice, SecondDevice
from torch.utils.data import DataLoader

from bertmem.core.devices import model_device
from bertmem.core.faults import interrupt_after
from bertmem.data.loaders import DataConfig, load_frames
from bertmem.experiments.bench import BenchConfig, run_variant
from bertmem.experiments.run import predict_texts
from bertmem.loop.baseline import evaluate
from bertmem.loop.combined import train
from bertmem.loop.config import RunConfig, TrainConfig
from bertmem.memory.measure import measure_step_memory
from bertmem.model.loading import tiny_classifier

QUIET = RunConfig(progress=False)  # no progress bars in tests



def examples(n: int = 32) -> list[dict]:
    """CPU examples of varied length, as a DataLoader yields them."""
    rng = random.Random(0)
    out = []
    for i in range(n):
        ids = torch.tensor([101, 7 + i % 2] + [rng.randrange(200, 990) for _ in range(10)] + [102])
        out.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.tensor(i % 2)})
    return out


def loader(batch_size: int = 4) -> DataLoader:
    return DataLoader(examples(), batch_size=batch_size, shuffle=True, generator=torch.Generator().manual_seed(1))


def placed(model: torch.nn.Module) -> torch.nn.Module:
    """The model on the second device, once, as a notebook places it on the GPU."""
    model.to(DEVICE)
    assert model_device(model) == DEVICE and isinstance(next(model.parameters()), OnSecondDevice)
    return model


def test_the_second_device_catches_a_cpu_batch_reaching_the_model():
    batch = next(iter(loader()))
    with SecondDevice():
        model = placed(tiny_classifier())
        with pytest.raises(DeviceMixingError, match="move it to the model's device"):
            model(**batch)
        assert float(model(**{k: v.to(DEVICE) for k, v in batch.items()}).loss) > 0


def test_a_helper_that_forgets_to_move_the_batch_is_caught(monkeypatch):
    import bertmem.loop.accumulation as accumulation

    monkeypatch.setattr(accumulation, "move_to", lambda batch, device: batch)  # the bug this test must catch
    with SecondDevice(), pytest.raises(DeviceMixingError):
        train(placed(tiny_classifier()), loader(), TrainConfig(learning_rate=1e-3, max_steps=1), run=QUIET)


@pytest.mark.parametrize("settings", [
    dict(),
    dict(accumulation_steps=2),
    dict(precision="auto"),
    dict(layerwise_decay=0.9),
    dict(gradient_checkpointing=True),
], ids=["plain", "accumulation", "precision-auto", "layerwise-decay", "checkpointing"])
@pytest.mark.slow
def test_train_and_evaluate_follow_the_model(settings, monkeypatch):
    # activation checkpointing saves the RNG state of the inputs' device through torch.<device>; the data lives on
    # the CPU (whose RNG it saves anyway), so the second device's RNG module has nothing to keep
    rng = SimpleNamespace(device=lambda device: contextlib.nullcontext(), set_rng_state=lambda state: None,
                          get_rng_state=lambda: torch.zeros(1, dtype=torch.uint8))
    monkeypatch.setattr(torch, DEVICE.type, rng, raising=False)
    with SecondDevice():
        model = placed(tiny_classifier())
        result = train(model, loader(), TrainConfig(learning_rate=1e-3, max_steps=4, **settings),
                       eval_loader=loader(8), run=QUIET)
        assert len(result.losses) == 4 and all(loss > 0 for loss in result.losses)
        assert 0 <= result.final_metrics["accuracy"] <= 1
        assert model_device(model) == DEVICE and evaluate(model, loader(8))["eval_loss"] > 0


@pytest.mark.slow
def test_resume_follows_the_model(tmp_path):
    config = TrainConfig(learning_rate=1e-3, epochs=2)
    with SecondDevice():
        expected = train(placed(tiny_classifier()), loader(), config, run=QUIET).losses
        saving = RunConfig(progress=False, output_dir=str(tmp_path), checkpoint_every=2)
        with pytest.raises(KeyboardInterrupt):
            train(interrupt_after(placed(tiny_classifier()), 11), loader(), config, run=saving)
        resumed = placed(tiny_classifier())
        result = train(resumed, loader(), config, run=dataclasses.replace(saving, resume=True))
        assert result.losses == expected and isinstance(next(resumed.parameters()), OnSecondDevice)


def test_measure_step_memory_and_predictions_follow_the_model(tokenizer):
    batch = next(iter(loader()))
    with SecondDevice():
        model = placed(tiny_classifier(vocab_size=tokenizer.vocab_size))
        report = measure_step_memory(model, batch, torch.optim.AdamW(model.parameters()))
        assert report.activations > 0 and report.step_peak > report.parameters
        answers = predict_texts(model, tokenizer, ["a fine film", "a dull one"], max_length=16)
        assert [set(a) for a in answers] == [{"text", "label", "probability"}] * 2


def test_a_bench_variant_follows_the_model(tmp_path):
    rows = [(f"movie {i} was {'great' if i % 2 else 'awful'}", "pos" if i % 2 else "neg") for i in range(40)]
    import pandas as pd

    path = tmp_path / "reviews.csv"
    pd.DataFrame(rows, columns=["text", "label"]).to_csv(path, index=False)
    bench = BenchConfig(model_id="tiny-bert", dataset=str(path), train_size=24, eval_size=8, max_length=16,
                        effective_batch=8, learning_rate=1e-3, progress=False, device=str(DEVICE))
    frames = load_frames(DataConfig(dataset=str(path), train_size=24, eval_size=8))
    with SecondDevice():
        row = run_variant(bench, "full recipe", frames, peak_tflops=None)
    assert row["activations (MiB)"] > 0 and 0 <= row["accuracy"] <= 1
