"""Chapter 5: `bertmem plan` — the largest micro-batch under a budget, from the step's estimated peak."""

import json
import math
from pathlib import Path

import pytest
import torch

from bertmem.cli import main
from bertmem.core.units import GIB
from bertmem.memory.cards import CARDS, parse_memory
from bertmem.memory.estimate import model_work
from bertmem.memory.planner import PlanRequest, estimate_for, plan_micro_batch, planner_vs_measured, split_advice
from bertmem.memory.speed import EpochRequest, book_length_counts, book_tokens_per_example, micro_step_floor_seconds
from bertmem.model.loading import classifier_from_config, tiny_bert_config

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("text, expected", [("15GiB", 15 * 2**30), ("16 GB", 16 * 10**9), ("512MiB", 2**29),
                                            ("1.5GiB", 3 * 2**29), ("1000", 1000)])
def test_parse_memory(text, expected):
    assert parse_memory(text) == expected


def test_parse_memory_rejects_nonsense():
    with pytest.raises(ValueError, match="15GiB"):
        parse_memory("lots")


@pytest.fixture(scope="module")
def t4_plan():
    return plan_micro_batch(PlanRequest(model_id="bert-base-uncased", max_length=512, precision="fp16",
                                        memory_bytes=15 * GIB, effective_batch=32, attention="eager"))


@pytest.mark.slow
def test_plan_is_the_largest_micro_batch_that_fits(t4_plan):
    request = PlanRequest(model_id="bert-base-uncased", max_length=512, precision="fp16", memory_bytes=15 * GIB,
                          effective_batch=32, attention="eager")
    largest = t4_plan.largest_fitting_batch
    assert 1 <= largest < 32
    assert request.needed_bytes(estimate_for(request, largest).step_peak) <= request.memory_bytes
    assert request.needed_bytes(estimate_for(request, largest + 1).step_peak) > request.memory_bytes
    assert t4_plan.micro_batch * t4_plan.accumulation_steps == 32
    assert t4_plan.micro_batch <= largest and 32 % t4_plan.micro_batch == 0
    assert sum(t4_plan.breakdown.values()) == pytest.approx(t4_plan.estimated_peak_bytes, abs=2)
    assert t4_plan.breakdown["CUDA context"] == request.cuda_context_bytes


@pytest.mark.slow
def test_a_roomy_card_takes_the_whole_effective_batch_at_once():
    plan = plan_micro_batch(PlanRequest(model_id="bert-base-uncased", max_length=128, precision="bf16",
                                        memory_bytes=80 * GIB, effective_batch=16))
    assert (plan.micro_batch, plan.accumulation_steps, plan.largest_fitting_batch) == (16, 1, 16)


@pytest.mark.slow
def test_too_little_memory_names_the_minimum():
    with pytest.raises(ValueError, match=r"needs at least \d+\.\d\d GiB for one example"):
        plan_micro_batch(PlanRequest(model_id="bert-base-uncased", max_length=512, memory_bytes=1 * GIB))


