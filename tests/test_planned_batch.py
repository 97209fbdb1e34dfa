"""Chapter 5's planned micro-batch: the bench's branch of the full recipe takes `bertmem train --micro-batch
auto`'s plan (one implementation), for the bench's budget, and the row says what it was planned for."""

import dataclasses

import numpy as np
import pandas as pd
import pytest

from bertmem.experiments.bench import PLANNED, BenchConfig, planned_batch, run_bench, variant_settings
from bertmem.experiments.fit import FitRequest, plan_run
from bertmem.model.loading import MINILM_ID


@pytest.fixture
def plain_csv(reviews_csv):
    path = reviews_csv.with_name("plain_planned.csv")
    pd.read_csv(reviews_csv).rename(columns={"review": "text", "sentiment": "label"}).to_csv(path, index=False)
    return path


def bench_for(memory: str | None, **overrides) -> BenchConfig:
    values = dict(model_id=MINILM_ID, max_length=256, effective_batch=32, memory=memory)
    return BenchConfig(**{**values, **overrides})


def test_the_planned_row_is_the_full_recipe_with_the_planners_micro_batch():
    bench = bench_for("1200MiB")
    run, data, recipe = variant_settings(bench, PLANNED)
    full_run, full_data, full_recipe = variant_settings(bench, "full recipe")
    fit = FitRequest(memory="1200MiB", effective_batch=32, plan_micro_batch=True)
    plan = plan_run(fit, full_run, full_data, full_recipe, [256])
    assert (data.micro_batch, recipe.accumulation_steps) == (plan.micro_batch, plan.accumulation_steps)
    assert 1 < data.micro_batch < 32 and data.micro_batch * recipe.accumulation_steps == 32
    # nothing else changes: the same run, data and recipe as the full recipe but for the batch split
    assert run == full_run
    assert dataclasses.replace(data, micro_batch=full_data.micro_batch) == full_data
    assert dataclasses.replace(recipe, accumulation_steps=full_recipe.accumulation_steps) == full_recipe


def test_a_run_plans_from_numpy_lengths_as_from_ints():
    """A file's token counts come as numpy integers (`bertmem train --memory t4` on texts cut to --max-length)."""
    bench = bench_for("1200MiB")
    full_run, full_data, full_recipe = variant_settings(bench, "full recipe")
    fit = FitRequest(memory="1200MiB", effective_batch=32, plan_micro_batch=True)
    from_numpy = plan_run(fit, full_run, full_data, full_recipe, list(np.array([64, 256, 256])))
    assert from_numpy == plan_run(fit, full_run, full_data, full_recipe, [64, 256, 256])


def test_the_budget_moves_the_micro_batch():
    small, large = variant_settings(bench_for("1200MiB"), PLANNED), variant_settings(bench_for("t4"), PLANNED)
    assert small[1].micro_batch < large[1].micro_batch == 32 and large[2].accumulation_steps == 1
    assert variant_settings(bench_for("t4"), "full recipe")[1].micro_batch == 8  # B/4 × 4


def test_a_cpu_bench_with_no_memory_plans_for_the_books_card():
    plan, words = planned_batch(bench_for(None))
    assert plan is not None and plan.budget == "a Colab T4"
    assert words.startswith("a Colab T4: estimated peak ") and "largest that fits" in words


def test_a_budget_nothing_fits_leaves_the_full_recipes_batch_and_says_why():
    bench = bench_for("1MiB")
    plan, words = planned_batch(bench)
    assert plan is None and words.startswith("not planned: ")
    assert variant_settings(bench, PLANNED) == variant_settings(bench, "full recipe")


@pytest.mark.slow
def test_the_planned_row_runs_with_its_plan_and_names_it(plain_csv):
    bench = BenchConfig(model_id=MINILM_ID, dataset=str(plain_csv), train_size=32, eval_size=8, max_length=32,
                        effective_batch=8, learning_rate=1e-3, progress=False,
                        variants=("full recipe", PLANNED))
    rows = {r["variant"]: r for r in run_bench(bench)["rows"]}
    full, planned = rows["full recipe"], rows[PLANNED]
    assert (full["micro-batch"], full["accumulation steps"]) == (2, 4)
    assert (planned["micro-batch"], planned["accumulation steps"]) == (8, 1)  # a T4 holds 8 × 32 tokens
    assert planned["planned for"].startswith("a Colab T4: ") and "planned for" not in full
    assert planned["activations (MiB)"] > full["activations (MiB)"]  # more examples per pass


def test_a_resumed_bench_refuses_a_planned_row_of_another_plan():
    from bertmem.experiments.bench import same_plan

    same_plan({"micro-batch": 8}, 8)
    with pytest.raises(ValueError, match="ran micro-batch 8, this bench plans 16: pass --memory"):
        same_plan({"micro-batch": 8}, 16)


def test_a_bad_memory_fails_before_the_data_loads():
    with pytest.raises(ValueError, match="cannot read memory size"):
        BenchConfig(memory="lots")


def test_the_planned_rows_precision_is_the_full_recipes_without_a_plan(monkeypatch):
    import bertmem.experiments.bench as bench_module

    def no_plan(bench):
        raise AssertionError("planned only to read a precision")

    monkeypatch.setattr(bench_module, "planned_batch", no_plan)
    bench = bench_for(None, variants=(PLANNED,))
    assert bench_module.precisions_used(bench) == bench_module.precisions_used(
        dataclasses.replace(bench, variants=("full recipe",)))
    note = bench_module.auto_precision_note(bench)  # no plan asked for here either
    assert note is None or PLANNED in note
