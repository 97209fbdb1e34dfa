"""A reader's own file, as real files come: skewed classes, empty rows, two text columns, long texts — from the
file to a plan, a run and predictions, with one sentence for every bad input (issue: your data, your card)."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from cli_helpers import cli_args

from bertmem.book.tickets import ticket_frame, write_tickets
from bertmem.cli import build_parser, main
from bertmem.data import DataConfig, load_frames, prepare_frame, subsample, tokenize_frame
from bertmem.data.frames import class_shares, cut_line, cut_report, text_hash
from bertmem.experiments.report import class_summary, worst_classes
from bertmem.loop.baseline import Predictions
from bertmem.memory.cards import CARDS
from bertmem.memory.estimate import model_work
from bertmem.memory.speed import ModelWork, epoch_estimate, micro_step_floor_seconds
from bertmem.model.loading import load_tokenizer, packaged_minilm_path

MINILM = "sentence-transformers/all-MiniLM-L6-v2"


def skewed_frame(counts=(60, 25, 10, 5)) -> pd.DataFrame:
    """Classes 0..K-1 with these row counts, distinct texts."""
    rows = [(f"class {c} text {i}", c) for c, n in enumerate(counts) for i in range(n)]
    frame = pd.DataFrame(rows, columns=["text", "label"])
    frame.attrs["label_names"] = [f"c{i}" for i in range(len(counts))]
    return frame


def test_subsets_keep_the_classes_proportions_by_default():
    frame = skewed_frame()
    picked = subsample(frame, 40, seed=0)
    assert picked["label"].value_counts().sort_index().tolist() == [24, 10, 4, 2]  # 60:25:10:5 of 100, × 0.4
    assert picked.equals(subsample(frame.sample(frac=1, random_state=3), 40, seed=0))  # any row order
    assert not picked.equals(subsample(frame, 40, seed=1))  # the data seed picks other rows
    # the smallest class keeps a row even where its share rounds to nothing
    assert subsample(frame, 4, seed=0)["label"].value_counts().sort_index().tolist() == [1, 1, 1, 1]


def test_class_shares_are_exact_sums_with_a_row_for_every_class():
    for size in range(4, 100):
        shares = class_shares({0: 60, 1: 25, 2: 10, 3: 5}, size)
        assert sum(shares.values()) == size and min(shares.values()) >= 1
        assert all(shares[c] <= n for c, n in {0: 60, 1: 25, 2: 10, 3: 5}.items())
    assert class_shares({0: 60, 1: 25, 2: 10, 3: 5}, 20, balance=True) == {0: 5, 1: 5, 2: 5, 3: 5}


def test_a_balanced_sample_is_asked_for_and_its_limit_names_the_class_and_the_flags():
    frame = skewed_frame()
    assert subsample(frame, 20, balance=True)["label"].value_counts().tolist() == [5] * 4
    with pytest.raises(ValueError) as refused:
        subsample(frame, 40, balance=True)
    message = str(refused.value)
    assert message.startswith("class 'c3' has only 5 rows, 10 needed for a balanced sample of 40")
    assert "--train-size" in message and "drop --balance" in message
    assert subsample(frame, 3)["label"].value_counts().sort_index().tolist() == [1, 1, 1]  # the largest three
    assert set(subsample(frame, 3)["label"]) == {0, 1, 2}


@pytest.fixture(scope="module")
def tickets(tmp_path_factory) -> Path:
    """1,200 generated tickets over 12 skewed categories, empty and long bodies, subject and body columns."""
    return write_tickets(tmp_path_factory.mktemp("tickets") / "tickets.csv", rows=1200, seed=0)


def test_the_skewed_file_is_as_the_issue_describes(tickets):
    frame = pd.read_csv(tickets, keep_default_na=False, na_values=[""])
    counts = frame["category"].value_counts()
    assert len(counts) == 12 and counts.iloc[0] / counts.iloc[-1] > 15  # from a third of the rows to ~1 %
    assert frame["body"].isna().sum() > 10  # empty bodies
    assert frame["body"].fillna("").str.split().str.len().max() > 600  # texts far past 512 tokens
    assert ticket_frame(rows=50, seed=1).equals(ticket_frame(rows=50, seed=1))  # deterministic


def test_empty_rows_are_refused_with_the_flag_or_left_out_and_counted(tickets, capsys):
    config = DataConfig(dataset=str(tickets), text_column="body", label_column="category", train_size=None,
                        eval_size=None)
    with pytest.raises(ValueError) as refused:
        load_frames(config)
    assert "no text in column 'body' in" in str(refused.value)
    assert "pass --drop-empty to leave them out and count them" in str(refused.value)
    train, evaluation = load_frames(DataConfig(**{**config.__dict__, "drop_empty": True}))
    out = capsys.readouterr().out
    empty = pd.read_csv(tickets, keep_default_na=False, na_values=[""])["body"].isna().sum()
    assert f"left out {empty} rows (rows " in out and "without text (--drop-empty)" in out
    assert len(train) + len(evaluation) == 1200 - empty  # nothing else dropped


def test_a_single_file_holds_out_a_stated_stratified_fifth(tickets, capsys):
    config = DataConfig(dataset=str(tickets), text_column="subject", label_column="category", train_size=None,
                        eval_size=None)
    train, evaluation = load_frames(config)
    assert "held out 240 of 1200 rows (20%, stratified by class) for evaluation" in capsys.readouterr().out
    whole = pd.read_csv(tickets)["category"].value_counts(normalize=True)
    held = evaluation["label"].map(dict(enumerate(evaluation.attrs["label_names"]))).value_counts(normalize=True)
    assert (held.reindex(whole.index) - whole).abs().max() < 0.02  # every class in its share
    assert set(evaluation["label"]) == set(train["label"]) == set(range(12))


def test_a_class_too_small_to_hold_one_out_is_named(tmp_path):
    path = tmp_path / "tiny_class.csv"
    rows = [(f"a text {i}", "common") for i in range(30)] + [("the only one", "rare class")]
    pd.DataFrame(rows, columns=["text", "label"]).to_csv(path, index=False)
    with pytest.raises(ValueError) as refused:
        load_frames(DataConfig(dataset=str(path), train_size=None, eval_size=None))
    assert "class(es) ['rare class'] have one row each" in str(refused.value)
    assert "--eval-dataset" in str(refused.value)


def test_balance_says_how_many_rows_it_keeps(tickets, capsys):
    config = DataConfig(dataset=str(tickets), text_column="subject", label_column="category", train_size=None,
                        eval_size=None, balance=True)
    train, _ = load_frames(config)
    per_class = train["label"].value_counts()
    assert per_class.nunique() == 1 and len(per_class) == 12
    assert f"balanced training sample (--balance): 12 classes × {per_class.iloc[0]} rows = {len(train)} of the " \
           in capsys.readouterr().out


def test_two_text_columns_as_a_pair_or_joined():
    raw = pd.DataFrame({"subject": ["Refund", "Login"], "body": ["money back please", None], "y": ["a", "b"]})
    pair = prepare_frame(raw, "subject", "y", second_text_column="body")
    assert pair["text"].tolist() == ["Refund", "Login"] and pair["text_pair"].tolist() == ["money back please", ""]
    joined = prepare_frame(raw, "subject", "y", second_text_column="body", join_texts=True)
    assert joined["text"].tolist() == ["Refund\nmoney back please", "Login"] and "text_pair" not in joined
    tokenizer = load_tokenizer(packaged_minilm_path() or MINILM)
    encoded = tokenize_frame(pair, tokenizer, 32)
    assert 1 in encoded[0]["token_type_ids"]  # the body is BERT's second segment
    with pytest.raises(ValueError, match="truncation 'tail' cuts one text"):
        tokenize_frame(pair, tokenizer, 32, truncation="tail")
    with pytest.raises(ValueError, match="pass --join-texts"):
        DataConfig(second_text_column="body", truncation="head+tail")
    with pytest.raises(ValueError, match="join_texts needs second_text_column"):
        DataConfig(join_texts=True)


def test_long_texts_are_counted_and_the_chapter_9_levers_named():
    report = cut_report([10, 600, 300, 40], 256)
    assert report == {"examples": 4, "longer": 2, "tokens": 950, "tokens_cut": 344 + 44}
    line = cut_line(report, 256)
    assert line.startswith("training texts: 2 of 4 (50%) are longer than --max-length 256 tokens")
    assert "leaving out 41% of all the texts' tokens" in line and "--truncation head+tail" in line
    assert "--window 256 --max-length 1024" in line
    assert cut_line(cut_report([10, 20], 256), 256).endswith("none longer than --max-length 256 tokens, nothing cut")


def test_per_class_scores_the_confusion_and_chance_for_skewed_data():
    labels = np.array([0] * 6 + [1] * 3 + [2] * 1)
    predicted = np.array([0] * 6 + [0, 1, 1] + [0])
    predictions = Predictions(predicted, labels, 0.5)
    assert predictions.majority_share() == 0.6
    rows = predictions.per_class(["big", "mid", "rare"])
    assert [r["support"] for r in rows] == [6, 3, 1] and rows[2]["recall"] == 0.0 and rows[0]["recall"] == 1.0
    assert predictions.confusion(["big", "mid", "rare"]) == [[6, 0, 0], [1, 2, 0], [1, 0, 0]]
    assert [r["class"] for r in worst_classes(rows)] == ["rare", "mid", "big"]
    from bertmem.experiments.report import class_report

    report = class_report(predictions, ["big", "mid", "rare"])
    summary = class_summary({**predictions.metrics()}, report)
    assert "always answering the largest class: 0.600" in summary
    assert "weakest classes: 'rare' F1 0.00" in summary
    assert "most frequent confusion: 1 'mid' examples predicted as 'big'" in summary


def test_an_epoch_is_estimated_from_flops_with_a_measured_floor_per_micro_step():
    t4 = CARDS["T4"]
    bert = model_work("bert-base-uncased")
    big = epoch_estimate(bert, 1000, 512, 8, t4, "fp16")
    assert big.bound == "compute" and big.micro_steps == 125
    flops = bert.shape.training_flops(torch.tensor([512]))  # the bench's matmul count, one example
    assert big.seconds == pytest.approx(125 * 8 * flops / (t4.measured_tflops["fp16"] * 1e12))
    assert "estimated" in big.line() and "published rate" in big.line() and "matmul FLOPs" in big.line()
    small_model = ModelWork(30_000_000, non_embedding=22_000_000)  # uncounted: 6 · non-embedding parameters · tokens
    small = epoch_estimate(small_model, 1000, 40, 8, t4, "fp16")
    assert small.bound == "per-step floor" and small.seconds == pytest.approx(125 * micro_step_floor_seconds())
    assert "6 · non-embedding parameters · tokens" in small.line()
    # the floor makes 8 × 4 slower than 32 × 1 for the same examples when steps are launch-bound
    assert epoch_estimate(small_model, 1024, 40, 8, t4, "fp16").seconds > \
        epoch_estimate(small_model, 1024, 40, 32, t4, "fp16").seconds
    assert 0.01 < micro_step_floor_seconds() < 0.1  # A3's measured tens of milliseconds
    # LoRA trains few weights and frozen layers run no backward: fewer FLOPs per example, a shorter epoch
    lora = epoch_estimate(model_work("bert-base-uncased", lora_r=8), 1000, 512, 8, t4, "fp16")
    frozen = epoch_estimate(model_work("bert-base-uncased", freeze_layers=6), 1000, 512, 8, t4, "fp16")
    assert lora.seconds < big.seconds and frozen.seconds < big.seconds
    # gradient checkpointing runs the layers' forward again (not the head's): about 4/3 for a full fine-tune, more
    # for LoRA, whose backward is cheaper
    lengths = torch.tensor([512], dtype=torch.float64)
    again = epoch_estimate(bert, 1000, 512, 8, t4, "fp16", checkpointing=True)
    assert again.seconds == pytest.approx(125 * 8 * (flops + bert.shape.recompute_flops(lengths))
                                          / (t4.measured_tflops["fp16"] * 1e12))
    lora_again = epoch_estimate(model_work("bert-base-uncased", lora_r=8), 1000, 512, 8, t4, "fp16",
                                checkpointing=True)
    assert lora_again.seconds / lora.seconds > again.seconds / big.seconds  # a larger share for LoRA


def plan_json(capsys, *argv) -> dict:
    capsys.readouterr()
    assert main(["plan", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.slow
def test_plan_prints_the_train_command_that_runs_it_with_the_same_flags(capsys):
    plan = plan_json(capsys, "--memory", "t4", "--max-length", "256")
    command = plan["train_command"]
    assert command.startswith("bertmem train --dataset YOUR_FILE.csv --output-dir runs/mine --recipe book --model ")
    assert command.endswith("--effective-batch 32 --micro-batch auto") and "--memory t4" in command
    assert "--precision auto" in command and plan["request"]["precision"] == "fp16"  # auto: fp16 on a T4
    args = build_parser().parse_args(command.split()[1:])  # every flag is one `bertmem train` knows
    assert (args.micro_batch, args.memory, args.effective_batch, args.max_length, args.precision) == (
        "auto", "t4", 32, 256, "auto")
    assert "--memory" not in plan_json(capsys, "--memory", "auto")["train_command"]  # auto: the GPU in use


def test_the_train_command_plan_prints_runs_and_plans_as_plan_did(tiny_model_dir, reviews_csv, tmp_path, capsys):
    """The printed command, with the reader's file, folder and columns (and a short run) added, trains."""
    plan = plan_json(capsys, "--model", str(tiny_model_dir), "--memory", "t4", "--max-length", "64",
                     "--effective-batch", "16")
    command = plan["train_command"].replace("YOUR_FILE.csv", str(reviews_csv))
    command = command.replace("runs/mine", str(tmp_path / "run")).split()[1:]
    assert main(command + ["--text-column", "review", "--label-column", "sentiment", "--train-size", "48",
                           "--eval-size", "16", "--max-steps", "1", "--no-progress"]) == 0
    ran = json.loads((tmp_path / "run" / "metrics.json").read_text())["plan"]
    assert ran["budget"] == "a Colab T4" and ran["micro_batch"] * ran["accumulation_steps"] == 16
    assert plan_json(capsys, "--memory", "l4", "--max-length", "256")["request"]["precision"] == "bf16"


