"""The "Will it fit?" page's data: exact peak lines, the grid it covers, and the package's constants (the page).

The page's answers against `bertmem plan --json` and the page in a browser: tests/test_site_browser.py."""

import json
from pathlib import Path

import numpy as np
import pytest
from transformers import BertConfig

from bertmem.book.fit_page import (
    ADAPTATIONS,
    FIT_OPTIMIZERS,
    LORA_RANKS,
    FitConfig,
    adaptation_values,
    affine_family,
    config_lines,
    expand,
    grid,
    model_lengths,
    optimizer_facts,
    page_constants,
    peak_lines,
    read_page_data,
    reusable,
    upper_envelope,
    write_page_data,
)
from bertmem.memory.cards import CARDS
from bertmem.memory.estimate import estimate_step_memory
from bertmem.memory.planner import PlanRequest
from bertmem.model.adapters import LORA_RANK
from bertmem.model.known import KNOWN_MODELS

DATA = Path(__file__).resolve().parents[1] / "book" / "_static" / "will_it_fit_data.js"


@pytest.fixture(scope="module")
def data():
    if not DATA.exists():
        pytest.fail(f"{DATA.name} is missing: generate it with `make fit-page`")
    return read_page_data(DATA)


def test_the_envelope_is_the_highest_line_at_every_batch_and_the_earliest_of_ties():
    rng = np.random.default_rng(0)
    fixed, per_example = rng.integers(0, 10**6, 400), rng.integers(0, 5000, 400)
    fixed[7], per_example[7] = fixed[3], per_example[3]  # a tie: the earlier line (3) is the one kept
    kept = upper_envelope(fixed, per_example, top=200)
    for b in range(1, 201):
        values = fixed + b * per_example
        assert max(values[kept]) == values.max()
        assert kept[int(np.argmax(values[kept]))] == int(np.argmax(values))  # the first moment of the peak
    assert 7 not in kept and len(kept) < 40


def test_two_estimates_give_the_peak_at_every_micro_batch():
    """The live bytes of a step are lines in the micro-batch: batches 2 and 3 give the peak at 1, 5 and 9."""
    config = BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                        vocab_size=500, max_position_embeddings=128)
    estimate = lambda b: estimate_step_memory(config, b, 32, precision="bf16", optimizer="none")  # noqa: E731
    found = peak_lines(estimate(2), estimate(3))
    for b in (1, 5, 9):
        lines = [fixed + b * per_example for fixed, per_example, *_ in found["lines"]]
        assert max(lines) == estimate(b).step_peak
    report = estimate(5)
    fixed, per_example, weights, gradients = found["end"]
    assert fixed + 5 * per_example == report.timeline.live_bytes()[-1]
    assert weights == report.timeline.breakdown_at(-1)["weights"] > 0


def test_the_grid_covers_every_known_checkpoint_to_8192_tokens_where_positions_allow():
    configs = grid()
    assert {c.model_id for c in configs} == set(KNOWN_MODELS) and len(KNOWN_MODELS) >= 12
    assert model_lengths("google-bert/bert-base-uncased") == (64, 128, 256, 384, 512)  # 384: SQuAD's
    assert model_lengths("FacebookAI/roberta-large")[-1] == 512  # 514 positions, two spent on an offset
    assert 8192 in model_lengths("answerdotai/ModernBERT-large") and 8192 in model_lengths("microsoft/deberta-v3-base")
    assert {c.attention for c in configs if "deberta" in c.model_id} == {"eager"}


def test_the_page_data_is_small_and_covers_the_grid(data):
    assert DATA.stat().st_size <= 10**6  # what the page loads at first: everything
    assert {m["id"] for m in data["models"]} == set(KNOWN_MODELS)
    assert set(data["peaks"]) == {c.key for c in grid()}, "stale data: run scripts/make_fit_page.py"
    assert max(max(m["lengths"]) for m in data["models"]) == 8192
    for model in data["models"]:
        assert set(model["optimizers"]) == set(FIT_OPTIMIZERS)
        assert all(set(by) == set(ADAPTATIONS) for by in model["optimizers"].values())
        for adaptation in ("lora", "freeze"):  # every member the page offers, for every optimizer
            for by in model["optimizers"].values():
                assert all(len(expand(by[adaptation], v)) == 2 for v in adaptation_values(model["id"], adaptation))
        assert model["accelerate"]["adam_fp32"] == 4 * model["accelerate"]["weights"]
    assert data["lora_ranks"] == list(LORA_RANKS) and data["lora_rank"] in LORA_RANKS
    for key, entry in data["peaks"].items():  # every member of every stored family rebuilds to peak lines
        model_id, adaptation = key.split("|")[0], key.split("|")[-1]
        members = [expand(entry, v) for v in adaptation_values(model_id, adaptation)] if adaptation != "full" else [
            entry]
        assert all(m["lines"] and len(m["end"]) == 4 and all(len(line) == 5 for line in m["lines"])
                   for m in members), key


