"""Own data and long runs that never lie: label mapping, checked and safe resume, seeds, output folders, signals."""

import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
import torch
from cli_helpers import cli_args
from torch.utils.data import DataLoader

from bertmem.cli import main
from bertmem.core.faults import interrupt_after
from bertmem.core.interrupts import TrainingInterrupted, sigterm_interrupts
from bertmem.data.frames import load_text_classification
from bertmem.data.loaders import DataConfig, load_frames
from bertmem.experiments.run import run_experiment
from bertmem.loop.checkpoint import CHECKPOINT_NAME, CheckpointError, load_checkpoint
from bertmem.loop.combined import train
from bertmem.loop.config import RunConfig, TrainConfig
from bertmem.model.loading import tiny_classifier


def write_csv(path: Path, rows: list[tuple[str, str]]) -> Path:
    pd.DataFrame(rows, columns=["review", "sentiment"]).to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def three_class_csv(tmp_path_factory):
    """90 reviews labelled neg / neutral / pos."""
    labels = ["neg", "neutral", "pos"]
    rows = [(f"review {i} says {labels[i % 3]} things about film {i % 11}", labels[i % 3]) for i in range(90)]
    return write_csv(tmp_path_factory.mktemp("three") / "train.csv", rows)


def exit_message(capsys, argv) -> tuple[int, str]:
    with pytest.raises(SystemExit) as stop:
        main(argv)
    return stop.value.code, capsys.readouterr().err


# 1. Evaluation labels use the training mapping ---------------------------------------------------------

def test_eval_labels_are_encoded_with_the_training_mapping(tmp_path, three_class_csv):
    eval_csv = write_csv(tmp_path / "eval.csv", [(f"later review {i}", ["neutral", "pos"][i % 2]) for i in range(10)])
    data = DataConfig(dataset=str(three_class_csv), eval_dataset=str(eval_csv), text_column="review",
                      label_column="sentiment", train_size=30, eval_size=None)
    train_frame, eval_frame = load_frames(data)
    assert train_frame.attrs["label_names"] == eval_frame.attrs["label_names"] == ["neg", "neutral", "pos"]
    expected = {"neutral": 1, "pos": 2}
    raw = pd.read_csv(eval_csv).set_index("review")["sentiment"]
    assert all(expected[raw[text]] == label for text, label in zip(eval_frame["text"], eval_frame["label"]))


def test_an_eval_label_never_seen_in_training_fails_before_training(tmp_path, reviews_csv, capsys):
    eval_csv = write_csv(tmp_path / "eval.csv", [(f"later review {i}", ["neg", "mixed"][i % 2]) for i in range(10)])
    code, err = exit_message(capsys, cli_args(reviews_csv, tmp_path / "out", "--eval-dataset", str(eval_csv),
                                              "--eval-size", "all"))
    assert code == 2 and "['mixed'] never occur in the training data" in err
    assert not (tmp_path / "out" / "metrics.json").exists()


def test_label_whitespace_is_one_class_and_case_variants_warn(tmp_path):
    rows = [(f"text {i}", ["pos", "pos ", " neg", "neg"][i % 4]) for i in range(20)]
    frame = load_text_classification(write_csv(tmp_path / "spaces.csv", rows), text_column="review",
                                     label_column="sentiment")
    assert frame.attrs["label_names"] == ["neg", "pos"]
    rows = [(f"text {i}", ["Pos", "pos", "neg"][i % 3]) for i in range(21)]
    with pytest.warns(UserWarning, match="differ only in case"):
        load_text_classification(write_csv(tmp_path / "case.csv", rows), text_column="review",
                                 label_column="sentiment")


# 2. Resume checks the settings -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, reviews_csv):
    """A CLI run that kept checkpoints, to resume with changed settings."""
    out = tmp_path_factory.mktemp("resume") / "run"
    assert main(cli_args(reviews_csv, out, "--checkpoint-every", "2", "--max-steps", "4", "--epochs", "2")) == 0
    return out