@pytest.mark.slow
def test_from_a_skewed_file_to_a_plan_a_run_and_predictions(tickets, tmp_path, capsys):
    """The issue's path: a 12-class CSV with empty rows, long texts and two text columns -> plan -> train ->
    predict, with the commands the README gives."""
    out = tmp_path / "run"
    assert main(["train", "--dataset", str(tickets), "--text-column", "body", "--second-text-column", "subject",
                 "--label-column", "category", "--drop-empty", "--recipe", "book", "--memory", "t4",
                 "--max-length", "128", "--max-steps", "3", "--no-progress", "--save-model", "--output-dir",
                 str(out)]) == 0
    err = capsys.readouterr().err
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["plan"]["budget"] == "a Colab T4" and metrics["plan"]["epoch_estimate"]["seconds"] > 0
    assert metrics["plan"]["micro_batch"] * metrics["plan"]["accumulation_steps"] == 32
    assert len(metrics["per_class"]) == 12 and len(metrics["confusion_matrix"]["counts"]) == 12
    assert metrics["longer_than_max_length"]["train"]["longer"] > 0
    assert (out / "confusion.png").stat().st_size > 10_000
    assert "always answering the largest class" in err and "weakest classes" in err
    new = tmp_path / "new.csv"
    fresh = ticket_frame(rows=40, seed=9, empty_share=0.0)
    fresh.loc[[3, 7], ["body", "subject"]] = ""  # no text at all: no prediction, a reason
    fresh.to_csv(new, index=False)
    assert main(["predict", "--model", str(out / "model"), "--dataset", str(new), "--id-columns", "ticket_id",
                 "--no-progress"]) == 0
    predictions = pd.read_csv(tmp_path / "new-predictions.csv", keep_default_na=False)
    assert predictions["ticket_id"].tolist() == fresh["ticket_id"].tolist()  # every row, in order
    assert predictions.loc[[3, 7], "predicted"].tolist() == ["", ""]
    assert predictions.loc[3, "reason"].startswith("no text in 'body' or 'subject'")
    probabilities = predictions.filter(like="probability ").drop(index=[3, 7]).astype(float)
    assert probabilities.shape[1] == 12 and np.allclose(probabilities.sum(axis=1), 1, atol=1e-3)
    assert set(predictions["predicted"]) - {""} <= set(metrics["label_names"])
    with pytest.raises(SystemExit):  # never over an earlier file
        main(["predict", "--model", str(out / "model"), "--dataset", str(new)])
    assert "new-predictions.csv exists: pass --overwrite" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # never over the reader's own file
        main(["predict", "--model", str(out / "model"), "--dataset", str(new), "--output", str(new)])
    assert "is the file being labelled" in capsys.readouterr().err


