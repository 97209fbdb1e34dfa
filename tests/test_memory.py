import functools
import resource
import time

import pytest
import torch
from torch import nn

from bertmem.memory.analytic import analytic_step_memory, count_bert_parameters
from bertmem.memory.estimate import estimate_step_memory, model_config
from bertmem.memory.measure import measure_step_memory
from bertmem.model.loading import classifier_from_config, tiny_bert_config


class Toy(nn.Module):
    """relu(linear(x)): autograd saves x for the linear and relu's output; nothing else."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        return torch.relu(self.lin(x))


class SavesViewsTwice(nn.Module):
    """Multiplies two column views of one (5, 3) tensor: both saved, one storage."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        h = self.lin(x)
        return h[:, :1] * h[:, 1:2] * x[:, :1]


def test_exact_accounting_on_a_toy_module():
    torch.manual_seed(0)
    model = Toy()
    opt = torch.optim.AdamW(model.parameters(), foreach=False)
    report = measure_step_memory(model, {"x": torch.randn(5, 4)}, optimizer=opt, loss_fn=lambda out: out.sum())
    assert report.parameters == (4 * 3 + 3) * 4 == 60
    assert report.gradients == 60
    assert report.optimizer_state == 2 * 60 + 2 * 4  # exp_avg + exp_avg_sq + one fp32 step scalar per tensor
    assert report.activations == 5 * 4 * 4 + 5 * 3 * 4  # x (weights excluded) + relu output
    assert report.peak is None and report.total == 60 + 60 + 128 + 140


def test_storage_deduplication_counts_each_storage_once():
    model = SavesViewsTwice()
    report = measure_step_memory(model, {"x": torch.randn(5, 4)}, loss_fn=lambda out: out.sum())
    h_bytes, x_bytes = 5 * 3 * 4, 5 * 4 * 4
    # saved: h[:, :1] and h[:, 1:2] (one storage, counted whole), x for the linear and x[:, :1] (one storage);
    # the product h1*h2 is not saved because x needs no gradient
    assert report.activations == h_bytes + x_bytes
    assert report.optimizer_state == 0


def test_tally_counts_a_reused_address_twice_when_allocations_differ():
    from bertmem.memory.measure import SavedTensorTally

    first = torch.zeros(4)
    serials = iter([1, 2])
    by_allocation = SavedTensorTally(allocation_id=lambda tensor: next(serials))
    by_address = SavedTensorTally()
    for tally in (by_allocation, by_address):
        tally.add(first)
        tally.add(first[:2])  # same storage: with another allocation id it counts as another tensor
    assert by_address.total == 16 and by_allocation.total == 32


def test_tally_excludes_weights_by_address_and_counts_an_allocation_once():
    from bertmem.memory.measure import SavedTensorTally

    weight = torch.zeros(3)
    tally = SavedTensorTally(exclude={weight.untyped_storage()._cdata}, allocation_id=lambda tensor: 7)
    tally.add(weight)  # excluded by address whatever its allocation id
    tally.add(torch.zeros(2))
    tally.add(torch.zeros(5))  # same allocation id: counted once
    assert tally.total == 8


def tiny(layers=2, hidden=32, heads=4, dropout=0.1, positions=128):
    return tiny_bert_config(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                            intermediate_size=4 * hidden, attention_probs_dropout_prob=dropout,
                            max_position_embeddings=positions)


def real_step(config, b, s, attention="eager", optimizer=True):
    torch.manual_seed(0)
    model = classifier_from_config(config, attn_implementation=attention).train()
    ids = torch.randint(0, config.vocab_size, (b, s))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "token_type_ids": torch.zeros_like(ids),
             "labels": torch.zeros(b, dtype=torch.long)}
    opt = torch.optim.AdamW(model.parameters(), foreach=False) if optimizer else None
    return measure_step_memory(model, batch, opt)


