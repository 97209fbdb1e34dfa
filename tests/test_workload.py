"""Chapter sizes and the FLOP-based minutes shown in setup cells and the introduction."""

import dataclasses
from pathlib import Path

import pytest
import torch

from bertmem.book.chapters import (
    FIRST_RUN_MINUTES,
    MODEL_LOAD_SECONDS,
    Run,
    chapter_bench,
    chapter_minutes,
    chapter_runs,
    chapter_settings,
    cpu_profile_minutes,
    cpu_work_minutes,
    run_seconds,
    setup_line,
)
from bertmem.core.units import GIB
from bertmem.data.loaders import DataConfig
from bertmem.memory.cards import CARDS, Card, card_for
from bertmem.memory.estimate import model_work, parameter_count
from bertmem.memory.speed import ModelWork
from bertmem.memory.planner import PlanRequest, plan_micro_batch
from bertmem.profiles import get_profile

BERT_BASE = 109_483_778
BERT_BASE_WORK = model_work("bert-base-uncased")
ROOT = Path(__file__).resolve().parents[1]


def test_parameter_count_of_bert_base_classifier():
    assert parameter_count("bert-base-uncased") == BERT_BASE


def test_run_seconds_is_six_nt_at_its_precision_plus_two_nt_in_fp32_plus_a_load_where_nothing_is_counted():
    """N: the non-embedding parameters (Kaplan et al.'s), not all of them: the embeddings multiply nothing."""
    data = DataConfig("imdb", train_size=100, eval_size=50, max_length=512)
    card = Card("test", 16, {"fp32": 10.0, "fp16": 80.0}, "none")
    # an architecture the matmul count does not cover, with a 500,000-parameter embedding table
    uncounted = ModelWork(parameters=1_500_000, non_embedding=1_000_000)
    seconds = run_seconds(Run(data, epochs=2, repeats=3), uncounted, card, utilisation=0.5)
    train, evaluation = 6 * 1e6 * 100 * 512 * 2, 2 * 1e6 * 50 * 512 * 2  # one evaluation per epoch
    assert seconds == pytest.approx(3 * ((train + evaluation) / (10e12 * 0.5) + MODEL_LOAD_SECONDS))
    fp16 = run_seconds(Run(data, precision="auto"), uncounted, card, utilisation=0.5)
    # training at the fp16 rate, evaluation in fp32 (evaluate runs without autocast)
    expected = 6 * 1e6 * 100 * 512 / (80e12 * 0.5) + 2 * 1e6 * 50 * 512 / (10e12 * 0.5) + MODEL_LOAD_SECONDS
    assert fp16 == pytest.approx(expected)


def test_run_seconds_counts_a_counted_models_matmuls_forward_and_backward_and_evaluation_forward_only():
    data = DataConfig("imdb", train_size=100, eval_size=50, max_length=512)
    card = Card("test", 16, {"fp32": 10.0}, "none", utilisation=1.0)
    shape = BERT_BASE_WORK.shape
    lengths = torch.full((1,), 512)
    seconds = run_seconds(Run(data), BERT_BASE_WORK, card)
    expected = (100 * shape.training_flops(lengths) + 50 * shape.forward_flops(lengths)) / 10e12
    assert seconds == pytest.approx(expected + MODEL_LOAD_SECONDS)
    assert shape.training_flops(lengths) < 6 * BERT_BASE * 512  # the embeddings multiply nothing
    # an edit of the count is what the minutes follow: twice the attention's width, more time
    wider = ModelWork(BERT_BASE, dataclasses.replace(shape, hidden=2 * shape.hidden))
    assert run_seconds(Run(data), wider, card) > seconds