@pytest.mark.slow
def test_train_refuses_what_cannot_work_in_one_sentence_each(tickets, tmp_path, capsys):
    common = ["train", "--dataset", str(tickets), "--text-column", "body", "--label-column", "category",
              "--drop-empty", "--max-length", "256", "--no-progress", "--max-steps", "1"]
    cases = [
        (["--micro-batch", "auto", "--accumulation-steps", "2"], "--micro-batch auto plans the accumulation steps"),
        (["--effective-batch", "32", "--accumulation-steps", "2"], "give one of them"),
        (["--micro-batch", "256", "--memory", "2GiB"], "micro-batch 256 does not fit 2.00 GiB: the largest that "
                                                      "fits this data's longest batch (256 tokens) is"),
        # one MiniLM example at 256 tokens needs ~0.9 GiB with AdamW, ~0.65 GiB with 8-bit AdamW
        (["--micro-batch", "auto", "--memory", "800MiB"], "with --optimizer adamw8bit it fits (estimated)"),
        (["--micro-batch", "8", "--effective-batch", "30"], "--effective-batch 30 is not a multiple of the micro-batch "
                                                            "8: use 24 or 32"),
        (["--memory", "16 gigs"], "cannot read memory size '16 gigs'"),
    ]
    for i, (extra, words) in enumerate(cases):
        with pytest.raises(SystemExit) as stop:
            main([*common, *extra, "--output-dir", str(tmp_path / f"r{i}")])
        err = capsys.readouterr().err
        assert stop.value.code == 2 and words in err, (extra, err)
        assert len(err.strip().splitlines()[-1]) < 600