@pytest.mark.parametrize("change, difference", [
    (["--accumulation-steps", "2"], "accumulation_steps: checkpoint 1, now 2"),
    (["--micro-batch", "4"], "micro_batch: checkpoint 8, now 4"),
    (["--lr", "2e-3"], "learning_rate: checkpoint 0.001, now 0.002"),
    (["--seed", "1"], "seed: checkpoint 0, now 1"),
])
def test_resume_refuses_changed_settings_and_names_each(finished_run, reviews_csv, capsys, change, difference):
    code, err = exit_message(capsys, cli_args(reviews_csv, finished_run, "--resume", "--max-steps", "4",
                                              "--epochs", "2", *change))
    assert code == 2 and "cannot resume" in err and difference in err


def test_resume_refuses_another_dataset(finished_run, tmp_path, capsys):
    other = write_csv(tmp_path / "other.csv", [(f"another film {i} was {'good' if i % 2 else 'bad'}",
                                                "pos" if i % 2 else "neg") for i in range(120)])
    code, err = exit_message(capsys, cli_args(other, finished_run, "--resume", "--max-steps", "4", "--epochs", "2"))
    assert code == 2 and "data_fingerprint" in err and "dataset: checkpoint" in err


def test_resume_allows_settings_that_change_nothing(finished_run, reviews_csv):
    args = [a for a in cli_args(reviews_csv, finished_run, "--resume", "--max-steps", "4", "--epochs", "2",
                                "--checkpoint-every", "3") if a != "--no-progress"]
    assert main(args) == 0


def test_train_refuses_a_checkpoint_of_other_data(tmp_path):
    def loader(offset):
        rows = [{"input_ids": torch.arange(16) + offset + i, "attention_mask": torch.ones(16, dtype=torch.long),
                 "labels": torch.tensor(i % 2)} for i in range(16)]
        return DataLoader(rows, batch_size=4)

    config, saving = TrainConfig(learning_rate=1e-3), RunConfig(progress=False, output_dir=str(tmp_path))
    train(tiny_classifier(), loader(5), config, run=replace(saving, checkpoint_every=4))
    with pytest.raises(CheckpointError, match="data_fingerprint"):
        train(tiny_classifier(), loader(6), config, run=replace(saving, resume=True))


# 3. Checkpoints are data, not code ---------------------------------------------------------------------

class RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_crafted_checkpoint_runs_no_code(tmp_path):
    marker = tmp_path / "pwned"
    torch.save({"format": 2, "payload": RunsCode(marker)}, tmp_path / CHECKPOINT_NAME)
    with pytest.raises(CheckpointError, match=str(tmp_path / CHECKPOINT_NAME)):
        load_checkpoint(tmp_path)
    assert not marker.exists()


