"""Chapter 5: the command line, the three backends, two processes under `accelerate launch`, the benchmark."""

import dataclasses
import json
import os
import subprocess
import sys
import types

import pandas as pd
import pytest
import torch
from cli_helpers import cli_args
from torch.utils.data import DataLoader

from bertmem.book.bench_info import write_bench
from bertmem.cli import main
from bertmem.experiments.bench import (
    PLANNED,
    BenchConfig,
    add_ratios,
    combine_rounds,
    precisions_used,
    run_bench,
    variant_settings,
)
from bertmem.loop.accelerate_loop import train_with_accelerate
from bertmem.loop.combined import train
from bertmem.loop.config import RunConfig, TrainConfig
from bertmem.loop.hf_trainer import train_with_trainer
from bertmem.memory.planner import estimated_rows
from bertmem.model.loading import classifier_from_config, tiny_bert_config


@pytest.fixture(scope="module")
def plain_csv(reviews_csv):
    """The same reviews with the default column names `text` and `label` (what BenchConfig reads)."""
    path = reviews_csv.with_name("plain.csv")
    pd.read_csv(reviews_csv).rename(columns={"review": "text", "sentiment": "label"}).to_csv(path, index=False)
    return path


@pytest.mark.slow
def test_cli_train_writes_metrics_config_plot_and_model(tmp_path, reviews_csv, capsys):
    out = tmp_path / "run"
    assert main(cli_args(reviews_csv, out, "--accumulation-steps", "2", "--layerwise-decay", "0.9",
                         "--save-model")) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["label_names"] == ["neg", "pos"] and metrics["train_examples"] == 64
    assert metrics["eval_examples"] == 24 and len(metrics["history"]) == 4  # 64 / (8 × 2)
    assert 0 <= metrics["final"]["accuracy"] <= 1
    config = json.loads((out / "config.json").read_text())
    assert config["train"]["accumulation_steps"] == 2 and config["data"]["text_column"] == "review"
    assert (out / "loss.png").stat().st_size > 1000 and (out / "model" / "config.json").is_file()
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["output_dir"] == str(out)


def test_cli_lora_run_saves_a_merged_model_that_predicts(tmp_path, reviews_csv):
    from bertmem.experiments.run import predict_texts
    from bertmem.model.loading import load_model_and_tokenizer

    out = tmp_path / "lora"
    assert main(cli_args(reviews_csv, out, "--lora-r", "4", "--optimizer", "adamw8bit", "--freeze-layers", "1",
                         "--save-model")) == 0
    config = json.loads((out / "config.json").read_text())["train"]
    assert (config["lora_r"], config["optimizer"], config["freeze_layers"]) == (4, "adamw8bit", 1)
    saved = json.loads((out / "model" / "config.json").read_text())
    from safetensors import safe_open

    with safe_open(str(out / "model" / "model.safetensors"), "pt") as weights:  # merged: plain weight names
        keys = list(weights.keys())
    assert keys and not any("lora_" in k or "base_layer" in k for k in keys)
    assert "bert.encoder.layer.0.attention.self.query.weight" in keys and saved["model_type"] == "bert"
    model, tokenizer = load_model_and_tokenizer(str(out / "model"), num_labels=2)
    assert not any("lora_" in name for name, _ in model.named_parameters())
    predictions = predict_texts(model, tokenizer, ["a fine film", "a dull film"])
    assert all(p["label"] in ("neg", "pos") for p in predictions)


@pytest.mark.parametrize("extra, message", [
    (["--label-column", "stars"], "missing column"),
    (["--precision", "fp16"], "fp16"),
    (["--backend", "accelerate", "--resume"], "features of bertmem's own loop (backend 'plain')"),
    (["--backend", "trainer", "--checkpoint-every", "5"], "not of backend 'trainer'"),
])
def test_cli_bad_arguments_exit_2_with_a_message(tmp_path, reviews_csv, capsys, extra, message):
    with pytest.raises(SystemExit) as exit_info:
        main(cli_args(reviews_csv, tmp_path / "bad", *extra))
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_cli_rejects_a_one_example_subset(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--dataset", "imdb", "--train-size", "1", "--output-dir", "x"])
    assert "train_size must be >= 2" in capsys.readouterr().err


def test_cli_resume_continues_an_interrupted_run(tmp_path, reviews_csv):
    out = tmp_path / "resumable"
    main(cli_args(reviews_csv, out, "--checkpoint-every", "2", "--max-steps", "6", "--epochs", "2"))
    first = json.loads((out / "metrics.json").read_text())
    main(cli_args(reviews_csv, out, "--resume", "--max-steps", "6", "--epochs", "2"))
    again = json.loads((out / "metrics.json").read_text())
    assert [h["loss"] for h in again["history"]] == [h["loss"] for h in first["history"]]


def toy_loader():
    g = torch.Generator().manual_seed(0)
    rows = []
    for _ in range(32):
        ids = torch.randint(5, 1000, (16,), generator=g)
        label = int(torch.randint(0, 2, (1,), generator=g))
        ids[1] = 7 + label
        rows.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.tensor(label)})
    return DataLoader(rows, batch_size=4)