def test_the_recipe_preset_sets_defaults_that_flags_still_win():
    from bertmem.cli import RECIPES, recipe_defaults

    parser = build_parser()
    defaults = recipe_defaults("book", parser.train_parser)
    assert defaults["layerwise_decay"] == 0.95 and defaults["micro_batch"] == "auto"
    assert defaults["effective_batch"] == 32 and defaults["group_by_length"] is True
    assert len(defaults) == len([f for f in RECIPES["book"] if f.startswith("--")])


def test_hash_of_a_text_pair_differs_from_its_first_text():
    frame = pd.DataFrame({"text": ["a", "a"], "text_pair": ["x", "y"], "label": [0, 1]})
    from bertmem.data.frames import row_keys

    keys = row_keys(frame)
    assert keys[0] != keys[1] and text_hash(keys[0]) != text_hash("a")


def test_a_model_folder_loads_with_its_own_classes(tmp_path):
    from bertmem.model.loading import classifier_from_config, load_classifier, tiny_bert_config

    names = [f"class {i}" for i in range(5)]
    config = tiny_bert_config(num_labels=5, id2label=dict(enumerate(names)),
                              label2id={n: i for i, n in enumerate(names)})
    torch.manual_seed(0)
    classifier_from_config(config).save_pretrained(tmp_path / "model")
    loaded = load_classifier(tmp_path / "model")  # no num_labels: the folder's own five
    assert loaded.config.num_labels == 5 and loaded.config.id2label[4] == "class 4"
    with pytest.raises(ValueError, match="3 label names for num_labels=5"):
        load_classifier(tmp_path / "model", num_labels=5, label_names=names[:3])