def test_the_page_data_holds_the_packages_cards_and_constants(data):
    """A change to the planner's margin, context, LoRA rank or card table makes stale data fail here."""
    request = PlanRequest()
    assert (data["margin"], data["context"], data["lora_rank"]) == (
        request.allocator_margin, request.cuda_context_bytes, LORA_RANK)
    cards = {c["key"]: (c["memory"], c["bf16"]) for c in data["cards"]}
    assert cards == {key.lower(): (card.memory_mib * 2**20, card.low_precision() == "bf16")
                     for key, card in CARDS.items() if card.memory_mib}
    assert len(cards) >= 6 and not cards["t4"][1]
    # the time estimate's rates and defaults: what the package holds today (scripts/make_fit_page.py
    # --constants-only refreshes them)
    constants = page_constants()
    assert {key: data[key] for key in constants} == json.loads(json.dumps(constants))
    t4 = next(c for c in data["cards"] if c["key"] == "t4")
    assert t4["rates"]["fp16"]["tflops"] == CARDS["T4"].training_tflops("fp16") and t4["rates"]["fp16"]["measured"]
    assert "rests on one blog run's" in t4["rates"]["fp16"]["note"]  # a measured rate says what it rests on
    assert all("note" not in rate for card in data["cards"] if card["key"] != "t4" for rate in card["rates"].values())


def test_the_page_data_carries_each_models_non_embedding_parameters_for_the_fallback(data):
    """The time estimate's fallback for a model the matmul count does not cover is 6 · non-embedding parameters ·
    tokens (#69 finding 9): each model's `non_embedding` is the package's count (the classifier less its embeddings
    module, built on the meta device), and the page's basis line is the one `bertmem plan` prints."""
    import torch

    from bertmem.memory.estimate import model_config, model_work
    from bertmem.memory.speed import ModelWork
    from bertmem.model.known import attention_kernels
    from bertmem.model.loading import classifier_from_config
    from bertmem.model.matmuls import non_embedding_parameters

    work = data["work"]["models"]
    assert set(work) == set(KNOWN_MODELS)
    for model_id, entry in work.items():
        config = model_config(model_id)
        with torch.device("meta"):
            count = non_embedding_parameters(classifier_from_config(config, attention_kernels(config)[-1]))
        assert entry["non_embedding"] == count == model_work(model_id).non_embedding, model_id
        assert entry["non_embedding"] < entry["parameters"], model_id
    deberta = work["microsoft/deberta-v3-base"]
    assert deberta["full"] is None and deberta["non_embedding"] < 0.5 * deberta["parameters"]  # the 128k table
    script = (DATA.parent / "will_it_fit.js").read_text(encoding="utf-8")
    assert f'"{ModelWork(1, non_embedding=1).counted_as()}"' in script
    assert "6.0 * n * tokens" in script and "entry.non_embedding" in script


def test_the_page_data_is_what_the_planner_estimates_today(data):
    """Stale data fails here: one configuration's lines and one model's optimizer figures, recomputed."""
    model = "distilbert/distilbert-base-uncased"
    config = FitConfig(model, 128, "fp32", "sdpa", False, "full")
    assert config_lines(config) == data["peaks"][config.key]
    facts = next(m for m in data["models"] if m["id"] == model)["optimizers"]["adamw"]["full"]
    assert optimizer_facts(model, "full", "adamw") == facts


@pytest.mark.parametrize("adaptation", ["lora", "freeze"])
def test_every_member_of_a_family_is_what_the_planner_estimates_for_it_on_its_own(data, adaptation):
    """A stored step stands for the members between its ends: each is held against its own estimate (DistilBERT,
    every rank and every number of frozen layers; BERT's twelve layers: tests marked slow)."""
    model = "distilbert/distilbert-base-uncased"
    config = FitConfig(model, 128, "bf16", "sdpa", False, adaptation)
    family = data["peaks"][config.key]
    for value in adaptation_values(model, adaptation):
        assert expand(family, value) == config_lines(config, value), (adaptation, value)
    facts = next(m for m in data["models"] if m["id"] == model)["optimizers"]["adamw"][adaptation]
    for value in adaptation_values(model, adaptation):
        assert expand(facts, value) == optimizer_facts(model, adaptation, "adamw", value), (adaptation, value)


