import dataclasses

import pytest
import torch

from bertmem.loop.baseline import evaluate
from bertmem.loop.combined import train
from bertmem.loop.config import RunConfig, TrainConfig
from bertmem.model.loading import classifier_from_config, tiny_bert_config

QUIET = RunConfig(progress=False)  # no progress bars in tests


def run(batches, seed=0, epochs=3, lr=1e-3):
    torch.manual_seed(0)
    model = classifier_from_config(tiny_bert_config(hidden_dropout_prob=0.1))
    config = TrainConfig(epochs=epochs, learning_rate=lr, seed=seed, warmup_ratio=0.1)
    return model, train(model, batches, config, eval_loader=batches, run=QUIET)


def test_loss_decreases_on_a_learnable_task(tiny_batches):
    _, result = run(tiny_batches * 4, epochs=3, lr=5e-3)
    losses = result.losses
    assert sum(losses[-8:]) / 8 < 0.7 * sum(losses[:8]) / 8
    assert result.final_metrics["accuracy"] > 0.8


def test_same_seed_same_history_different_seed_differs(tiny_batches):
    a = run(tiny_batches, seed=1)[1].losses
    assert a == run(tiny_batches, seed=1)[1].losses
    assert a != run(tiny_batches, seed=2)[1].losses


def test_history_counts_steps_and_warmup_then_decay(tiny_batches):
    _, result = run(tiny_batches, epochs=2)
    assert [h["step"] for h in result.history] == list(range(1, 9))
    lrs = [h["lr"] for h in result.history]
    assert lrs[0] == pytest.approx(1e-3) and lrs[-1] == pytest.approx(0.0)
    assert all(x >= y for x, y in zip(lrs, lrs[1:]))
    assert [e["examples"] for e in result.epochs] == [32, 32]
    assert all(e["examples_per_s"] > 0 for e in result.epochs)


def test_max_steps_stops_early(tiny_batches):
    model = classifier_from_config(tiny_bert_config())
    result = train(model, tiny_batches, TrainConfig(epochs=5, max_steps=3), run=QUIET)
    assert len(result.history) == 3 and len(result.epochs) == 1


def test_evaluate_metrics_match_hand_count(tiny_model, tiny_batches):
    metrics = evaluate(tiny_model, tiny_batches)
    tiny_model.eval()
    with torch.no_grad():
        correct = sum(int((tiny_model(**b).logits.argmax(-1) == b["labels"]).sum()) for b in tiny_batches)
    assert metrics["accuracy"] == pytest.approx(correct / 32)
    assert 0 <= metrics["macro_f1"] <= 1


def test_plot_labels_axes(tiny_batches):
    import matplotlib
    matplotlib.use("Agg")
    _, result = run(tiny_batches * 3, epochs=1)
    ax = result.plot(smooth=3)
    assert "step" in ax.get_xlabel() and "loss" in ax.get_ylabel()


@pytest.mark.parametrize("kwargs", [{"epochs": 0}, {"learning_rate": 0}, {"warmup_ratio": 1.0},
                                    {"max_steps": 0}, {"weight_decay": -1}])
def test_bad_config(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        TrainConfig(**kwargs)


def test_bad_run_config_and_run_settings_in_the_recipe():
    with pytest.raises(ValueError, match="not a torch device"):
        RunConfig(device="gpu0")
    with pytest.raises(TypeError, match=r"RunConfig's, not the recipe's: pass run=RunConfig\(progress=...\) to"):
        TrainConfig(learning_rate=1e-3, progress=False)
    with pytest.raises(TypeError, match=r"RunConfig\(device=..., output_dir=... with checkpoint_every=... or res"):
        TrainConfig(device="cpu", checkpoint_dir="out")
    assert dataclasses.replace(TrainConfig(), seed=3).seed == 3  # replace still builds recipes


def test_empty_loader_is_an_error(tiny_model):
    with pytest.raises(ValueError, match="no batches"):
        train(tiny_model, [], TrainConfig(), run=QUIET)


def test_layerwise_decay_builds_groups_with_decayed_rates(tiny_model):
    from bertmem.loop.combined import make_optimizer_and_scheduler
    opt, _ = make_optimizer_and_scheduler(tiny_model, TrainConfig(learning_rate=1e-3, layerwise_decay=0.5,
                                                                  warmup_ratio=0.0), total_steps=10)
    rates = sorted({round(g["lr"], 12) for g in opt.param_groups})
    assert rates == [2.5e-4, 5e-4, 1e-3]  # embeddings α², layer 1 α, layer 2 and head 1
    with pytest.raises(ValueError, match="layerwise_decay"):
        TrainConfig(layerwise_decay=0.0)


def test_memory_breakdown_plot_stacks_four_categories():
    import matplotlib
    matplotlib.use("Agg")
    from bertmem.book.plots import plot_memory_breakdown
    from bertmem.memory.measure import MemoryReport
    reports = {"a": MemoryReport(1, 2, 3, 4), "b": MemoryReport(2, 2, 2, 2)}
    ax = plot_memory_breakdown(reports, unit=1, unit_name="B")
    heights = [p.get_height() for p in ax.patches]
    assert heights == [1, 2, 2, 2, 3, 2, 4, 2] and ax.get_ylabel() == "memory (B)"
    with pytest.raises(ValueError):
        plot_memory_breakdown({})


def test_every_optimizer_step_records_its_compute_time(tiny_model, tiny_batches):
    result = train(tiny_model, tiny_batches, TrainConfig(epochs=1, accumulation_steps=2), run=QUIET)
    times = [h["step_time_s"] for h in result.history]
    assert len(times) == 2 and all(t > 0 for t in times)
    assert sum(times) <= result.epochs[0]["train_time_s"]  # compute only: the epoch also loads data


def test_the_progress_bar_ends_at_the_last_step(tiny_batches, capsys):
    train(tiny_classifier_for_bar(), tiny_batches, TrainConfig(epochs=1, accumulation_steps=2),
          run=RunConfig(progress=True))
    err = capsys.readouterr().err
    assert "2/2" in err and "1/2 [" not in err.replace("\r", "\n").splitlines()[-1]


def tiny_classifier_for_bar():
    from bertmem.model.loading import tiny_classifier

    return tiny_classifier(seed=0)