def test_deberta_v3s_fallback_is_six_times_its_non_embedding_parameters_not_all_of_them():
    """#69 finding 9: the matmul count does not cover DeBERTa-v3, whose 128k-token embedding table holds over half
    of the base model's parameters and multiplies nothing. The fallback is 6 · (all parameters − the embeddings
    module's) · tokens, Kaplan et al.'s 6N: below 6 · all parameters · tokens by exactly the table's share."""
    from bertmem.memory.estimate import model_config
    from bertmem.model.loading import classifier_from_config

    work = model_work("microsoft/deberta-v3-base")
    assert work.shape is None  # relative-position attention: not counted
    with torch.device("meta"):
        model = classifier_from_config(model_config("microsoft/deberta-v3-base"), "eager")
    embeddings = sum(p.numel() for name, p in model.named_parameters() if name.startswith("deberta.embeddings."))
    assert work.parameters == sum(p.numel() for p in model.parameters())
    assert work.non_embedding == work.parameters - embeddings
    assert embeddings > 0.5 * work.parameters  # 128,100 × 768 of the 184 M
    tokens = 512
    every = 6 * work.parameters * tokens  # the fallback before
    assert work.example_flops(tokens) == pytest.approx(6 * (work.parameters - embeddings) * tokens)
    assert work.example_flops(tokens) < 0.5 * every
    assert 1 - work.example_flops(tokens) / every == pytest.approx(embeddings / work.parameters)
    # checkpointing's second forward and an evaluation pass: 2 · N · tokens each
    assert work.example_flops(tokens, checkpointing=True) == pytest.approx(8 * work.non_embedding * tokens)
    assert work.example_forward_flops(tokens) == pytest.approx(2 * work.non_embedding * tokens)
    assert "6 · non-embedding parameters · tokens" in work.counted_as()


def test_a_model_the_count_does_not_cover_needs_its_non_embedding_parameters():
    with pytest.raises(ValueError, match="non-embedding parameters"):
        ModelWork(parameters=1000)
    assert ModelWork(parameters=1000, shape=BERT_BASE_WORK.shape).non_embedding is None  # counted: not needed


def test_the_t4s_measured_rates_are_its_published_runs_in_the_matmul_count():
    """earino2026t4: 32 × 128 tokens of ModernBERT-base in 0.30 s (fp16); liu2022gact: 54.8 bert-base sequences of
    128 tokens per second (fp32): the rates the time estimate divides are those runs' matmul FLOPs per second."""
    t4 = CARDS["T4"]
    modernbert = model_work("answerdotai/ModernBERT-base").example_flops(128)
    bert = model_work("bert-base-uncased").example_flops(128)
    assert t4.measured_tflops["fp16"] == pytest.approx(32 * modernbert / 0.30 / 1e12, abs=0.005)
    assert t4.measured_tflops["fp32"] == pytest.approx(54.8 * bert / 1e12, abs=0.005)


def test_a_t4_runs_at_its_published_bert_throughput_and_other_cards_at_the_assumed_share():
    t4, l4 = CARDS["T4"], CARDS["L4"]
    assert t4.training_tflops("auto") == t4.measured_tflops["fp16"]
    assert t4.training_tflops("fp32") == t4.measured_tflops["fp32"] and "earino2026t4" in t4.measured_source
    assert l4.training_tflops("bf16") == pytest.approx(l4.tflops("bf16") * l4.utilisation)
    bib = (ROOT / "book" / "references.bib").read_text()
    assert all(f"{{{key}," in bib for key in t4.measured_source.split(","))


def test_every_chapter_pays_its_measured_cpu_work():
    cpu = cpu_work_minutes()
    assert set(cpu) == {path.stem.split("_")[0] for path in (ROOT / "book").glob("*.ipynb")}
    minutes = chapter_minutes(get_profile("gpu", env={}), CARDS["T4"])
    assert all(minutes[c] >= cpu[c] for c in minutes)