# sdpa without dropout (CPU flash kernel) is left out: its fake kernel returns a differently strided output,
# so the estimate counts one extra hidden-size copy per layer (see chapter 1)
@pytest.mark.parametrize("attention, dropout", [("eager", 0.1), ("eager", 0.0), ("sdpa", 0.1)])
def test_fake_tensor_estimate_matches_real_cpu_step(attention, dropout):
    config = tiny(dropout=dropout)
    real = real_step(config, 4, 32, attention)
    fake = estimate_step_memory(config, 4, 32, attention=attention, device="cpu")
    for field in ("parameters", "gradients", "optimizer_state", "activations"):
        assert getattr(fake, field) == pytest.approx(getattr(real, field), rel=0.01), field
    assert fake.estimated and not real.estimated


GRID = [(b, s, h, layers) for b in (2, 4) for s in (16, 64) for h in (32, 64) for layers in (1, 3)]


@pytest.mark.parametrize("b, s, h, layers", GRID)
def test_formula_matches_measured_cpu_eager_step(b, s, h, layers):
    config = tiny(layers=layers, hidden=h)
    measured = real_step(config, b, s, "eager")
    formula = analytic_step_memory(config, b, s, attention="eager", device="cpu")
    assert formula.parameters == measured.parameters == 4 * count_bert_parameters(config)
    assert formula.activations == pytest.approx(measured.activations, rel=0.05)
    assert formula.optimizer_state == pytest.approx(measured.optimizer_state, rel=0.05)


@pytest.mark.slow
@pytest.mark.parametrize("attention", ["eager", "sdpa"])
@pytest.mark.parametrize("b, s, h, layers", GRID[::3])
def test_formula_matches_cuda_estimate(attention, b, s, h, layers):
    config = tiny(layers=layers, hidden=h)
    estimate = estimate_step_memory(config, b, s, attention=attention)
    formula = analytic_step_memory(config, b, s, attention=attention, device="cuda")
    assert formula.activations == pytest.approx(estimate.activations, rel=0.05)


@pytest.mark.slow
def test_estimate_bert_base_and_large_without_memory():
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    base = estimate_step_memory("bert-base-uncased", 32, 512, attention="sdpa")
    large = estimate_step_memory("bert-large-uncased", 32, 512, attention="eager", precision="bf16")
    elapsed = time.perf_counter() - start
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    assert grown_mb < 500 and elapsed < 60  # a hang guard; benchmarks/estimator.py reports the time
    assert base.parameters == 4 * count_bert_parameters(model_config("bert-base-uncased"))
    assert 109e6 < base.parameters / 4 < 110e6  # bert-base: 109.5 M parameters
    assert base.optimizer_state == pytest.approx(2 * base.parameters, rel=1e-3)
    assert large.activations > base.activations


@pytest.mark.slow
def test_sdpa_saves_less_than_eager_and_bf16_less_than_fp32():
    eager = estimate_step_memory("bert-base-uncased", 8, 512, attention="eager")
    fused = estimate_step_memory("bert-base-uncased", 8, 512, attention="sdpa")
    half = estimate_step_memory("bert-base-uncased", 8, 512, attention="sdpa", precision="bf16")
    assert fused.activations < 0.6 * eager.activations
    assert half.activations < 0.8 * fused.activations


def test_gradient_checkpointing_keeps_only_layer_inputs():
    config = tiny(layers=3)
    full = estimate_step_memory(config, 4, 64, attention="sdpa")
    ckpt = estimate_step_memory(config, 4, 64, attention="sdpa", gradient_checkpointing=True)
    assert ckpt.activations < 0.5 * full.activations
    assert ckpt.activations >= 3 * 4 * 64 * 32 * 4  # at least one fp32 hidden state per layer


@pytest.mark.parametrize("kwargs, message", [
    ({"batch_size": 0}, "batch_size"), ({"seq_len": -1}, "seq_len"),
    ({"seq_len": 1024}, "max_position_embeddings"), ({"precision": "fp8"}, "unknown precision"),
    ({"attention": "flash"}, "attention"), ({"device": "tpu"}, "device")])