def test_explicit_batch_flags_win_over_the_recipe_and_small_errors_read_right(capsys):
    """--recipe book sets --effective-batch 32, but --micro-batch N --accumulation-steps M given by hand win."""
    from bertmem.experiments.fit import accumulation_for

    args = build_parser().parse_args(["train", "--dataset", "x", "--output-dir", "x", "--micro-batch", "8",
                                     "--accumulation-steps", "2"])
    assert (args.micro_batch, args.accumulation_steps) == (8, 2)
    with pytest.raises(ValueError, match="the micro-batch 64 is larger than --effective-batch 32: use a micro-batch"):
        accumulation_for(32, 64)
    with pytest.raises(ValueError, match="--effective-batch 30 is not a multiple of the micro-batch 8: use 24 or 32"):
        accumulation_for(30, 8)


def test_class_shares_refuse_what_no_sample_can_hold():
    with pytest.raises(ValueError, match="a sample of 200 rows from 100"):
        class_shares({0: 60, 1: 40}, 200)
    with pytest.raises(ValueError, match="a sample of 1 row cannot hold one row of each of the 2 classes"):
        class_shares({0: 60, 1: 40}, 1)


def test_ticket_files_hold_exactly_the_rows_asked_with_every_class():
    for rows in (60, 100, 800):
        frame = ticket_frame(rows=rows, seed=3)
        assert len(frame) == rows and frame["category"].nunique() == 12