@pytest.mark.slow
@pytest.mark.parametrize("attention, checkpointing", [("sdpa", False), ("eager", True)])
def test_every_number_of_frozen_bert_layers_is_what_the_planner_estimates(data, attention, checkpointing):
    model = "google-bert/bert-base-uncased"
    config = FitConfig(model, 384, "fp32", attention, checkpointing, "freeze")
    family = data["peaks"][config.key]
    assert any("check" in segment for segment in family["segments"]), "BERT's frozen layers move the lines evenly"
    for value in adaptation_values(model, "freeze"):
        assert expand(family, value) == config_lines(config, value), value


def test_a_family_is_stored_as_a_step_only_where_the_step_is_exact():
    even = {v: {"lines": [[100 + 7 * v, 5 + v, 0]], "end": [3 * v]} for v in range(1, 9)}
    estimated = []
    family = affine_family(tuple(range(1, 9)), (1, 7), 4, lambda v: estimated.append(v) or even[v])
    assert sorted(estimated) == [1, 4, 7, 8]  # the ends, the check and the member outside the span
    assert family["segments"][0]["step"] == {"lines": [[7, 1, 0]], "end": [3]} and set(family["direct"]) == {"8"}
    assert all(expand(family, v) == even[v] for v in range(1, 9))
    uneven = {**even, 4: {"lines": [[129, 9, 0]], "end": [12]}}  # member 4 off the step by one byte
    family = affine_family(tuple(range(1, 9)), (1, 7), 4, uneven.__getitem__)
    assert not any("check" in segment for segment in family["segments"])  # every member estimated, then stored
    assert set(family["direct"]) == {"4"} and all(expand(family, v) == uneven[v] for v in range(1, 9))
    other_shape = {**even, 7: {"lines": [[1, 1, 0], [2, 2, 0]], "end": [21]}}
    family = affine_family(tuple(range(1, 9)), (1, 7), 4, other_shape.__getitem__)
    assert all(expand(family, v) == other_shape[v] for v in range(1, 9)) and "7" in family["direct"]
    not_whole = {**even, 7: {"lines": [[150, 12, 0]], "end": [21]}}  # 107 → 150: no whole step of 6
    family = affine_family(tuple(range(1, 9)), (1, 7), 4, not_whole.__getitem__)
    assert all(expand(family, v) == not_whole[v] for v in range(1, 9))
    with pytest.raises(KeyError):
        expand(affine_family((1, 2, 3), (1, 3), 2, even.__getitem__), 5)


def test_estimates_are_reused_only_from_data_of_the_same_versions(data):
    found = reusable(data)
    key = "google-bert/bert-base-uncased|128|fp32|sdpa|0|lora"
    family = data["peaks"][key]
    estimated = {int(v) for v in family["direct"]} | {x for s in family["segments"]  # ends and checked rank
                                                       for x in (s["low"], s["high"], s.get("check", s["low"]))}
    assert set(found[key]) == estimated and all(found[key][v] == expand(family, v) for v in estimated)
    old = {"versions": data["versions"], "lora_rank": 8, "max_batch": data["max_batch"],
           "peaks": {key: expand(data["peaks"][key], 8),
                     key.replace("lora", "freeze"): expand(data["peaks"][key.replace("lora", "freeze")], 6)}}
    assert reusable(old) == {key: {8: old["peaks"][key]},
                             key.replace("lora", "freeze"): {6: old["peaks"][key.replace("lora", "freeze")]}}
    assert reusable(dict(old, versions={"torch": "2.0.0", "transformers": "4.0.0"})) == {}
    assert reusable(dict(old, max_batch=512)) == {}  # answers searched to another limit


def test_the_data_file_round_trips_and_refuses_a_foreign_file(tmp_path):
    path = tmp_path / "data.js"
    size = write_page_data(path, {"a": [1, 2]})
    assert read_page_data(path) == {"a": [1, 2]} and size == path.stat().st_size
    path.write_text("window.X = {};")
    with pytest.raises(ValueError, match="make_fit_page"):
        read_page_data(path)


@pytest.mark.slow
def test_the_optimizer_adds_a_constant_to_forward_and_backward():
    """What `optimizer_facts` relies on (it raises otherwise): forward and backward are the same step with the
    state alive; here for a model whose optimizer step can hold the peak (XLM-R's large embedding)."""
    state, rise = optimizer_facts("FacebookAI/xlm-roberta-base", "full", "adamw")
    assert state > 2 * 4 * 270_000_000 and rise > 0  # AdamW's step works through temporaries