def test_bad_estimate_arguments(kwargs, message):
    args = {"config_or_model_id": "bert-base-uncased", "batch_size": 2, "seq_len": 128, **kwargs}
    with pytest.raises(ValueError, match=message):
        estimate_step_memory(**args)


def test_measure_rejects_unknown_precision(tiny_model, tiny_batches):
    with pytest.raises(ValueError, match="unknown precision"):
        measure_step_memory(tiny_model, tiny_batches[0], precision="half")


@pytest.mark.slow
def test_extended_positions_work_for_1024_tokens():
    config = model_config("bert-base-uncased")
    config.max_position_embeddings = 1024
    report = estimate_step_memory(config, 1, 1024, attention="sdpa")
    assert report.activations > estimate_step_memory("bert-base-uncased", 1, 512, attention="sdpa").activations


def test_chapter_one_saved_tensor_count_equals_the_measured_activations():
    """The short hook chapter 1 shows counts the same bytes as measure_step_memory's tally."""
    from bertmem.memory.measure import measure_step_memory, saved_activation_bytes
    from bertmem.model.loading import tiny_classifier

    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 1000, (4, 32), generator=g)
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids[:, 1] % 2}
    model = tiny_classifier(seed=0, dropout=0.1).train()
    shown = saved_activation_bytes(model, batch)
    assert all(p.grad is None for p in model.parameters())
    assert shown > 0 and shown == measure_step_memory(model, batch).activations


@pytest.mark.slow
def test_estimated_rows_label_the_sixteen_bit_format_a_t4_runs():
    """A T4 runs fp16, not bf16: the 16 GB table can say so (the same bytes either way)."""
    from bertmem.memory.planner import estimated_rows

    with pytest.raises(ValueError, match="half must be"):
        estimated_rows(half="fp32")
    rows = estimated_rows("bert-base-uncased", seq_len=64, effective_batch=8, accumulation_steps=4, half="fp16")
    assert {r["precision"] for r in rows} == {"fp32", "fp16"}


def test_estimates_shared_by_processes_are_made_once_per_question(tmp_path, monkeypatch):
    """BERTMEM_ESTIMATE_CACHE (CI): a second asking reads the first answer; another question estimates afresh."""
    from bertmem.memory import estimate as estimate_module

    made = []
    real = estimate_module.estimate_step_memory.__wrapped__

    @functools.wraps(real)  # the estimator's own signature, counting each estimate made
    def counted(*args, **kwargs):
        made.append(args)
        return real(*args, **kwargs)

    shared = estimate_module._shared_by_processes(counted)
    config = tiny_bert_config()
    monkeypatch.delenv(estimate_module.ESTIMATE_CACHE_ENV, raising=False)
    unshared = shared(config, 2, 16)
    assert len(made) == 1 and not list(tmp_path.iterdir())  # unset: nothing kept
    monkeypatch.setenv(estimate_module.ESTIMATE_CACHE_ENV, str(tmp_path))
    first, again = shared(config, 2, 16), shared(config, 2, 16, precision="fp32")
    assert len(made) == 2 and len(list(tmp_path.glob("*.pickle"))) == 1
    assert again.step_peak == first.step_peak == unshared.step_peak and again is not first
    assert again.timeline.events == first.timeline.events
    shared(config, 3, 16)  # another batch, another configuration: each its own estimate
    config.num_hidden_layers += 1
    shared(config, 2, 16)
    assert len(made) == 4 and len(list(tmp_path.glob("*.pickle"))) == 3
    estimate_module._estimator_identity.cache_clear()
    monkeypatch.setattr(estimate_module, "estimator_versions",  # another torch: estimated afresh
                        lambda: {"torch": "0.0.0", "transformers": "5.0.0"})
    shared(config, 2, 16)
    estimate_module._estimator_identity.cache_clear()
    assert len(made) == 5