def test_cut_advice_for_a_text_pair_names_join_texts():
    line = cut_line({"examples": 4, "longer": 2, "tokens": 950, "tokens_cut": 388}, 256, pair=True)
    assert "--join-texts" in line and "of all the texts' tokens" in line


def test_card_names_take_the_right_article():
    from bertmem.memory.cards import with_article

    assert [with_article(n) for n in ("Colab T4", "A100 40GB", "H100 80GB (SXM)", "L4", "RTX 3090", "V100")] == [
        "a Colab T4", "an A100 40GB", "an H100 80GB (SXM)", "an L4", "an RTX 3090", "a V100"]


def test_counting_an_epochs_padding_leaves_the_training_order_alone():
    """The plan counts the padded tokens of an epoch without drawing from the training loader's generator."""
    from bertmem.data.frames import epoch_padded_tokens

    lengths = [5, 9, 3, 20, 7, 11, 2, 14]
    grouped = epoch_padded_tokens(lengths, 4, group_by_length=True, seed=0)
    shuffled = epoch_padded_tokens(lengths, 4, group_by_length=False, seed=0)
    assert sum(lengths) <= grouped <= shuffled <= 4 * 20 * 2
    assert epoch_padded_tokens(lengths, 4, pad_to=32) == 8 * 32
    # the count follows the order the training loader draws, for both batchings
    from bertmem.data.frames import EncodedDataset, make_loader
    from bertmem.model import load_tokenizer

    tokenizer = load_tokenizer("sentence-transformers/all-MiniLM-L6-v2")
    dataset = EncodedDataset({"input_ids": [[101] + [1000] * (n - 2) + [102] for n in lengths],
                              "attention_mask": [[1] * n for n in lengths]}, [0] * len(lengths))
    from bertmem.data.batching import epoch_batches

    for by_length, counted in ((True, grouped), (False, shuffled)):
        loader = make_loader(dataset, tokenizer, 4, shuffle=True, seed=0, group_by_length=by_length)
        # the first epoch as the loop draws it (it sets a length-grouped sampler's epoch to 1 first)
        assert sum(batch["input_ids"].numel() for batch in epoch_batches(loader, 1)) == counted