@pytest.mark.slow
@pytest.mark.parametrize("model, off", [("answerdotai/ModernBERT-base", True),
                                        ("google-bert/bert-base-uncased", False)])
def test_one_example_is_estimated_on_its_own_where_it_is_off_the_lines(model, off):
    """ModernBERT's eager attention at micro-batch 1 is above the line through 2 and 3; BERT's is on it."""
    from bertmem.book.fit_page import _estimate, off_the_line_at_one

    config = FitConfig(model, 512, "bf16", "eager", False, "full")
    lines = config_lines(config)
    on_line = max(fixed + per_example for fixed, per_example, *_ in lines["lines"])
    assert off_the_line_at_one(config) == off == ("one" in lines)
    assert (_estimate(config, 1).step_peak != on_line) == off
    if off:
        assert lines["one"]["lines"][0][0] == _estimate(config, 1).step_peak


@pytest.mark.slow
def test_the_page_quotes_the_readings_it_was_checked_against_and_the_gpu_run(data):
    """The validation line names what the published readings are (one model, one length, one card) and what the
    recorded GPU run of A3 showed; stale data fails here."""
    from bertmem.book.fit_page import validation_summary
    from bertmem.book.published import published_rows

    summary = validation_summary()
    assert data["validation"] == summary
    rows = published_rows(("fit", "held-out"))
    assert all(f"{row.model} at {row.seq_len} tokens on {row.card}" in summary["readings_of"] for row in rows)
    assert 0 <= summary["gpu_short"] <= summary["gpu_shapes"] and summary["gpu_card"]
    assert summary["gpu_context_low_mib"] > summary["assumed_context_mib"]  # A3's card took more than assumed


def test_the_page_describes_the_checked_runs_from_the_rows():
    """The published runs the planner is checked against are described from the CSV (all fp32, eager attention,
    some with checkpointing, some nvidia-smi upper bounds), and the words follow the rows."""
    import dataclasses

    from bertmem.book.fit_page import checks_described
    from bertmem.book.published import published_rows

    rows = published_rows(("check",))
    words = checks_described(rows)
    assert "all fp32 with eager attention" in words and "4 with gradient checkpointing" in words
    assert "11 ran or ran out of memory and 5 are nvidia-smi readings" in words
    assert all(card in words for card in ("V100 16GB", "RTX 2080 Ti", "Quadro RTX 5000", "RTX 2070 Max-Q", "T4"))
    half = [dataclasses.replace(rows[0], precision="fp16")] + rows[1:]
    assert "fp16 or fp32 with eager attention" in checks_described(half)
    plain = [dataclasses.replace(r, gradient_checkpointing=False, measured="fits") for r in rows]
    assert "none with gradient checkpointing" in checks_described(plain)
    assert "16 ran or ran out of memory;" in checks_described(plain)
    page = " ".join((DATA.parents[1] / "will_it_fit.md").read_text(encoding="utf-8").split())
    assert "all fp32 with eager attention and every weight trained" in page


def test_the_whole_run_note_follows_a3s_recorded_run():
    """The page answers for one training step; its note quotes A3's whole run of chapter 5's recipe against one
    step of its nominal shape, and whether the planner's defaults were short, from the recorded run: a run that
    peaked lower flips the word."""
    import copy

    from bertmem.book.fit_page import whole_run
    from bertmem.book.gpu_measured import recorded_gpu_run

    run = recorded_gpu_run()
    found = whole_run(run)
    assert found["run_peak_gib"] > found["step_peak_gib"] and found["planner_short"]
    assert round(found["run_peak_gib"], 2) == 3.52 and round(found["step_peak_gib"], 2) == 3.14
    assert round(100 * found["run_over_step"]) == 12 and round(found["planner_asks_gib"], 2) == 3.74
    lower = copy.deepcopy(run)
    for key in ("bench", "bench, cuDNN attention off"):
        for row in lower[key]["rows"]:
            if row["variant"] == "full recipe":
                row["CUDA peak (MiB)"] = 2048
    flipped = whole_run(lower)
    assert not flipped["planner_short"] and flipped["run_over_step"] < 0
    script = (DATA.parent / "will_it_fit.js").read_text(encoding="utf-8")
    assert "v.gpu_run.planner_short ? \"short\"" in script and "Estimated to fit, for one training step." in script