def test_damaged_and_foreign_checkpoints_are_one_line_errors(tmp_path):
    config = TrainConfig(learning_rate=1e-3, max_steps=2)
    saving = RunConfig(progress=False, output_dir=str(tmp_path / "good"), checkpoint_every=2)
    rows = [{"input_ids": torch.arange(8) + i, "attention_mask": torch.ones(8, dtype=torch.long),
             "labels": torch.tensor(i % 2)} for i in range(8)]
    train(tiny_classifier(), DataLoader(rows, batch_size=4), config, run=saving)
    data = (tmp_path / "good" / CHECKPOINT_NAME).read_bytes()
    (tmp_path / "cut").mkdir()
    (tmp_path / "cut" / CHECKPOINT_NAME).write_bytes(data[: len(data) // 2])
    (tmp_path / "foreign").mkdir()
    torch.save({"weights": torch.ones(2)}, tmp_path / "foreign" / CHECKPOINT_NAME)
    for folder, words in (("cut", "damaged"), ("foreign", "not a bertmem checkpoint")):
        with pytest.raises(CheckpointError) as err:
            load_checkpoint(tmp_path / folder)
        assert words in str(err.value) and str(tmp_path / folder) in str(err.value)
        assert "\n" not in str(err.value)
    bigger = tiny_classifier(hidden_size=48)
    with pytest.raises(CheckpointError, match="weights of another model"):
        train(bigger, DataLoader(rows, batch_size=4), config, run=replace(saving, resume=True))


# 4. The seed repeats a run of a model loaded from a folder, as a reader's is ---------------------------

@pytest.mark.slow
def test_same_seed_same_metrics_with_a_model_from_a_folder(reviews_csv, tiny_model_dir):
    run = RunConfig(model_id=str(tiny_model_dir), progress=False)
    data = DataConfig(dataset=str(reviews_csv), text_column="review", label_column="sentiment",
                      train_size=16, eval_size=8, max_length=24, micro_batch=8)
    config = TrainConfig(learning_rate=1e-4, seed=3, max_steps=2)
    first, second = run_experiment(run, data, config), run_experiment(run, data, config)
    untimed = [[{k: v for k, v in h.items() if k != "step_time_s"} for h in r["history"]] for r in (first, second)]
    assert untimed[0] == untimed[1] and first["final"]["eval_loss"] == second["final"]["eval_loss"]


# 5. Output folders are checked before any work ---------------------------------------------------------

def test_output_folder_problems_are_reported_before_loading_anything(tmp_path, capsys):
    a_file = tmp_path / "results.txt"
    a_file.write_text("not a folder")
    missing_data = str(tmp_path / "no-such-data.csv")  # loading it would fail: the folder check must come first
    code, err = exit_message(capsys, cli_args(missing_data, a_file))
    assert code == 2 and "is a file, not a folder" in err
    code, err = exit_message(capsys, cli_args(missing_data, a_file / "sub"))
    assert code == 2 and "cannot be created or written" in err


def test_an_existing_run_is_refused_unless_overwrite(tmp_path, reviews_csv, capsys):
    out = tmp_path / "run"
    assert main(cli_args(reviews_csv, out, "--max-steps", "1", "--save-model")) == 0
    code, err = exit_message(capsys, cli_args(reviews_csv, out, "--max-steps", "1"))
    assert code == 2 and "already holds a run" in err and "--overwrite" in err
    assert main(cli_args(reviews_csv, out, "--max-steps", "1", "--overwrite", "--no-save-model")) == 0
    assert not (out / "model").exists()  # no stale model next to the new metrics


def test_the_model_folder_is_never_the_output(tmp_path, reviews_csv, capsys):
    first = tmp_path / "first"
    assert main(cli_args(reviews_csv, first, "--max-steps", "1", "--save-model")) == 0
    model_dir = first / "model"
    before = (model_dir / "config.json").read_text()
    argv = cli_args(reviews_csv, model_dir, "--max-steps", "1", "--overwrite")
    argv[argv.index("tiny-bert")] = str(model_dir)
    code, err = exit_message(capsys, argv)
    assert code == 2 and "holds the model being fine-tuned" in err
    assert (model_dir / "config.json").read_text() == before


# 6. Signals: SIGTERM like Ctrl-C, no traceback, no temporary files --------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("signum, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_saves_a_checkpoint_and_exits_with_one_line(tmp_path, reviews_csv, signum, code):
    out = tmp_path / "long"
    argv = cli_args(reviews_csv, out, "--epochs", "400", "--checkpoint-every", "1")
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    proc = subprocess.Popen([sys.executable, "-m", "bertmem", *argv], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while not (out / CHECKPOINT_NAME).exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err[-2000:]
    said = [x for x in err.strip().splitlines() if not x.startswith("bertmem train: checkpoints ")]  # the plan
    assert "Traceback" not in err and len(said) == 1, err
    assert "saved a checkpoint" in err and "--resume" in err
    assert load_checkpoint(out)["position"]["step"] >= 1
    assert not list(out.glob("*.tmp"))


def test_a_signal_during_a_save_waits_for_the_save_to_finish(tmp_path, monkeypatch):
    import bertmem.loop.checkpoint as checkpoint_module

    real_save, calls = torch.save, []

    def save_with_sigterm(obj, handle):
        calls.append(1)
        if len(calls) == 2:  # SIGTERM arrives while the second periodic checkpoint is being written
            os.kill(os.getpid(), signal.SIGTERM)
        real_save(obj, handle)

    monkeypatch.setattr(checkpoint_module.torch, "save", save_with_sigterm)
    rows = [{"input_ids": torch.arange(8) + i, "attention_mask": torch.ones(8, dtype=torch.long),
             "labels": torch.tensor(i % 2)} for i in range(16)]
    saving = RunConfig(progress=False, output_dir=str(tmp_path), checkpoint_every=1)
    with pytest.raises(TrainingInterrupted, match="SIGTERM") as stop:
        train(tiny_classifier(), DataLoader(rows, batch_size=4), TrainConfig(learning_rate=1e-3), run=saving)
    assert stop.value.exit_code == 143
    assert not list(tmp_path.glob("*.tmp")) and len(calls) == 2  # the interrupted save completed: not redone
    monkeypatch.setattr(checkpoint_module.torch, "save", real_save)
    assert load_checkpoint(tmp_path)["position"]["step"] == 2


def test_a_failing_write_leaves_no_temporary_file(tmp_path, monkeypatch):
    import bertmem.loop.checkpoint as checkpoint_module

    def broken_save(obj, handle):
        handle.write(b"half a checkpoint")
        raise KeyboardInterrupt  # e.g. a second Ctrl-C delivered by a debugger, or a full disk

    monkeypatch.setattr(checkpoint_module.torch, "save", broken_save)
    with pytest.raises(KeyboardInterrupt):
        checkpoint_module.atomic_save({"a": 1}, tmp_path / CHECKPOINT_NAME)
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_just_after_the_temporary_file_is_made_waits_for_the_rename(tmp_path, monkeypatch):
    import bertmem.loop.checkpoint as checkpoint_module
    real_mkstemp = checkpoint_module.tempfile.mkstemp

    def mkstemp_then_ctrl_c(*args, **kwargs):
        made = real_mkstemp(*args, **kwargs)
        signal.raise_signal(signal.SIGINT)  # arrives before the write has begun (CI met this once)
        return made

    monkeypatch.setattr(checkpoint_module.tempfile, "mkstemp", mkstemp_then_ctrl_c)
    with pytest.raises(KeyboardInterrupt):
        checkpoint_module.atomic_save({"a": 1}, tmp_path / CHECKPOINT_NAME)
    assert [p.name for p in tmp_path.iterdir()] == [CHECKPOINT_NAME]  # complete, and no *.tmp beside it
    assert torch.load(tmp_path / CHECKPOINT_NAME, weights_only=True) == {"a": 1}


def test_sigterm_handler_is_restored_after_the_block():
    before = signal.getsignal(signal.SIGTERM)
    with sigterm_interrupts():
        assert signal.getsignal(signal.SIGTERM) is not before
    assert signal.getsignal(signal.SIGTERM) is before


# 7. Smaller cases --------------------------------------------------------------------------------------

def test_train_size_larger_than_the_file_is_an_error(tmp_path, reviews_csv, capsys):
    code, err = exit_message(capsys, cli_args(reviews_csv, tmp_path / "o", "--train-size", "500"))
    assert code == 2 and "train_size=500" in err and "at most 96" in err


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a CUDA GPU")
def test_cuda_without_a_gpu_is_a_one_line_error(tmp_path, reviews_csv, capsys):
    code, err = exit_message(capsys, cli_args(reviews_csv, tmp_path / "o", "--device", "cuda"))
    assert code == 2 and "torch sees no CUDA GPU" in err and "--device cpu" in err


@pytest.mark.parametrize("value", ["inf", "nan"])
def test_a_non_finite_learning_rate_is_refused(tmp_path, reviews_csv, capsys, value):
    code, err = exit_message(capsys, cli_args(reviews_csv, tmp_path / "o", "--lr", value))
    assert code == 2 and "learning_rate must be a finite number" in err


def test_a_missing_file_path_is_not_reported_as_a_hub_download(tmp_path, capsys):
    code, err = exit_message(capsys, cli_args("data/reviews/missing.csv", tmp_path / "o"))
    assert code == 2 and "no such file" in err and "Hub" not in err


def test_throughput_after_resume_counts_the_time_before_the_interruption(tmp_path):
    rows = [{"input_ids": torch.arange(8) + i, "attention_mask": torch.ones(8, dtype=torch.long),
             "labels": torch.tensor(i % 2)} for i in range(32)]

    def slow(model, pause):
        forward = model.forward
        model.forward = lambda *a, **k: (time.sleep(pause), forward(*a, **k))[1]
        return model

    config = TrainConfig(learning_rate=1e-3)
    saving = RunConfig(progress=False, output_dir=str(tmp_path), checkpoint_every=1)
    with pytest.raises(KeyboardInterrupt):  # 6 slow micro-batches (>= 0.6 s), then Ctrl-C
        train(interrupt_after(slow(tiny_classifier(), 0.1), 7), DataLoader(rows, batch_size=4), config, run=saving)
    result = train(tiny_classifier(), DataLoader(rows, batch_size=4), config, run=replace(saving, resume=True))
    epoch = result.epochs[-1]
    assert epoch["examples"] == 32 and epoch["train_time_s"] >= 0.6
    assert epoch["examples_per_s"] == pytest.approx(32 / epoch["train_time_s"])
    assert json.dumps(epoch)  # plain numbers only


def test_a_checkpoint_from_before_a_setting_existed_still_resumes():
    from bertmem.loop.checkpoint import settings_differences

    now = {"dataset": "imdb", "truncation": "head", "learning_rate": 1e-3, "progress": False}
    older = {"dataset": "imdb", "learning_rate": 1e-3, "progress": True}  # written before `truncation` existed
    assert settings_differences(older, now) == []  # every run before it cut the head; progress is safe to change
    assert settings_differences(older, dict(now, truncation="head+tail")) == [
        "truncation: checkpoint 'head', now 'head+tail'"]
    assert settings_differences(dict(older, learning_rate=2e-3), now) == [
        "learning_rate: checkpoint 0.002, now 0.001"]
    # written before class weights existed: every run before them trained on the plain loss
    assert settings_differences(older, dict(now, class_weights="none")) == []
    assert settings_differences(older, dict(now, class_weights="balanced")) == [
        "class_weights: checkpoint 'none', now 'balanced'"]


def test_a_checkpoint_from_before_the_renames_still_resumes():
    from bertmem.loop.checkpoint import settings_differences

    now = {"model_id": "m", "micro_batch": 8, "truncation": "head"}
    older = {"model": "m", "batch_size": 8, "micro_batch_size": 8, "truncation": "head"}  # the old spellings
    assert settings_differences(older, now) == []
    assert settings_differences(dict(older, batch_size=4, micro_batch_size=4), now) == [
        "micro_batch: checkpoint 4, now 8"]


@pytest.mark.parametrize("name", ["bitsandbytes.backends.cpu.ops", "kernels._internals.hf_hub"])
def test_the_4bit_kernel_notices_are_dropped_and_other_messages_pass(name, caplog):
    from bertmem.core.runtime import quiet_bitsandbytes_notice

    quiet_bitsandbytes_notice()
    with caplog.at_level("WARNING", logger=name):
        logging.getLogger(name).warning("Skipping a check for 'kernels-community/quantization-bitsandbytes'")
        logging.getLogger(name).warning("something else went wrong")
    assert [r.getMessage() for r in caplog.records] == ["something else went wrong"]


@pytest.mark.slow
def test_importing_bitsandbytes_offline_prints_nothing():
    """What `bertmem train` prints stays its own: no notice about kernels the book never uses."""
    code = ("from bertmem.core.runtime import quiet_bitsandbytes_notice; quiet_bitsandbytes_notice(); "
            "import bitsandbytes")
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stderr.strip() == "" and done.stdout.strip() == "", done.stderr