@pytest.mark.slow
def test_predict_says_what_it_assumes_and_survives_a_file_without_text(tmp_path, capsys):
    from bertmem.model.loading import classifier_from_config, tiny_bert_config

    names = ["neg", "pos"]
    config = tiny_bert_config(num_labels=2, id2label=dict(enumerate(names)), label2id={"neg": 0, "pos": 1},
                              vocab_size=load_tokenizer(packaged_minilm_path() or MINILM).vocab_size)
    torch.manual_seed(0)
    classifier_from_config(config).save_pretrained(tmp_path / "model")
    load_tokenizer(packaged_minilm_path() or MINILM).save_pretrained(tmp_path / "model")
    empty = tmp_path / "empty.csv"
    pd.DataFrame({"id": [1, 2], "text": ["", "   "]}).to_csv(empty, index=False)
    assert main(["predict", "--model", str(tmp_path / "model"), "--dataset", str(empty), "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "no bertmem.json in" in err and "--text-column text, --max-length 256, --truncation head" in err
    written = pd.read_csv(tmp_path / "empty-predictions.csv", keep_default_na=False)
    assert written["predicted"].tolist() == ["", ""] and written["reason"].str.startswith("no text").all()
    plain = tmp_path / "plain"
    classifier_from_config(tiny_bert_config()).save_pretrained(plain)  # a head nobody trained: LABEL_0, LABEL_1
    load_tokenizer(packaged_minilm_path() or MINILM).save_pretrained(plain)
    with pytest.raises(SystemExit):
        main(["predict", "--model", str(plain), "--dataset", str(empty), "--no-progress", "--output",
              str(tmp_path / "plain.csv")])
    assert "has no trained classes" in capsys.readouterr().err


def test_train_keeps_its_model_by_default_and_prints_the_predict_command_that_reads_it(reviews_csv, tmp_path,
                                                                                      capsys):
    """No model flag given: the model is saved (as the Trainer and AutoTrain do) and the last lines say where, with
    the `bertmem predict` command; that command, with a new file, labels it."""
    out = tmp_path / "run"
    assert main(cli_args(reviews_csv, out, "--max-steps", "2")) == 0
    err = capsys.readouterr().err
    assert (out / "model" / "bertmem.json").is_file() and (out / "model" / "config.json").is_file()
    last = err.strip().splitlines()[-3:]
    assert last[0].startswith(f"bertmem train: results in {out}: metrics.json")
    command = last[2].strip()
    assert command == f"bertmem predict --model {out / 'model'} --dataset NEW_FILE"
    new = tmp_path / "new.csv"
    pd.read_csv(reviews_csv).drop(columns="sentiment").head(5).to_csv(new, index=False)
    assert main(command.replace("NEW_FILE", str(new)).split()[1:] + ["--no-progress"]) == 0
    assert len(pd.read_csv(tmp_path / "new-predictions.csv")) == 5


def test_no_save_model_keeps_none_and_says_so(reviews_csv, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(cli_args(reviews_csv, out, "--max-steps", "1", "--no-save-model")) == 0
    assert not (out / "model").exists()
    assert "no model kept (--no-save-model)" in capsys.readouterr().err.strip().splitlines()[-1]


def test_under_fsdp_the_default_saves_nothing_and_an_asked_save_is_refused(reviews_csv, tmp_path, capsys,
                                                                          monkeypatch):
    """Rank 0 alone cannot write weights FSDP shards across processes (chapter 7's runs pass --no-save-model)."""
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    with pytest.raises(SystemExit) as stop:
        main(cli_args(reviews_csv, tmp_path / "asked", "--max-steps", "1", "--save-model"))
    assert stop.value.code == 2 and "--save-model under FSDP is not supported" in capsys.readouterr().err
    assert main(cli_args(reviews_csv, tmp_path / "default", "--max-steps", "1")) == 0
    assert "no model saved under FSDP" in capsys.readouterr().err
    assert not (tmp_path / "default" / "model").exists()