def test_gpu_profile_fits_the_time_budget_on_a_t4():
    """Every chapter within 10 minutes on a T4, the first run's install and downloads included."""
    minutes = chapter_minutes(get_profile("gpu", env={}), CARDS["T4"])
    assert set(minutes) == {"00", "01", "02", "03", "04", "05", "05b", "06", "07", "08", "09", "09b",
                            "A1", "A3", "A4", "A5"}
    assert max(minutes.values()) + FIRST_RUN_MINUTES <= 10, minutes
    assert sum(minutes.values()) <= 60, minutes


def test_full_profile_takes_hours_and_faster_cards_take_less():
    full = chapter_minutes(get_profile("full", env={}), CARDS["T4"])
    gpu_t4 = chapter_minutes(get_profile("gpu", env={}), CARDS["T4"])
    gpu_l4 = chapter_minutes(get_profile("gpu", env={}), CARDS["L4"])
    assert sum(full.values()) > 5 * sum(gpu_t4.values())
    assert all(gpu_l4[c] <= gpu_t4[c] for c in gpu_t4)


@pytest.mark.slow
def test_gpu_profile_batch_fits_a_t4_in_fp32_by_the_planner():
    profile = get_profile("gpu", env={})
    plan = plan_micro_batch(PlanRequest(model_id=profile.model_id, max_length=profile.max_length, precision="fp32",
                                        memory_bytes=15 * GIB, effective_batch=profile.effective_batch))
    assert profile.micro_batch <= plan.largest_fitting_batch


def test_chapter_settings_are_capped_by_profile_overrides():
    tiny = get_profile("gpu", env={"BERTMEM_TRAIN_SIZE": "16", "BERTMEM_EVAL_SIZE": "8",
                                   "BERTMEM_MAX_LENGTH": "64", "BERTMEM_EFFECTIVE_BATCH": "8"})
    for chapter in ("00", "03", "04", "05", "06-warmup", "06-truncation", "08", "09"):
        data, recipe, seeds = chapter_settings(chapter, tiny)
        assert data.train_size <= 16 and data.eval_size <= 8 and data.max_length <= 64
        assert data.micro_batch <= 8 and seeds  # a chapter's micro-batch never exceeds the effective batch
    data, recipe, seeds = chapter_settings("03", get_profile("cpu", env={}))
    assert (data.train_size, data.max_length, recipe.precision, seeds) == (400, 128, "fp32", (0,))
    data, recipe, seeds = chapter_settings("05", get_profile("cpu", env={}))
    assert (data.dataset, data.micro_batch, recipe.learning_rate, seeds) == ("rotten_tomatoes", 16, 2e-4, (0, 1))
    assert chapter_settings("00", get_profile("full", env={})).data.train_size is None
    with pytest.raises(ValueError, match="no settings for chapter"):
        chapter_settings("99", tiny)


def test_a_chapters_bench_is_its_settings_and_goes_back_to_them():
    from bertmem.experiments.bench import variant_settings

    profile = get_profile("cpu", env={})
    settings = chapter_settings("05", profile)
    bench = chapter_bench(settings, profile)
    assert (bench.dataset, bench.train_size, bench.eval_size, bench.max_length) == (
        "rotten_tomatoes", 768, 400, 64)
    assert (bench.effective_batch, bench.learning_rate, bench.seeds, bench.model_id) == (
        16, 2e-4, (0, 1), profile.model_id)
    _, data, recipe = variant_settings(bench, "fp32 baseline")
    assert (data.dataset, data.train_size, data.micro_batch, recipe.learning_rate) == (
        settings.data.dataset, settings.data.train_size, settings.data.micro_batch, settings.recipe.learning_rate)
    accumulating = settings._replace(recipe=settings.recipe.__class__(accumulation_steps=2))
    assert chapter_bench(accumulating, profile).effective_batch == 32


