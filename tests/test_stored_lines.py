"""`bertmem plan` from the stored lines of the "Will it fit?" page: the same answer as an estimate made afresh, for
what the lines cover; afresh, and said so, for what they do not."""

import copy
import dataclasses
import json
from pathlib import Path

import pytest

import bertmem.memory.planner as planner
import bertmem.memory.stored as stored
from bertmem.book.fit_page import LINES_KEYS, read_page_data
from bertmem.cli import main
from bertmem.core.units import GIB
from bertmem.memory.cards import card_named
from bertmem.memory.estimate import model_work
from bertmem.memory.planner import PlanRequest, plan_epoch, plan_micro_batch
from bertmem.memory.speed import EpochRequest
from bertmem.memory.stored import StoredStep, stored_lines, stored_step, stored_work

ROOT = Path(__file__).resolve().parents[1]


def request(**change) -> PlanRequest:
    return dataclasses.replace(PlanRequest(model_id="bert-base-uncased", max_length=128, precision="fp16",
                                           memory_bytes=15 * GIB, effective_batch=32), **change)


def comparable(plan) -> dict:
    """A plan without what says where its numbers came from."""
    return {k: v for k, v in dataclasses.asdict(plan).items() if k not in ("estimated_from", "work")}


# choices the lines cover: full, LoRA ranks on a step and off it, frozen layers (the top one is stored apart),
# eager and SDPA, checkpointing, the three optimizers, fp32 and 16-bit, ModernBERT's micro-batch 1, a kernel the
# model lacks (DeBERTa-v3: no SDPA), a batch that splits poorly, a budget under one example
COVERED = [
    dict(),
    dict(attention="eager", precision="fp32", effective_batch=31),
    dict(model_id="distilbert/distilbert-base-uncased", lora_r=16, optimizer="adamw8bit", max_length=384),
    dict(model_id="FacebookAI/roberta-base", freeze_layers=11, gradient_checkpointing=True, optimizer="adafactor"),
    dict(model_id="microsoft/deberta-v3-base", attention="sdpa", max_length=64, lora_r=4, memory_bytes=6 * GIB),
    dict(model_id="answerdotai/ModernBERT-base", attention="eager", max_length=2048, memory_bytes=3 * GIB,
         effective_batch=8),
    dict(model_id="bert-large-uncased", max_length=512, precision="fp32", memory_bytes=3 * GIB),
]


@pytest.mark.parametrize("change", COVERED, ids=range(len(COVERED)))
def test_the_stored_lines_answer_as_an_estimate_made_afresh(change):
    asked = request(**change)
    assert isinstance(stored_step(asked), StoredStep)
    try:
        fresh = plan_micro_batch(asked, fresh=True)
    except ValueError as err:
        with pytest.raises(ValueError) as from_lines:
            plan_micro_batch(asked)
        assert str(from_lines.value) == str(err)
        return
    from_lines = plan_micro_batch(asked)
    assert comparable(from_lines) == comparable(fresh)
    versions = stored_lines()["versions"]
    assert from_lines.estimated_from.startswith("the stored lines") and (
        f"torch {versions['torch']}, transformers {versions['transformers']}" in from_lines.estimated_from)
    assert fresh.estimated_from.startswith("an estimate made now")
    assert fresh.estimated_from.endswith("(asked for with --fresh)")
    card = card_named("t4")
    assert plan_epoch(from_lines, card, EpochRequest()) == plan_epoch(fresh, card, EpochRequest())


@pytest.mark.parametrize("change, batches", [
    (dict(model_id="answerdotai/ModernBERT-base", attention="eager", max_length=512), (1, 2, 3, 7, 300)),
    (dict(model_id="google-bert/bert-large-uncased", lora_r=32, optimizer="adamw8bit", max_length=256), (1, 5, 64)),
    (dict(model_id="FacebookAI/xlm-roberta-base", freeze_layers=11, gradient_checkpointing=True), (1, 9, 200))])
def test_each_stored_peak_is_the_estimates_to_the_byte(change, batches):
    """ModernBERT's eager micro-batch 1 is off the lines (stored on its own); the top frozen layer is stored
    apart from its family's step; a LoRA rank off the checked one is read off the step."""
    asked = request(**change)
    step = stored_step(asked)
    for batch in batches:
        fresh = planner.estimate_for(asked, batch)
        assert step.peak(batch).step_peak == fresh.step_peak, batch
        assert step.peak(batch).peak_phase == fresh.peak_phase, batch


@pytest.mark.slow
def test_the_stored_work_of_every_member_is_the_matmul_count_made_now():
    """Every model the page holds, full, each LoRA rank and each number of frozen layers: the lines' work per
    example is `model_work` (DeBERTa-v3 uncounted: None, 6 · non-embedding parameters · tokens)."""
    lines = stored_lines()
    work = lines["work"]
    for model in lines["models"]:
        m = model["id"]
        assert stored_work(work, m, "full", 0) == model_work(m), m
        for rank in lines["lora_ranks"]:
            assert stored_work(work, m, "lora", rank) == model_work(m, lora_r=rank), (m, rank)
        for frozen in range(1, model["layers"]):
            assert stored_work(work, m, "freeze", frozen) == model_work(m, freeze_layers=frozen), (m, frozen)
    assert work["models"]["microsoft/deberta-v3-base"]["full"] is None