@pytest.mark.slow
def test_cli_plan_prints_json_and_text(capsys):
    common = ["plan", "--model", "bert-base-uncased", "--max-length", "128", "--precision", "bf16",
              "--memory", "4GiB", "--effective-batch", "32"]
    assert main(common + ["--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert {"micro_batch", "accumulation_steps", "estimated_peak_bytes"} <= set(answer)
    assert answer["estimated_peak_bytes"] <= 4 * GIB
    assert main(common) == 0
    assert "largest micro-batch that fits" in capsys.readouterr().out


@pytest.mark.parametrize("extra, message", [
    (["--memory", "1GiB"], "needs at least"),
    (["--memory", "15GiB", "--model", "nobody/no-such-model"], "not available offline"),
    (["--memory", "a lot"], "or a card (t4, l4, a10, rtx3090, rtx4090, a100-80gb, a100, h100, v100-32gb, v100, p100, "
                            "a6000, l40s)"),
])
@pytest.mark.slow
def test_cli_plan_errors_are_one_line_with_exit_2(capsys, extra, message):
    with pytest.raises(SystemExit) as stop:
        main(["plan", "--max-length", "512", *extra])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and message in err and len(err.strip().splitlines()) == 1


@pytest.mark.slow
def test_a_plain_plan_answers_for_a_t4_on_any_machine(capsys, monkeypatch):
    """`bertmem plan` with no flags: the GPU profile's model on a 16 GB T4, whatever GPU this machine has;
    `--memory auto` reads this machine's GPU, and plans for a T4 where there is none."""
    import bertmem.core.devices

    monkeypatch.setattr(bertmem.core.devices, "cuda_free_bytes", lambda *a, **k: 40 * GIB)  # a large card here
    assert main(["plan", "--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    assert answer["memory_bytes"] == 15 * GIB and answer["request"]["model_id"] == "bert-base-uncased"
    assert answer["request"]["max_length"] == 512 and answer["request"]["effective_batch"] == 32
    assert main(["plan", "--memory", "auto", "--json"]) == 0
    on_gpu = json.loads(capsys.readouterr().out)
    assert on_gpu["memory_bytes"] == 40 * GIB
    assert on_gpu["epoch"] is None and on_gpu["no_epoch"].startswith("the book holds no speed for ")  # no GPU name
    monkeypatch.setattr(bertmem.core.devices, "cuda_free_bytes", lambda *a, **k: None)  # no GPU at all
    assert main(["plan", "--memory", "auto", "--json"]) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["memory_bytes"] == answer["memory_bytes"] and "planning for a T4" in out.err
    assert json.loads(out.out)["epoch"]["card"] == "Colab T4"  # the time is the card the memory is planned for


# bf16 + eager was 8-21 % off while the measured batch had no padding (transformers then skips the mask)
@pytest.mark.slow
@pytest.mark.parametrize("precision, attention, checkpointing", [("fp32", "eager", False), ("bf16", "sdpa", False),
                                                                 ("fp32", "sdpa", True), ("bf16", "eager", False),
                                                                 ("bf16", "eager", True)])
def test_planner_agrees_with_a_real_cpu_step(precision, attention, checkpointing):
    config = tiny_bert_config(vocab_size=2000, hidden_size=128, num_hidden_layers=3, num_attention_heads=4,
                              intermediate_size=512, attention_probs_dropout_prob=0.1)
    row = planner_vs_measured(config, classifier_from_config(config, attention), 8, 64, precision, attention,
                              checkpointing)
    assert abs(row["activation error"]) <= 0.05 and abs(row["peak error"]) <= 0.05


def test_attempt_training_step_reports_a_fit_and_an_out_of_memory_error(tiny_model, tiny_batches):
    from bertmem.core.faults import out_of_memory_above
    from bertmem.memory.planner import attempt_training_step

    fit = attempt_training_step(tiny_model, tiny_batches[0])
    assert fit.fits and fit.error is None and "fits" in fit.describe()
    assert all(p.grad is None for p in tiny_model.parameters())  # nothing of the step stays alive
    failed = attempt_training_step(out_of_memory_above(tiny_model, 4), tiny_batches[0])  # 8 examples > 4
    assert not failed.fits and "CUDA out of memory" in failed.error
    assert failed.describe().startswith("out of memory: CUDA out of memory")


def test_load_classifier_places_the_model_once_and_rejects_missing_devices(tiny_model_dir):
    from bertmem.model.loading import load_classifier

    model = load_classifier(tiny_model_dir, device="cpu")
    assert {p.device.type for p in model.parameters()} == {"cpu"}
    with pytest.raises(ValueError, match="no CUDA GPU"):
        load_classifier(tiny_model_dir, device="cuda")


def test_attempt_training_step_treats_cublas_allocation_failures_as_out_of_memory(tiny_model, tiny_batches):
    from bertmem.memory.planner import attempt_training_step

    def fail(message):
        def forward(**kwargs):
            raise RuntimeError(message)
        return forward

    tiny_model.forward = fail("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`")
    assert not attempt_training_step(tiny_model, tiny_batches[0]).fits
    tiny_model.forward = fail("mat1 and mat2 shapes cannot be multiplied")
    with pytest.raises(RuntimeError, match="shapes"):
        attempt_training_step(tiny_model, tiny_batches[0])


def test_an_effective_batch_that_splits_poorly_gets_the_nearest_that_split_well():
    # 31 is prime: with 24 fitting, its only even split is 1 × 31; 30 and 32 split 15 × 2 and 16 × 2
    assert split_advice(31, 24) == [{"effective_batch": 30, "micro_batch": 15, "accumulation_steps": 2},
                                    {"effective_batch": 32, "micro_batch": 16, "accumulation_steps": 2}]
    assert split_advice(32, 24) == [] and split_advice(31, 31) == [] and split_advice(1, 1) == []
    # a neighbour splits well when its micro-batch is at least half of what fits
    for effective, largest in ((7, 3), (97, 40), (50, 7)):
        for nearby in split_advice(effective, largest):
            assert 2 * nearby["micro_batch"] >= min(largest, effective, nearby["effective_batch"])
            assert nearby["micro_batch"] * nearby["accumulation_steps"] == nearby["effective_batch"]


def test_bertmem_plan_says_when_the_batch_splits_poorly(capsys):
    argv = ["plan", "--model", "bert-base-uncased", "--memory", "t4", "--max-length", "512", "--precision", "fp32",
            "--attention", "eager", "--effective-batch", "31"]
    assert main(argv + ["--json"]) == 0
    answer = json.loads(capsys.readouterr().out)
    largest = answer["largest_fitting_batch"]
    assert 2 <= largest < 31 and answer["micro_batch"] == 1  # 31 is prime: 1 × 31
    assert answer["nearby"] == split_advice(31, largest) and len(answer["nearby"]) == 2
    assert main(argv) == 0
    below, above = answer["nearby"]
    assert (f"effective batch 31 splits poorly: micro-batches of 1 where {largest} fit; 30 "
            f"({below['micro_batch']} × {below['accumulation_steps']}) or 32") in capsys.readouterr().out


def test_bertmem_plan_estimates_an_epoch_on_a_named_card_from_the_books_data_or_the_readers(capsys):
    argv = ["plan", "--model", "bert-base-uncased", "--memory", "t4", "--max-length", "256", "--precision", "fp16",
            "--json"]
    assert main(argv) == 0
    plan = json.loads(capsys.readouterr().out)
    epoch = plan["epoch"]
    assert epoch["examples"] == 25_000 and epoch["tokens_per_example"] == book_tokens_per_example(256)
    shape = model_work("bert-base-uncased").shape  # the bench's matmul count, one example at the mean length
    flops = shape.training_flops(torch.tensor([epoch["tokens_per_example"]], dtype=torch.float64))
    per_step = max(plan["micro_batch"] * flops / (CARDS["T4"].training_tflops("fp16") * 1e12),
                   micro_step_floor_seconds())
    assert epoch["seconds"] == pytest.approx(math.ceil(25_000 / plan["micro_batch"]) * per_step, rel=1e-12)
    assert epoch["line"].startswith("about ") and "on a Colab T4 (estimated: " in epoch["line"]
    # the reader's data: half the examples, a third of the tokens
    assert main(argv + ["--train-size", "12500", "--tokens-per-example", "80"]) == 0
    theirs = json.loads(capsys.readouterr().out)["epoch"]
    assert theirs["micro_steps"] == math.ceil(12_500 / plan["micro_batch"]) and theirs["seconds"] < epoch["seconds"]
    # a size is no card: no speed to divide by, and the text says what to do
    assert main(["plan", "--model", "bert-base-uncased", "--memory", "11GiB"]) == 0
    assert "time: no estimate: a budget given as a size has no known speed" in capsys.readouterr().out
    # a precision the card has no rate for still gets its memory plan, and says why there is no time
    assert main(["plan", "--model", "bert-base-uncased", "--memory", "t4", "--precision", "bf16", "--json"]) == 0
    bf16 = json.loads(capsys.readouterr().out)
    assert bf16["micro_batch"] >= 1 and bf16["epoch"] is None and bf16["no_epoch"] == (
        "a Colab T4 has no bf16 rate (its 16-bit format: fp16)")
    assert main(["plan", "--model", "bert-base-uncased", "--memory", "t4", "--max-length", "1024", "--window",
                 "512", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["no_epoch"] == "reading windows (--window) is not estimated"
    with pytest.raises(ValueError, match="--train-size and --tokens-per-example must be positive"):
        EpochRequest(train_size=0)


def test_the_books_default_data_is_imdbs_reviews_cut_at_the_length():
    counts = book_length_counts()
    assert sum(c for _, c in counts) == 25_000 and [n for n, _ in counts] == sorted(n for n, _ in counts)
    short, long = book_tokens_per_example(64), book_tokens_per_example(512)
    assert short == pytest.approx(64, rel=0.01) and 64 < long < 512  # nearly every review is longer than 64
    assert book_tokens_per_example(10**6) == sum(n * c for n, c in counts) / 25_000  # nothing cut


@pytest.mark.slow
def test_the_recorded_imdb_lengths_are_what_the_tokenizer_counts_today():
    import importlib.util

    spec = importlib.util.spec_from_file_location("imdb_token_lengths", ROOT / "scripts" / "imdb_token_lengths.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert tuple(tuple(pair) for pair in script.counted()["counts"]) == book_length_counts()