def toy_model():
    torch.manual_seed(0)
    return classifier_from_config(tiny_bert_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_plain_accelerate_and_trainer_give_the_same_loss_trajectory(tmp_path, precision, monkeypatch):
    monkeypatch.setenv("BERTMEM_CPU_BF16", "1")  # bf16 on every CPU (emulated where it is not native)
    config = TrainConfig(epochs=2, learning_rate=1e-3, accumulation_steps=2, layerwise_decay=0.9,
                         precision=precision)
    quiet = RunConfig(progress=False)
    plain = train(toy_model(), toy_loader(), config, run=quiet).losses
    accelerated = train_with_accelerate(toy_model(), toy_loader(), config, run=quiet).losses
    trainer = train_with_trainer(toy_model(), toy_loader(), config, output_dir=str(tmp_path), run=quiet).losses
    assert len(plain) == 8 and plain[-1] < plain[0]
    assert accelerated == pytest.approx(plain, rel=1e-5)
    assert trainer == pytest.approx(plain, rel=1e-5)


def test_the_accelerate_run_stays_on_the_models_device_on_a_gpu_machine(monkeypatch):
    """On a GPU machine a CPU model trains on the CPU under Accelerate too, like `train` and the Trainer."""
    import bertmem.loop.accelerate_loop as loop

    asked = {}

    def stop(config, device=None, **kwargs):
        asked["device"] = device
        raise RuntimeError("stop here")

    monkeypatch.setattr(loop, "accelerator_for", stop)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # as on Colab
    with pytest.raises(RuntimeError, match="stop here"):
        loop.train_with_accelerate(toy_model(), toy_loader(), TrainConfig(), run=RunConfig(progress=False))
    assert asked["device"] == "cpu"


@pytest.mark.slow
def test_two_processes_under_accelerate_launch_agree_with_one(tmp_path, reviews_csv):
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    # `--cpu --num_processes 2` starts one process unless MPI is installed (accelerate 1.15); `--multi_gpu`
    # starts torchrun, and Accelerator(cpu=True) then joins a gloo process group on the CPU.
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
              "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
              "--main_process_port", "29531",
              "-m", "bertmem"]
    common = ["--precision", "fp32", "--backend", "accelerate", "--no-group-by-length", "--accumulation-steps", "2"]
    two = subprocess.run(launch + cli_args(reviews_csv, tmp_path / "two", *common, "--micro-batch", "4"),
                         env=env, capture_output=True, text=True, timeout=300)
    assert two.returncode == 0, two.stderr[-3000:]
    ranks = [json.loads((tmp_path / "two" / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["num_processes"] == 2
    assert ranks[0]["parameter_checksum"] == ranks[1]["parameter_checksum"]
    assert ranks[0]["losses"] == ranks[1]["losses"]
    main(cli_args(reviews_csv, tmp_path / "one", *common))  # one process, micro-batch 8 = 2 × 4
    one = json.loads((tmp_path / "one" / "metrics.json").read_text())
    assert [h["loss"] for h in one["history"]] == pytest.approx(ranks[0]["losses"], rel=1e-4)
    assert one["parameter_checksum"] == pytest.approx(ranks[0]["parameter_checksum"], rel=1e-5)


@pytest.mark.slow
def test_fsdp_on_two_cpu_processes_shards_weights_and_adam_state(tmp_path, reviews_csv):
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    common = ["--precision", "fp32", "--backend", "accelerate", "--max-steps", "2"]
    per_strategy = {}
    for name, flags in (("ddp", ["--multi_gpu"]), ("fsdp", ["--use_fsdp", "--fsdp_version", "2"])):
        launch = [sys.executable, "-m", "accelerate.commands.launch", *flags, "--num_processes", "2",
                  "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
                  "--main_process_port", "29533", "-m", "bertmem"]
        done = subprocess.run(launch + cli_args(reviews_csv, tmp_path / name, *common, "--micro-batch", "4"),
                              env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-3000:]
        per_strategy[name] = [json.loads((tmp_path / name / f"rank{r}.json").read_text()) for r in (0, 1)]
    ddp, fsdp = per_strategy["ddp"][0]["rank_bytes"], per_strategy["fsdp"][0]["rank_bytes"]
    assert fsdp["parameter_bytes"] == pytest.approx(ddp["parameter_bytes"] / 2, rel=0.01)
    assert fsdp["optimizer_bytes"] == pytest.approx(ddp["optimizer_bytes"] / 2, rel=0.01)
    assert per_strategy["fsdp"][0]["parameter_checksum"] == per_strategy["fsdp"][1]["parameter_checksum"]


@pytest.mark.slow
def test_bench_runs_every_variant_and_writes_tables(tmp_path, plain_csv, capsys):
    bench = BenchConfig(model_id="tiny-bert", dataset=str(plain_csv), train_size=48, eval_size=16, max_length=32,
                        effective_batch=8, learning_rate=1e-3, progress=False, seeds=(0, 1))
    result = run_bench(bench)
    assert "precision:" not in capsys.readouterr().out  # 'auto' resolved once per variant, quietly
    rows = {r["variant"]: r for r in result["rows"]}
    assert list(rows) == list(bench.variants)
    assert rows[PLANNED]["planned for"].startswith("not planned: tiny-bert is a test model")
    assert rows["accumulation ×4"]["activations ratio"] == pytest.approx(0.25, rel=0.1)
    assert rows["full + gradient checkpointing"]["activations (MiB)"] < rows["full recipe"]["activations (MiB)"]
    # two rounds, interleaved: every variant ran once per seed, and the row pools both rounds' steps
    n = len(bench.variants)
    assert [[r["seed"] for r in one] for one in result["rounds"]] == [[0] * n, [1] * n]
    smallest, ckpt = rows["smallest footprint"], rows["full + gradient checkpointing"]
    assert smallest["weights+grads+optimizer (MiB)"] < 0.5 * ckpt["weights+grads+optimizer (MiB)"]  # LoRA: few trained
    assert [r["variant"] for r in result["rounds"][1]] == list(bench.variants)
    full = rows["full recipe"]
    assert full["seed count"] == 2 and len(full["accuracies"]) == 2 and full["accuracy std"] >= 0
    assert full["median step (s)"] > 0 and full["examples/s"] == pytest.approx(8 / full["median step (s)"])
    # the work each row computed: padding never makes the useful share larger than the padded one
    base = rows["fp32 baseline"]
    assert base["padded tokens per epoch"] == 48 * 32
    assert full["padded tokens per epoch"] < base["padded tokens per epoch"]
    assert full["tokens per epoch"] == base["tokens per epoch"] and 0 < full["useful MFU"] <= full["MFU"]
    assert full["useful MFU"] / full["MFU"] == pytest.approx(
        full["useful FLOPs per epoch"] / full["training FLOPs per epoch"])
    assert "within noise" in full["accuracy Δ vs noise"] or "larger than the noise" in full["accuracy Δ vs noise"]
    assert len(result["matmul_tflops_per_round"]) == 2
    assert set(result["matmul_tflops"]) == set(precisions_used(bench)) and min(result["matmul_tflops"].values()) > 0
    md = write_bench(result, tmp_path / "bench").read_text()
    assert "| full recipe |" in md and "torch" in md
    assert json.loads((tmp_path / "bench" / "bench.json").read_text())["rows"][0]["variant"] == "fp32 baseline"


def test_bench_variants_add_one_idea_each():
    bench = BenchConfig(model_id="m", effective_batch=32)
    base_run, base_data, base = variant_settings(bench, "fp32 baseline")
    _, acc_data, acc = variant_settings(bench, "accumulation ×4")
    _, mixed_data, mixed = variant_settings(bench, "mixed precision + accumulation")
    full_run, full_data, full = variant_settings(bench, "full recipe")
    assert (base_data.micro_batch, base.accumulation_steps) == (32, 1)
    assert (acc_data.micro_batch, acc.accumulation_steps) == (8, 4) and acc.precision == "fp32"
    assert base_data.pad_to_max_length and base_run.attention == "eager" and base.layerwise_decay is None
    assert base.warmup_ratio == 0.1  # every variant warms up: the rows differ only in their levers
    assert dataclasses.replace(acc, precision="auto") == mixed and mixed_data == acc_data  # one idea: precision
    assert full_data.group_by_length and full_run.attention == "sdpa" and full.warmup_ratio == 0.1
    assert full.layerwise_decay == 0.95 and full.precision == "auto"
    with pytest.raises(ValueError, match="multiple"):
        BenchConfig(model_id="m", effective_batch=30, accumulation_steps=4)


def test_ratios_use_median_steps_and_judge_accuracy_against_the_noise():
    rows = [{"variant": "fp32 baseline", "activations (MiB)": 100.0, "time per epoch (s)": 10.0,
             "median step (s)": 1.0, "accuracy": 0.80, "test examples": 200},
            {"variant": "full recipe", "activations (MiB)": 20.0, "time per epoch (s)": 5.0,
             "median step (s)": 0.4, "accuracy": 0.81, "test examples": 200}]
    full = add_ratios(rows)[1]
    assert full["ratios relative to"] == "fp32 baseline"  # every row names its reference
    assert full["activations ratio"] == 0.2 and full["time ratio"] == 0.4 and full["epoch time ratio"] == 0.5
    assert full["accuracy Δ (points)"] == pytest.approx(1.0) and full["within noise"]  # 1 point on 200 examples
    rows[1]["accuracy"], rows[1]["test examples"] = 0.95, 2000
    rows[0]["test examples"] = 2000
    assert not add_ratios(rows)[1]["within noise"]  # 15 points on 2,000 examples
    # with rounds: each round's compute against the baseline's in the same round, median over rounds
    rows[0]["compute per round (s)"], rows[1]["compute per round (s)"] = [10.0, 20.0, 12.0], [5.0, 6.0, 9.0]
    full = add_ratios(rows)[1]
    assert full["time ratio"] == pytest.approx(0.5) and full["time ratio range"] == "0.30–0.75"


def test_combine_rounds_pools_steps_and_keeps_notes():
    def row(seed, accuracy, steps):
        return {"variant": "v", "seed": seed, "accuracy": accuracy, "macro-F1": accuracy, "effective batch": 8,
                "time per epoch (s)": sum(steps), "median step (s)": 0.0, "step_times_s": steps}
    rows = combine_rounds([[row(0, 0.8, [1.0, 1.0, 9.0])], [row(1, 0.9, [1.0, 1.2, 1.1])]])
    assert rows[0]["median step (s)"] == pytest.approx(1.05)  # the 9 s hiccup does not move the median
    assert rows[0]["accuracy"] == pytest.approx(0.85) and rows[0]["accuracy std"] == pytest.approx(0.0707, rel=1e-3)
    assert rows[0]["examples/s"] == pytest.approx(8 / 1.05)
    note = {"variant": "v", "accuracy": float("nan"), "note": "does not fit (estimated 20 GB > 15 GB)"}
    assert combine_rounds([[note], [note]])[0]["note"].startswith("does not fit")


@pytest.mark.slow
def test_estimated_bert_base_table_and_mfu():
    rows = {r["variant"]: r for r in estimated_rows()}
    assert rows["fp32 baseline"]["peak ratio"] == 1.0
    assert rows["full + gradient checkpointing"]["peak ratio"] < 0.2
    assert rows["fp32 baseline"]["fits T4"] == "no" and rows["full recipe"]["fits T4"] == "yes"
    # each card by name: the baseline fits the blog post's 24 GB RTX 3090, not the L4's 22.5 GiB (#69 finding 3)
    assert rows["fp32 baseline"]["fits RTX 3090"] == "yes"
    on_l4 = {r["variant"]: r for r in estimated_rows(cards=("L4",))}
    assert on_l4["fp32 baseline"]["fits L4"] == "no"


@pytest.mark.parametrize("name, kind", [("ddp", "MULTI_GPU"), ("fsdp", "FSDP"), ("deepspeed_zero2", "DEEPSPEED")])
def test_shipped_accelerate_configs_load(name, kind):
    from pathlib import Path

    from accelerate.commands.config.config_args import load_config_from_file

    root = Path(__file__).resolve().parents[1]
    config = load_config_from_file(str(root / "configs" / "accelerate" / f"{name}.yaml"))
    assert config.distributed_type.value == kind and config.num_processes >= 2
    if kind == "FSDP":
        assert config.fsdp_config["fsdp_transformer_layer_cls_to_wrap"] == "BertLayer"
    if kind == "DEEPSPEED":
        zero = json.loads((root / config.deepspeed_config["deepspeed_config_file"]).read_text())
        assert zero["zero_optimization"]["stage"] == 2


def test_a_variant_that_runs_out_of_memory_is_reported_not_fatal(tmp_path, plain_csv, monkeypatch):
    import bertmem.experiments.bench as bench_module

    real = bench_module.measure_step_memory

    def too_big(model, batch, **kwargs):
        if batch["input_ids"].shape[0] > 2:
            raise torch.OutOfMemoryError("CUDA out of memory")
        return real(model, batch, **kwargs)

    monkeypatch.setattr(bench_module, "measure_step_memory", too_big)
    bench = BenchConfig(model_id="tiny-bert", dataset=str(plain_csv), train_size=24, eval_size=8, max_length=16,
                        effective_batch=8, progress=False, variants=("fp32 baseline", "accumulation ×4"))
    result = run_bench(bench)
    assert [r.get("note") for r in result["rows"]] == ["out of memory", None]  # micro-batch 8 vs 2
    assert "out of memory" in write_bench(result, tmp_path / "b").read_text()


def test_saved_model_predicts_new_texts_with_its_label_names(tmp_path, reviews_csv):
    from bertmem.experiments.run import predict_texts
    from bertmem.model.loading import load_model_and_tokenizer

    out = tmp_path / "saved"
    main(cli_args(reviews_csv, out, "--save-model", "--epochs", "2"))
    model, tokenizer = load_model_and_tokenizer(str(out / "model"), num_labels=2, label_names=["neg", "pos"])
    preds = predict_texts(model, tokenizer, ["movie 3 was superb", "movie 4 was awful"], max_length=32)
    assert [p["label"] in ("neg", "pos") for p in preds] == [True, True]
    assert all(0.5 <= p["probability"] <= 1 for p in preds)
    with pytest.raises(TypeError, match="list"):
        predict_texts(model, tokenizer, "one text")


@pytest.mark.slow
def test_bench_marks_a_variant_that_does_not_fit_and_keeps_the_rest(plain_csv):
    from bertmem.experiments.run import build_model
    from bertmem.loop.config import RunConfig
    from bertmem.memory.estimate import estimate_step_memory
    from bertmem.memory.planner import PlanRequest

    variants = ("fp32 baseline", "accumulation ×4", "full recipe")
    model, _ = build_model(RunConfig(model_id="tiny-bert"), ["neg", "pos"], max_length=32)

    def needed(batch, attention, precision):
        peak = estimate_step_memory(model.config, batch, 32, precision=precision, attention=attention,
                                    device="cpu").step_peak
        return PlanRequest(kernels="cpu").needed_bytes(peak)

    # a budget between what micro-batch 2 (accumulation rows) and micro-batch 8 (the baseline) need
    budget = (needed(2, "eager", "fp32") + needed(8, "eager", "fp32")) // 2
    assert needed(2, "sdpa", "bf16") < budget
    bench = BenchConfig(model_id="tiny-bert", dataset=str(plain_csv), train_size=48, eval_size=16, max_length=32,
                        effective_batch=8, learning_rate=1e-3, progress=False, variants=variants,
                        memory=str(budget))
    result = run_bench(bench)
    rows = {r["variant"]: r for r in result["rows"]}
    assert rows["fp32 baseline"]["note"].startswith("does not fit (estimated ")
    assert rows["accumulation ×4"]["activations ratio"] == 1.0  # compared with the first row that ran
    assert rows["full recipe"]["ratios relative to"] == "accumulation ×4" and rows["full recipe"]["accuracy"] >= 0
    assert set(result["matmul_tflops"]) == set(precisions_used(bench))  # MFU: the precision each row used
    assert rows["accumulation ×4"]["MFU"] > 0 and rows["full recipe"]["MFU"] > 0


def test_every_variant_of_a_seed_starts_from_the_same_classifier_head(plain_csv, monkeypatch):
    import bertmem.experiments.bench as bench_module
    import bertmem.experiments.compare as compare_module
    from bertmem.data.loaders import DataConfig, load_frames

    heads, real = [], compare_module.build_model

    def recording(*args, **kwargs):
        model, tokenizer = real(*args, **kwargs)
        heads.append(model.classifier.weight.detach().clone())
        return model, tokenizer

    monkeypatch.setattr(compare_module, "build_model", recording)  # every arm's model comes from fit_arm
    bench = BenchConfig(model_id="tiny-bert", dataset=str(plain_csv), train_size=16, eval_size=8, max_length=16,
                        effective_batch=8, learning_rate=1e-3, progress=False, seeds=(0,))
    frames = load_frames(DataConfig(dataset=str(plain_csv), train_size=16, eval_size=8, max_length=16))
    bench_module.run_variant(bench, "fp32 baseline", frames, peak_tflops=None)
    torch.rand(1000)  # whatever ran in between (a timing loop, another variant) draws from the global generator
    bench_module.run_variant(bench, "full recipe", frames, peak_tflops=None)
    assert len(heads) == 2 and torch.equal(heads[0], heads[1])


def test_a_bench_longer_than_a_chapter_says_so_before_it_starts():
    """The whole IMDb table with three seeds takes hours on a T4: say it before the GPU time starts."""
    from bertmem.book.bench_info import estimated_minutes, long_run_warning

    full = BenchConfig(model_id="bert-base-uncased", train_size=None, eval_size=None, max_length=512, seeds=(0, 1, 2),
                       device="cuda")
    warning = long_run_warning(full, "Tesla T4")
    assert warning and "hours on Tesla T4" in warning and "--seeds" in warning
    assert estimated_minutes(full) > 120  # hours, not minutes
    small = dataclasses.replace(full, train_size=64, eval_size=32, max_length=128, seeds=(0,))
    assert long_run_warning(small, "Tesla T4") is None
    assert "a Colab T4" in long_run_warning(full, None)


def test_the_bench_trains_every_variant_with_the_loop_it_is_given(plain_csv):
    # chapter 5 passes the `train` its cell shows: an edit there must reach the table
    from bertmem.loop.combined import train

    calls = []

    def recording(model, loader, config, eval_loader=None, *, run=None):
        calls.append((config.accumulation_steps, config.precision))
        return train(model, loader, config, eval_loader, run=run)

    bench = BenchConfig(model_id="tiny-bert", dataset=str(plain_csv), train_size=24, eval_size=8, max_length=16,
                        effective_batch=8, progress=False, variants=("fp32 baseline", "accumulation ×4"))
    rows = run_bench(bench, loop=recording)["rows"]
    assert calls == [(1, "fp32"), (4, "fp32")] and [r["variant"] for r in rows] == list(bench.variants)


def test_an_experiment_reads_its_rows_through_the_prepare_it_is_given(plain_csv):
    # chapter A1 passes the `prepare_frame` its cell shows: an edit there must reach the run
    from bertmem.data.frames import prepare_frame
    from bertmem.data.loaders import DataConfig
    from bertmem.experiments.run import run_experiment

    calls = []

    def shouting(raw, text_column="text", label_column="label", label_names=None):
        calls.append(len(raw))
        frame = prepare_frame(raw, text_column, label_column, label_names)
        frame.attrs["label_names"] = [str(name).upper() for name in frame.attrs["label_names"]]
        return frame

    data = DataConfig(dataset=str(plain_csv), train_size=16, eval_size=8, max_length=16, micro_batch=8)
    summary = run_experiment(RunConfig(model_id="tiny-bert", progress=False), data,
                             TrainConfig(max_steps=1), prepare=shouting)
    plain = prepare_frame(pd.read_csv(plain_csv)).attrs["label_names"]
    assert calls and summary["label_names"] == [str(name).upper() for name in plain] != plain


@pytest.mark.parametrize("clipping, max_grad_norm, refused", [
    (1.0, 1.0, False), (0, None, False), (None, None, False), ("auto", 1.0, True), (1.0, 0.5, True),
    (1.0, None, True), (None, 1.0, True)])
def test_a_deepspeed_run_refuses_a_clipping_deepspeed_would_not_apply(clipping, max_grad_norm, refused):
    # DeepSpeed clips with its own config's value and Accelerate fills "auto" with 1.0: --max-grad-norm never
    # reaches it, so a mismatch is an error before anything trains
    from bertmem.loop.accelerate_loop import check_deepspeed_clipping

    settings = {} if clipping is None else {"gradient_clipping": clipping}  # None: the key is missing
    plugin = types.SimpleNamespace(deepspeed_config=settings)
    accelerator = types.SimpleNamespace(state=types.SimpleNamespace(deepspeed_plugin=plugin))
    config = TrainConfig(max_grad_norm=max_grad_norm)
    if refused:
        with pytest.raises(ValueError, match="set gradient_clipping in the DeepSpeed config"):
            check_deepspeed_clipping(accelerator, config)
    else:
        check_deepspeed_clipping(accelerator, config)
    check_deepspeed_clipping(types.SimpleNamespace(state=types.SimpleNamespace()), config)  # no DeepSpeed
