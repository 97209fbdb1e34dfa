import copy
import functools

import pytest
import torch

from bertmem.loop.accumulation import backward_window, split_batch
from bertmem.loop.config import RunConfig
from bertmem.loop.precision import (
    NonFiniteError,
    PrecisionChoice,
    autocast_context,
    check_finite,
    choose_precision,
    pure_half,
    trace_op_dtypes,
)
from bertmem.model.loading import classifier_from_config, tiny_bert_config

QUIET = RunConfig(progress=False)  # no progress bars in tests


@pytest.mark.parametrize("device, capability, cpu_bf16, expected", [
    ("cuda", (7, 5), None, "fp16"),   # Colab T4
    ("cuda", (8, 0), None, "bf16"),   # A100
    ("cuda", (8, 9), None, "bf16"),   # L4
    ("cpu", None, True, "bf16"),
    ("cpu", None, False, "fp32"),
])
def test_auto_selection_by_hardware(device, capability, cpu_bf16, expected, capsys):
    choice = choose_precision("auto", device, capability, cpu_bf16)
    assert choice.precision == expected and choice.use_scaler == (expected == "fp16")
    assert expected in capsys.readouterr().out  # the choice and its reason are printed


@pytest.mark.parametrize("kwargs, message", [
    (dict(requested="fp16", device_type="cpu", cpu_bf16=True), "needs loss scaling"),
    (dict(requested="bf16", device_type="cuda", capability=(7, 5)), "not supported"),
    (dict(requested="fp8", device_type="cpu"), "unknown precision"),
    (dict(requested="bf16", device_type="lazy"), "not supported"),
])
def test_bad_precision_requests(kwargs, message):
    with pytest.raises(ValueError, match=message):
        choose_precision(verbose=False, **kwargs)


@pytest.mark.parametrize("forced, auto", [("1", "bf16"), ("0", "fp32"), ("on", "bf16"), ("off", "fp32")])
def test_the_cpu_bf16_override_decides_both_ways(monkeypatch, capsys, forced, auto):
    """One machine runs the other kind's branch: $BERTMEM_CPU_BF16 forces the capability, and the reason says so."""
    monkeypatch.setenv("BERTMEM_CPU_BF16", forced)
    choice = choose_precision("auto", "cpu")
    assert choice.precision == auto and f"(forced: BERTMEM_CPU_BF16={forced})" in capsys.readouterr().out
    assert choose_precision("auto", "cpu", cpu_bf16=auto == "fp32", verbose=False).precision != auto  # argument wins
    if auto == "fp32":
        with pytest.raises(ValueError) as refused:
            choose_precision("bf16", "cpu", verbose=False)
        assert "--precision fp32" in str(refused.value) and "BERTMEM_CPU_BF16=1" in str(refused.value)
    else:
        assert choose_precision("bf16", "cpu", verbose=False).precision == "bf16"


def test_without_the_override_the_hardware_answers(monkeypatch):
    from bertmem.core.devices import cpu_supports_bf16, native_cpu_bf16

    monkeypatch.delenv("BERTMEM_CPU_BF16", raising=False)
    assert cpu_supports_bf16() == native_cpu_bf16()
    assert choose_precision("auto", "cpu", verbose=False).precision == ("bf16" if native_cpu_bf16() else "fp32")
    assert "forced" not in choose_precision("auto", "cpu", verbose=False).reason
    monkeypatch.setenv("BERTMEM_CPU_BF16", "maybe")
    with pytest.raises(ValueError, match="BERTMEM_CPU_BF16='maybe' is neither on nor off: set it to 1 or 0"):
        choose_precision("auto", "cpu", verbose=False)


def test_the_gpu_capability_override_makes_any_card_choose_as_a_t4(monkeypatch):
    """$BERTMEM_CUDA_CAPABILITY=7.5 on a newer card: fp16 with GradScaler, as a T4 would run (issue: GPU checks)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))  # an H100 or H200
    assert choose_precision("auto", "cuda", verbose=False).precision == "bf16"
    monkeypatch.setenv("BERTMEM_CUDA_CAPABILITY", "7.5")
    choice = choose_precision("auto", "cuda", verbose=False)
    assert choice.precision == "fp16" and choice.use_scaler
    assert "compute capability 7.5 (forced: BERTMEM_CUDA_CAPABILITY=7.5)" in choice.reason
    monkeypatch.setenv("BERTMEM_CUDA_CAPABILITY", "sm75")
    with pytest.raises(ValueError, match="write it as major.minor"):
        choose_precision("auto", "cuda", verbose=False)


def tiny():
    torch.manual_seed(0)
    return classifier_from_config(tiny_bert_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))


def batch(n=16):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 1000, (n, 12), generator=g)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": ids[:, 1] % 2}


def one_update(choice, micro_sizes=(8, 8)):
    """One SGD step over micro-batches under `choice`'s autocast and (fp16) GradScaler, as `train` takes it."""
    model = tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", enabled=choice.use_scaler)
    autocast = functools.partial(autocast_context, choice.precision, "cpu")
    before = [p.detach().clone() for p in model.parameters()]
    backward_window(model, split_batch(batch(), list(micro_sizes)), "cpu", scale=scaler.scale, autocast=autocast)
    scaler.unscale_(opt)
    scale = scaler.get_scale()
    scaler.step(opt)
    scaler.update()
    return [p.detach() - b for p, b in zip(model.parameters(), before)], scaler, scaler.get_scale() >= scale