def test_cards_pick_their_sixteen_bit_format_and_reject_missing_peaks():
    assert CARDS["T4"].low_precision() == "fp16" and CARDS["A100"].low_precision() == "bf16"
    with pytest.raises(ValueError, match="no bf16 peak"):
        CARDS["T4"].tflops("bf16")
    with pytest.raises(ValueError, match="fp32"):
        Card("x", 8, {"fp16": 1.0}, "none")
    assert card_for("Tesla T4").name == "Colab T4" and card_for("NVIDIA L4").name == "L4"
    assert card_for("NVIDIA L40") is None and card_for(None) is None
    with pytest.raises(ValueError, match="utilisation"):
        Card("x", 8, {"fp32": 1.0}, "none", utilisation=1.5)


def test_setup_line_says_how_long_here_and_on_a_t4():
    line = setup_line("00", get_profile("cpu", env={}))
    expected = chapter_minutes(get_profile("gpu", env={}), CARDS["T4"])["00"]
    t4, numbers = line.splitlines()[-2:]
    assert t4.startswith("on a Colab T4 (gpu profile): ") and f"about {expected:.0f} min, estimated" in t4
    # what the live numbers would come from there: the GPU profile's model and data, fp16 instead of bf16
    gpu_data = chapter_settings("00", get_profile("gpu", env={})).data
    assert numbers.startswith("on a T4 the live runs read bert-base-uncased: imdb, ")
    assert f"{gpu_data.train_size} train" in numbers and "fp16 with loss scaling" in numbers
    # a page whose runs do not depend on the profile says so instead of naming a model it never loads
    assert setup_line("A5", get_profile("cpu", env={})).splitlines()[-1] == (
        "on a T4 the same: nothing this page runs depends on the profile or the card")
    recorded = cpu_profile_minutes()["00"]
    assert f"here (cpu profile, on a CPU): {recorded:.1f} min when the book was last executed" in line
    l4 = chapter_minutes(get_profile("gpu", env={}), CARDS["L4"])["05"]
    on_l4 = setup_line("05", get_profile("gpu", env={}), gpu_name="NVIDIA L4").splitlines()
    assert on_l4[-2].startswith(f"here (gpu profile, NVIDIA L4): about {l4:.0f} min, estimated")
    assert on_l4[-1].startswith("on a Colab T4 (gpu profile): about")
    assert l4 < chapter_minutes(get_profile("gpu", env={}), CARDS["T4"])["05"]
    other = setup_line("05", get_profile("gpu", env={}), gpu_name="NVIDIA RTX 6000 Ada Generation").splitlines()
    assert "NVIDIA RTX 6000 Ada Generation): no estimate, this GPU has no datasheet entry" in other[-2]
    on_t4 = setup_line("05", get_profile("gpu", env={}), gpu_name="Tesla T4").splitlines()
    assert on_t4[-1].startswith("here (gpu profile, Tesla T4): about") and "fresh runtime" in on_t4[-1]
    assert not any(x.startswith("on a Colab T4") for x in on_t4)  # here is the T4: said once
    full = setup_line("05", dataclasses.replace(get_profile("full", env={}), device="cpu"))  # no T4-numbers line
    assert "not measured" in full.splitlines()[-2] and full.splitlines()[-1].startswith("on a Colab T4 (full profile)")
    # the recorded minutes are for the book's own CPU-profile settings: other settings are not measured
    changed = setup_line("00", get_profile("cpu", env={"BERTMEM_TRAIN_SIZE": "5000"}))
    assert "settings from the environment, cpu): not measured" in changed


def test_the_recorded_cpu_minutes_are_the_notebooks_own():
    """The setup cells' "here" minutes are the introduction's CPU column: each notebook's last execution."""
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    import sync_chapter_minutes

    record = sync_chapter_minutes.cpu_profile_record()
    assert record["minutes"] == cpu_profile_minutes(), "run python scripts/sync_chapter_minutes.py"
    assert set(record["minutes"]) == {p.stem.split("_")[0] for p in (ROOT / "book").glob("*.ipynb")}
    # each setup cell quotes the record the introduction shows (finding 11 of truth pass 5)
    assert not sync_chapter_minutes.stale_quotes(record["minutes"]), "re-execute them, then sync again"