def test_the_time_is_read_off_the_stored_work_an_edit_of_it_changes_it(monkeypatch):
    card, asked = card_named("t4"), request(max_length=512)
    before = plan_epoch(plan_micro_batch(asked), card, EpochRequest())[0]
    edited = copy.deepcopy(stored_lines())
    edited["work"]["models"]["google-bert/bert-base-uncased"]["full"][0] *= 2  # twice the weights per token
    monkeypatch.setattr(stored, "stored_lines", lambda: edited)
    after = plan_epoch(plan_micro_batch(asked), card, EpochRequest())[0]
    assert after["seconds"] > 1.5 * before["seconds"]


@pytest.mark.parametrize("change, why", [
    (dict(max_length=200), "200 tokens"), (dict(optimizer="sgd"), "the optimizer sgd"),
    (dict(lora_r=12), "LoRA rank 12"), (dict(freeze_layers=12), "12 frozen layers"),
    (dict(lora_r=8, freeze_layers=2), "LoRA with frozen layers"), (dict(window=64, max_length=512), "windows"),
    (dict(kernels="cpu"), "this CPU's kernels"), (dict(model_id="prajjwal1/bert-tiny"), "prajjwal1/bert-tiny")])
def test_what_the_lines_do_not_cover_is_named(change, why):
    answer = stored_step(request(**change))
    assert isinstance(answer, str) and why in answer


def test_an_uncovered_plan_is_estimated_afresh_and_says_why(monkeypatch):
    calls = []
    original = planner.estimate_for
    monkeypatch.setattr(planner, "estimate_for", lambda r, b: calls.append(b) or original(r, b))
    plan = plan_micro_batch(request(model_id="distilbert/distilbert-base-uncased", max_length=200))
    assert calls and plan.estimated_from.endswith("(no stored lines for 200 tokens)")
    calls.clear()
    covered = plan_micro_batch(request(model_id="distilbert/distilbert-base-uncased", max_length=256))
    assert not calls and covered.work == model_work("distilbert/distilbert-base-uncased")
    assert f"\nestimated from {covered.estimated_from}\n" in covered.describe()
    assert "time:" not in covered.describe()  # no time was asked for (plan_epoch): no line says "None"


def test_the_plan_is_read_off_the_lines_an_edit_of_them_changes_it(monkeypatch):
    asked = request(effective_batch=1024)  # searched up to 1,024, not stopped at 32
    before = plan_micro_batch(asked)
    edited = copy.deepcopy(stored_lines())
    for line in edited["peaks"]["google-bert/bert-base-uncased|128|bf16|sdpa|0|full"]["lines"]:
        line[1] *= 4  # four times the bytes per example: a quarter of the micro-batch fits
    monkeypatch.setattr(stored, "stored_lines", lambda: edited)
    after = plan_micro_batch(asked)
    assert after.largest_fitting_batch < before.largest_fitting_batch
    assert after.micro_batch < before.micro_batch


def test_the_package_holds_the_pages_lines():
    page = read_page_data(ROOT / "book" / "_static" / "will_it_fit_data.js")
    lines = stored_lines()
    assert set(lines) == set(LINES_KEYS)
    assert all(lines[key] == page[key] for key in LINES_KEYS)


def test_the_command_says_where_its_answer_comes_from(capsys):
    assert main(["plan", "--model", "roberta-base", "--max-length", "256", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["estimated_from"].startswith("the stored lines") and plan["work"]["parameters"] > 10**8
    assert plan["work"]["shape"]["per_token"] == model_work("roberta-base").shape.per_token
    assert plan["epoch"]["seconds"] > 0


def test_a_local_folder_of_a_known_name_is_not_read_off_the_lines(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bert-base-uncased").mkdir()  # a reader's own model folder comes first, as model_config reads it
    assert stored_step(request()) == "no stored lines for a local model folder"


def test_a_search_past_the_stored_limit_is_estimated_afresh(monkeypatch):
    monkeypatch.setattr(planner, "estimate_for", lambda r, b: pytest.fail("estimated afresh"))
    assert plan_micro_batch(request(effective_batch=1024), max_batch=4096).estimated_from.startswith("the stored")
    seen = []
    monkeypatch.setattr(planner, "estimate_for", lambda r, b: seen.append(b) or stored_step(r).peak(min(b, 1024)))
    plan = plan_micro_batch(request(effective_batch=2048), max_batch=4096)
    assert seen and plan.estimated_from.endswith("(micro-batches beyond the stored 1024)")


def test_the_command_estimates_afresh_when_asked(capsys, monkeypatch):
    calls = []
    original = planner.estimate_for
    monkeypatch.setattr(planner, "estimate_for", lambda r, b: calls.append(b) or original(r, b))
    assert main(["plan", "--max-length", "128", "--fresh", "--json"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert calls and plan["estimated_from"].endswith("(asked for with --fresh)")
    assert plan["work"] is None and plan["epoch"]["seconds"] > 0  # counted for the time, not kept


def test_a_machine_with_other_versions_is_told_so(monkeypatch):
    monkeypatch.setattr(planner, "estimator_versions", lambda: {"torch": "2.11.0", "transformers": "5.15.0"})
    plan = plan_micro_batch(request())
    assert plan.estimated_from.startswith("the stored lines")
    assert "; this machine has torch 2.11.0, transformers 5.15.0 (--fresh" in plan.estimated_from