def test_fp16_with_scaler_matches_fp32_update():
    fp32, _, _ = one_update(PrecisionChoice("fp32", "cpu", "test"))
    fp16, scaler, stepped = one_update(PrecisionChoice("fp16", "cpu", "test: CPU autocast fp16, tiny model"))
    assert stepped and scaler.get_scale() == 2.0**16
    flat32, flat16 = torch.cat([d.flatten() for d in fp32]), torch.cat([d.flatten() for d in fp16])
    assert (flat16 - flat32).norm() / flat32.norm() < 2e-2


def test_guard_fires_on_nan_in_bf16_with_a_diagnosis():
    model = tiny()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    loss = backward_window(model, [batch()], "cpu", autocast=functools.partial(autocast_context, "bf16", "cpu"))
    check_finite(1, loss, model, opt)  # healthy: no error
    model.bert.encoder.layer[0].output.dense.weight.grad[0, 0] = float("nan")
    with pytest.raises(NonFiniteError, match=r"step 7.*encoder\.layer\.0\.output\.dense\.weight.*lr=0\.0003"):
        check_finite(7, loss, model, opt)
    with pytest.raises(NonFiniteError, match="loss=nan"):
        check_finite(8, float("nan"), tiny(), opt)


def test_pure_half_casts_every_weight():
    model = pure_half(tiny())
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    with pytest.raises(ValueError):
        pure_half(tiny(), torch.float32)


def test_train_in_bf16_and_guard_stops_on_nan(bf16_cpu):
    from bertmem.loop.combined import train
    from bertmem.loop.config import TrainConfig
    data = split_batch(batch(16), [8, 8])
    result = train(tiny(), data, TrainConfig(precision="bf16", learning_rate=1e-3), run=QUIET)
    assert result.precision == "bf16" and result.skipped_steps == 0
    assert all(torch.isfinite(torch.tensor(h["loss"])) for h in result.history)
    model = tiny()
    model.classifier.register_forward_hook(lambda module, args, out: out * float("nan"))
    with pytest.raises(NonFiniteError, match="step 1"):
        train(model, data, TrainConfig(precision="bf16"), run=QUIET)
    with pytest.raises(ValueError, match="needs loss scaling"):
        train(tiny(), data, TrainConfig(precision="fp16"), run=QUIET)
    with pytest.raises(ValueError, match="precision"):
        TrainConfig(precision="half")


def test_trace_shows_autocast_dtypes():
    trace = trace_op_dtypes(tiny().eval(), batch(4), autocast=functools.partial(autocast_context, "bf16", "cpu"))
    assert trace["addmm"] == {"bfloat16": trace["addmm"]["bfloat16"]}  # linear layers run in bf16
    assert "float32" in trace["embedding"]  # embedding lookups stay fp32
    plain = trace_op_dtypes(tiny().eval(), batch(4))
    assert set(plain["addmm"]) == {"float32"}


def test_diagnose_scale_trace_names_the_three_regimes():
    from bertmem.loop.precision import diagnose_scale_trace

    assert "Healthy" in diagnose_scale_trace([2.0**16, 2.0**15, 2.0**15, 2.0**15, 2.0**15], 2.0**16)
    collapsing = [2.0**(15 - i) for i in range(20)]
    verdict = diagnose_scale_trace(collapsing, 2.0**16)
    assert "forward" in verdict and "20 of 20" in verdict
    frequent = [2.0**15, 2.0**15, 2.0**14, 2.0**14, 2.0**13, 2.0**13,
                2.0**14, 2.0**13, 2.0**13, 2.0**13, 2.0**13, 2.0**13]
    assert "Frequent" in diagnose_scale_trace(frequent, 2.0**16)
    with pytest.raises(ValueError, match="empty"):
        diagnose_scale_trace([], 1.0)


def test_other_device_types_get_fp32_unless_told_otherwise():
    choice = choose_precision("auto", "lazy", verbose=False)
    assert choice.precision == "fp32" and not choice.use_scaler and "no mixed-precision policy" in choice.reason