def test_a_record_moves_only_when_a_chapters_time_moves_past_noise(monkeypatch):
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    import sync_chapter_minutes

    for measured, kept in ((2.2, 2.0), (1.75, 2.0), (2.4, 2.4), (1.6, 1.6)):
        monkeypatch.setattr(sync_chapter_minutes, "measured_minutes", lambda path, m=measured: m)
        minutes = sync_chapter_minutes.cpu_profile_record({"00": 2.0})["minutes"]
        assert minutes["00"] == kept, (measured, minutes["00"])
        assert minutes["01"] == round(measured, 1)  # not recorded before: the measurement


def test_every_epoch_is_evaluated_in_the_estimate():
    data = DataConfig("rotten_tomatoes", train_size=None, eval_size=None, max_length=64)
    card = Card("test", 16, {"fp32": 1.0}, "none", utilisation=1.0)
    two = run_seconds(Run(data, epochs=2), ModelWork(parameters=3000, non_embedding=1000), card)
    assert two == pytest.approx((6 * 1000 * 8530 * 64 * 2 + 2 * 1000 * 1066 * 64 * 2) / 1e12 + MODEL_LOAD_SECONDS)


def test_intro_table_matches_the_notebooks_and_the_estimates():
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "scripts"))
    import sync_chapter_minutes

    intro = (root / "book" / "intro.md").read_text(encoding="utf-8")
    block = intro.split(sync_chapter_minutes.START)[1].split(sync_chapter_minutes.END)[0]
    assert block.strip() == sync_chapter_minutes.table().strip(), (
        "book/intro.md's chapter minutes are stale: run python scripts/sync_chapter_minutes.py")
    assert block.count("\n|") >= 11  # header, rule, nine chapters, the total


def test_intro_notes_kaplan_figure_is_six_times_the_non_embedding_parameters_and_its_words_follow_it():
    """Kaplan et al.'s N leaves out the embeddings: the note's 6 · N · tokens is the classifier's parameters less
    its embeddings module's (counted here by name, on the meta device), and "below"/"above" come from the figures."""
    import re
    import sys

    from transformers import BertForSequenceClassification

    from bertmem.memory.estimate import model_config

    sys.path.insert(0, str(ROOT / "scripts"))
    import sync_chapter_minutes

    gpu = get_profile("gpu", env={})
    with torch.device("meta"):
        model = BertForSequenceClassification(model_config(gpu.model_id))
    non_embedding = sum(p.numel() for name, p in model.named_parameters() if not name.startswith("bert.embeddings."))
    assert non_embedding < BERT_BASE - 23_000_000  # the word embeddings alone are 30,522 × 768
    intro = (ROOT / "book" / "intro.md").read_text(encoding="utf-8")
    stated = re.search(r"with N the ([\d.]+) M non-embedding parameters, gives ([\d.]+) GFLOP, (\d+)% (below|above) "
                       r"it: N leaves out the embeddings' ([\d.]+) M parameters.*?The time estimates fall back on "
                       r"the same 6 · non-embedding parameters · tokens", intro)
    assert stated, ("book/intro.md's note has no Kaplan figure, or names another fallback: run python "
                    "scripts/sync_chapter_minutes.py")
    assert "6 · all parameters" not in intro  # the fallback counted the embeddings before (#69 finding 9)
    counted = BERT_BASE_WORK.example_flops(gpu.max_length)
    kaplan = 6 * non_embedding * gpu.max_length
    assert stated.group(1) == f"{non_embedding / 1e6:.1f}" and stated.group(2) == f"{kaplan / 1e9:.2f}"
    assert stated.group(3, 4) == (f"{100 * (1 - kaplan / counted):.0f}", "below")  # attention's products left out
    assert stated.group(5) == f"{(BERT_BASE - non_embedding) / 1e6:.1f}"
    # the time estimates' fallback is that figure: bert-base counted as an architecture the count does not cover
    fallback = ModelWork(BERT_BASE, non_embedding=non_embedding).example_flops(gpu.max_length)
    assert fallback == pytest.approx(kaplan)
    # the words flip with the figures: the same parameters against a smaller, a larger and an equal count
    note = sync_chapter_minutes.flop_note
    smaller = note(gpu.max_length, kaplan / 1.2, BERT_BASE, non_embedding)
    assert "non-embedding parameters, gives" in smaller and smaller.count("20% above it") == 1
    assert note(gpu.max_length, kaplan * 1.25, BERT_BASE, non_embedding).count("20% below it") == 1
    assert "within a few percent of it" in note(gpu.max_length, kaplan, BERT_BASE, non_embedding)


