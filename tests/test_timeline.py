"""Chapter 1: the peak of a step is a moment — the timeline against PyTorch's MemTracker and hand counts."""

import itertools

import matplotlib

matplotlib.use("Agg")
import pytest
import torch
from torch.distributed._tools.mem_tracker import MemTracker

from bertmem.book.plots import plot_step_timeline
from bertmem.memory.estimate import estimate_step_memory, tracker_step_peak
from bertmem.memory.measure import measure_step_memory
from bertmem.memory.timeline import CATEGORIES, record_timeline
from bertmem.model.loading import tiny_bert_config, tiny_classifier

SMALL = tiny_bert_config(vocab_size=30522, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                         intermediate_size=1024, max_position_embeddings=512, attention_probs_dropout_prob=0.1)
GRID = [dict(attention=a, precision=p, gradient_checkpointing=c, batch_size=b, seq_len=s)
        for a, p, c, (b, s) in itertools.product(("eager", "sdpa"), ("fp32", "bf16"), (False, True),
                                                 ((8, 256), (32, 64)))]
GRID = GRID[::2] + [GRID[1], GRID[7]]  # 10 rows covering every attention × precision × checkpointing pair


def test_timeline_counts_allocations_and_frees_exactly():
    kept = torch.ones(256)  # 1 KiB alive before the step
    with record_timeline([kept]) as timeline:
        timeline.start_phase("forward")
        a = torch.ones(1024)  # +4 KiB
        b = a * 2  # +4 KiB: peak 9 KiB
        del a  # -4 KiB
        timeline.start_phase("backward")
        c = b.view(32, 32) + 1  # +4 KiB (the view adds nothing)
        del b, c
    assert timeline.live_bytes() == [5120, 9216, 5120, 9216, 5120, 1024]
    assert timeline.peak == 9216 and timeline.peak_index == 1 and timeline.peak_phase == "forward"
    assert timeline.phase_peaks() == {"forward": 9216, "backward": 9216}


@pytest.mark.slow
@pytest.mark.parametrize("case", GRID, ids=lambda c: "-".join(str(v) for v in c.values()))
def test_estimated_peak_agrees_with_pytorch_memtracker(case):
    batch, seq = case.pop("batch_size"), case.pop("seq_len")
    for device in ("cpu", "cuda"):
        report = estimate_step_memory(SMALL, batch, seq, device=device, **case)
        tracked = tracker_step_peak(SMALL, batch, seq, device=device, **case)
        assert report.step_peak == pytest.approx(tracked, rel=0.02)
        assert sum(report.peak_breakdown.values()) == report.step_peak
        if case["gradient_checkpointing"]:  # the optimizer's temporaries come on top of a full state
            assert report.peak_phase == "optimizer" and report.step_peak > report.total
        else:  # the sum over-counts: no moment holds activations and all gradients at once
            assert report.peak_phase in ("forward", "backward") and report.step_peak < report.total


def test_real_cpu_step_peak_agrees_with_memtracker():
    torch.manual_seed(0)
    ids = torch.randint(5, 1000, (8, 64))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.randint(0, 2, (8,))}

    def step(model, opt):
        model(**batch).loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    model = tiny_classifier(seed=0, hidden_size=128, intermediate_size=512, num_hidden_layers=3)
    opt = torch.optim.AdamW(model.parameters(), foreach=False)
    step(model, opt)  # AdamW state now exists, as in every later step
    tracker = MemTracker()
    tracker.track_external(model, opt, batch)
    with tracker:
        step(model, opt)
    tracked = sum(s["Total"] for s in tracker.get_tracker_snapshot("peak").values())
    report = measure_step_memory(model, batch, opt)
    assert report.step_peak == pytest.approx(tracked, rel=0.02)
    assert report.peak_breakdown["optimizer state"] == report.optimizer_state


@pytest.mark.slow
def test_bert_base_peak_is_at_the_turn_to_backward_and_below_the_sum():
    report = estimate_step_memory("bert-base-uncased", 8, 512, attention="eager", device="cpu",
                                  attention_dropout=0.1)
    at_peak = report.peak_breakdown
    assert report.peak_phase == "backward" and report.step_peak < 0.97 * report.total
    assert at_peak["saved activations"] > 0.95 * report.activations  # nearly all activations still alive
    assert at_peak["gradients"] < 0.05 * report.gradients  # and almost no gradient yet
    checkpointed = estimate_step_memory("bert-base-uncased", 8, 512, attention="sdpa", precision="bf16",
                                        gradient_checkpointing=True)
    assert checkpointed.peak_phase == "optimizer"
    assert checkpointed.peak_breakdown["saved activations"] < 2**20  # only the pooled output and logits


def test_first_step_and_steady_state_differ_by_the_optimizer_state():
    ids = torch.randint(5, 1000, (4, 16))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.tensor([0, 1, 0, 1])}
    reports = {}
    for steady_state in (False, True):
        model = tiny_classifier(seed=0)
        reports[steady_state] = measure_step_memory(model, batch, torch.optim.AdamW(model.parameters(),
                                                                                    foreach=False),
                                                    steady_state=steady_state)
    first, steady = reports[False], reports[True]
    assert first.optimizer_state == steady.optimizer_state > 0
    assert set(steady.peak_breakdown) == set(CATEGORIES)
    assert steady.peak_breakdown["optimizer state"] == steady.optimizer_state
    before_first, before_steady = first.timeline.breakdown_at(-1), steady.timeline.breakdown_at(-1)
    assert before_first["optimizer state"] == 0  # the first step creates it in its optimizer phase
    assert before_steady["optimizer state"] == steady.optimizer_state  # every later step starts with it
    assert steady.timeline.phase_peaks()["forward"] == first.timeline.phase_peaks()["forward"] + steady.optimizer_state
    assert first.step_peak <= steady.step_peak


def test_timeline_plot_marks_the_peak():
    report = estimate_step_memory(SMALL, 4, 64, device="cpu")
    ax = plot_step_timeline(report, title="small BERT")
    labels = [text.get_text() for text in ax.get_legend().get_texts()]
    assert any(label.startswith("peak") for label in labels) and "saved activations" in labels
    assert ax.get_ylabel() == "memory alive (GiB)"
    with pytest.raises(ValueError, match="no timeline"):
        plot_step_timeline(object())