def test_mixed_precision_step_in_fp32_is_the_plain_weighted_step():
    """With autocast and the scaler off, chapter 3's step is the big-batch step of chapter 2 (same update)."""
    from bertmem.loop.precision import mixed_precision_step

    plain, ours = tiny(), tiny()
    plain_opt = torch.optim.SGD(plain.parameters(), lr=0.1)
    plain(**batch()).loss.backward()
    torch.nn.utils.clip_grad_norm_(plain.parameters(), 1.0)
    plain_opt.step()
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    loss = mixed_precision_step(ours, split_batch(batch(), [8, 8]), torch.optim.SGD(ours.parameters(), lr=0.1),
                                scaler, torch.float32, max_grad_norm=1.0)
    assert loss == pytest.approx(tiny()(**batch()).loss.item(), rel=1e-5)
    for a, b in zip(plain.parameters(), ours.parameters()):
        assert torch.allclose(a, b, atol=1e-6)
    assert all(p.grad is None for p in ours.parameters())  # zeroed for the next window


def test_mixed_precision_step_in_fp16_scales_unscales_and_skips_an_overflow():
    from bertmem.loop.precision import mixed_precision_step

    model = tiny()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    before = copy.deepcopy(model.state_dict())
    mixed_precision_step(model, split_batch(batch(), [8, 8]), opt, scaler, torch.float16)
    assert scaler.get_scale() == 2.0**16  # a good step keeps the scale (growth comes after 2000)
    assert any(not torch.equal(v, before[k]) for k, v in model.state_dict().items())
    model.classifier.register_forward_hook(lambda module, args, out: out * float("inf"))  # overflow
    after_good = copy.deepcopy(model.state_dict())
    mixed_precision_step(model, [batch()], opt, scaler, torch.float16)
    assert scaler.get_scale() == 2.0**15  # halved, and the step skipped
    for name, value in model.state_dict().items():
        assert torch.equal(value, after_good[name]), name


def test_pure_half_is_fp16_on_a_t4_and_bf16_where_the_hardware_has_it():
    """A T4 (compute capability 7.5) has no fast bf16: pure-half weights there are fp16, labelled so."""
    from bertmem.loop.precision import half_dtype

    assert half_dtype("cuda", (7, 5)) == torch.float16
    assert half_dtype("cuda", (8, 0)) == torch.bfloat16
    assert half_dtype("cpu") == torch.bfloat16
    assert {p.dtype for p in pure_half(tiny()).parameters()} == {torch.bfloat16}  # a CPU model


@pytest.mark.parametrize("native", [True, False])
def test_the_other_kind_is_the_opposite_of_this_cpu(monkeypatch, native):
    """CI's second unit stage and the GPU-profile dry run force the other kind: the value flips this CPU's answer."""
    from bertmem.core import devices

    monkeypatch.setattr(devices, "native_cpu_bf16", lambda: native)
    monkeypatch.setenv(devices.CPU_BF16_ENV, devices.other_cpu_bf16())
    assert devices.cpu_supports_bf16() is (not native)


def test_train_with_step_runs_the_given_step_as_train_runs_its_own(tiny_model, tiny_batches):
    """Chapter 3's harness: the page's step, with `train`'s optimizer, schedule and windows around it."""
    from torch.utils.data import DataLoader

    from bertmem.loop import TrainConfig, mixed_precision_step, train, train_with_step

    loader = DataLoader(tiny_batches, batch_size=None)  # the four batches as they are, in order
    config = TrainConfig(epochs=2, learning_rate=1e-3, accumulation_steps=2, warmup_ratio=0.25, seed=3)
    ours, theirs = copy.deepcopy(tiny_model), copy.deepcopy(tiny_model)
    stepped = train_with_step(mixed_precision_step, ours, loader, config, eval_loader=tiny_batches)
    reference = train(theirs, loader, config, eval_loader=tiny_batches, run=RunConfig(progress=False))
    assert len(stepped.history) == len(reference.history) == 4
    assert stepped.losses == pytest.approx(reference.losses, rel=1e-5)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(ours.parameters(), theirs.parameters()))
    assert stepped.final_metrics["eval_loss"] == pytest.approx(reference.final_metrics["eval_loss"], rel=1e-5)

    calls = []

    def counting(*args):  # a reader's step: counts its calls, takes no step
        calls.append(len(args[1]))
        return 0.0

    assert train_with_step(counting, copy.deepcopy(tiny_model), loader, config).losses == [0.0] * 4
    assert calls == [2, 2, 2, 2]  # one call per optimizer step, two micro-batches each


def test_train_with_step_stops_at_max_steps_and_refuses_trains_own_levers(tiny_model, tiny_batches):
    from torch.utils.data import DataLoader

    from bertmem.loop import TrainConfig, mixed_precision_step, train_with_step

    loader = DataLoader(tiny_batches, batch_size=None)
    short = train_with_step(mixed_precision_step, copy.deepcopy(tiny_model), loader,
                            TrainConfig(epochs=3, max_steps=5, learning_rate=1e-3))
    assert len(short.history) == 5 and len(short.epochs) == 2  # four steps, then one: no third epoch
    with pytest.raises(ValueError, match="oom_backoff and loss_weighting are train's"):
        train_with_step(mixed_precision_step, tiny_model, loader, TrainConfig(oom_backoff=True))