def test_measured_minutes_reads_execution_timestamps(tmp_path):
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
    from sync_chapter_minutes import measured_minutes

    cells = [{"cell_type": "code", "source": [], "metadata": {"execution": {
        "iopub.execute_input": f"2026-01-01T10:0{i}:00.000Z", "shell.execute_reply": f"2026-01-01T10:0{i}:30.000Z"}}}
        for i in (0, 2)]
    path = tmp_path / "n.ipynb"
    path.write_text(json.dumps({"cells": cells + [{"cell_type": "markdown", "source": [], "metadata": {}}]}))
    assert measured_minutes(path) == 2.5
    path.write_text(json.dumps({"cells": []}))
    assert measured_minutes(path) is None


@pytest.mark.parametrize("profile_name", ["cpu", "gpu", "full"])
@pytest.mark.parametrize("chosen", ["sst2", "my_reviews.csv"])
def test_a_chosen_dataset_reaches_every_chapter_but_the_long_text_runs(profile_name, chosen):
    from bertmem.book.chapters import _SIZES, CHAPTER_RUNS, LONG_TEXT_RUNS, data_line

    profile = get_profile(profile_name, env={"BERTMEM_DATASET": chosen})
    for key in ["00", *_SIZES[profile_name]]:
        expected = "imdb" if key in LONG_TEXT_RUNS else chosen
        assert chapter_settings(key, profile).data.dataset == expected, key
    for chapter in ["00", "01", "02", "03", "04", "05", "05b", "06", "07", "08", "09"]:
        line = data_line(chapter, profile)
        runs = CHAPTER_RUNS.get(chapter, ("a few examples",))
        long_runs = [key for key in runs if key in LONG_TEXT_RUNS]
        assert (chosen in line) == (len(long_runs) < len(runs)), (chapter, line)
        assert ("BERTMEM_LONG_DATASET" in line) == bool(long_runs), chapter  # the reason and how to change it
    assert chosen in data_line("06", profile) and "imdb" in data_line("06", profile)
    longer = get_profile(profile_name, env={"BERTMEM_DATASET": chosen, "BERTMEM_LONG_DATASET": "long.csv"})
    assert chapter_settings("09", longer).data.dataset == "long.csv"
    assert chapter_settings("06-truncation", longer).data.dataset == "long.csv"


def test_without_a_choice_each_chapter_reads_its_own_default():
    profile = get_profile("cpu", env={})
    assert chapter_settings("08", profile).data.dataset == "rotten_tomatoes"  # short sentences keep 9 runs quick
    assert chapter_settings("00", profile).data.dataset == profile.dataset == "imdb"
    assert "dataset=" not in profile.describe() and "imdb, 600 train" in setup_line("00", profile)


def test_chapter_5s_timed_runs_count_every_variant_of_its_bench():
    for name in ("cpu", "gpu"):
        profile = get_profile(name, env={})
        bench = chapter_bench(chapter_settings("05", profile), profile)
        repeats = sum(run.repeats for run in chapter_runs(profile)["05"])
        assert repeats == len(bench.variants) * len(bench.seeds)
