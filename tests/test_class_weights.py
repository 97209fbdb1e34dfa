"""Class weights (A1): scikit-learn's balanced weights, the loss they make, and every backend training on it."""

import numpy as np
import pytest
import torch
from cli_helpers import cli_args
from sklearn.utils.class_weight import compute_class_weight
from test_cli_backends import toy_loader, toy_model

from bertmem.cli import main
from bertmem.loop.accelerate_loop import train_with_accelerate
from bertmem.loop.class_weights import balanced_weights, weigh_classes, weights_line
from bertmem.loop.combined import train
from bertmem.loop.config import RunConfig, TrainConfig
from bertmem.loop.hf_trainer import train_with_trainer


def test_balanced_weights_are_scikit_learns_and_a_missing_class_weighs_nothing():
    labels = [0] * 30 + [1] * 6 + [2] * 2 + [3] * 2
    assert balanced_weights(labels, 4).tolist() == pytest.approx(
        compute_class_weight("balanced", classes=np.arange(4), y=np.array(labels)).tolist())
    assert balanced_weights([0, 0, 2], 3).tolist() == pytest.approx([0.5, 0.0, 1.0])  # n / (K · n_k), K = 3
    line = weights_line(balanced_weights(labels, 4), ["big", "mid", "rare", "rarer"])
    assert "from 0.33 ('big') to 5.00 ('rarer')" in line  # ties: the last class named


def test_the_weighted_loss_replaces_the_models_loss_in_training_only():
    model, batch = toy_model(), next(iter(toy_loader()))
    weights = torch.tensor([0.5, 3.0])
    model.eval()
    plain = model(**batch).loss
    handle = weigh_classes(model, weights)
    assert torch.equal(model(**batch).loss, plain)  # evaluation keeps the plain cross-entropy
    model.train()
    torch.manual_seed(1)
    weighted = model(**batch)
    loss = float(weighted.loss)
    torch.manual_seed(1)
    per_example = torch.nn.functional.cross_entropy(model(**batch).logits, batch["labels"], reduction="none")
    assert loss == pytest.approx(float((weights[batch["labels"]] * per_example).mean()))
    assert loss != pytest.approx(float(per_example.mean()), rel=1e-3)
    handle.remove()
    torch.manual_seed(1)
    assert float(model(**batch).loss) == pytest.approx(float(per_example.mean()))  # the hook gone: plain again


@pytest.mark.slow
def test_every_backend_trains_on_the_weighted_loss(tmp_path):
    config = TrainConfig(epochs=1, learning_rate=1e-3, accumulation_steps=2)
    quiet, weights = RunConfig(progress=False), torch.tensor([0.25, 4.0])

    def weighted(model):
        weigh_classes(model, weights)
        return model

    plain = train(weighted(toy_model()), toy_loader(), config, run=quiet).losses
    accelerated = train_with_accelerate(weighted(toy_model()), toy_loader(), config, run=quiet).losses
    trainer = train_with_trainer(weighted(toy_model()), toy_loader(), config, output_dir=str(tmp_path),
                                 run=quiet).losses
    unweighted = train(toy_model(), toy_loader(), config, run=quiet).losses
    assert accelerated == pytest.approx(plain, rel=1e-5) and trainer == pytest.approx(plain, rel=1e-5)
    assert plain[0] != pytest.approx(unweighted[0], rel=1e-3)  # the weights reached the loss each one trained on


def test_the_command_line_weighs_classes_when_asked(tmp_path, reviews_csv, capsys):
    import json

    import pandas as pd

    reviews = pd.read_csv(reviews_csv)
    rare = reviews["sentiment"] == reviews["sentiment"].iloc[0]
    skewed = tmp_path / "skewed.csv"  # a balanced file has every weight 1: the same loss either way
    pd.concat([reviews[~rare], reviews[rare].head(int(rare.sum()) // 3)]).to_csv(skewed, index=False)
    small = ("--train-size", "48", "--eval-size", "16", "--max-steps", "1", "--no-save-model")
    assert main(cli_args(skewed, tmp_path / "weighted", "--class-weights", "balanced", *small)) == 0
    assert "class weights (balanced, n / (K · n_k)): from " in capsys.readouterr().out
    assert main(cli_args(skewed, tmp_path / "plain", *small)) == 0
    assert "class weights" not in capsys.readouterr().out
    first = {run: json.loads((tmp_path / run / "metrics.json").read_text())["history"][0]["loss"]
             for run in ("weighted", "plain")}
    assert first["weighted"] != pytest.approx(first["plain"], rel=1e-4)  # the weights reached the loss trained on


def test_a_recipe_asking_for_class_weights_refuses_a_model_nobody_weighted():
    config = TrainConfig(epochs=1, learning_rate=1e-3, class_weights="balanced")
    with pytest.raises(ValueError, match="needs the weights from the training labels"):
        train(toy_model(), toy_loader(), config, run=RunConfig(progress=False))
    model = toy_model()
    weigh_classes(model, balanced_weights([0, 1, 1], 2))
    assert train(model, toy_loader(), config, run=RunConfig(progress=False)).losses  # hooked: it trains


def test_pooled_windows_train_on_the_weighted_loss_of_their_documents():
    from bertmem.model.chunked import ChunkedClassifier

    model = ChunkedClassifier(toy_model()).train()
    g = torch.Generator().manual_seed(0)
    batch = {"input_ids": torch.randint(5, 1000, (5, 16), generator=g),
             "attention_mask": torch.ones(5, 16, dtype=torch.long),
             "document": torch.tensor([0, 0, 1, 2, 2]), "labels": torch.tensor([0, 1, 1])}  # 5 windows, 3 documents
    weights = torch.tensor([0.25, 4.0])
    weigh_classes(model, weights)
    torch.manual_seed(1)
    out = model(**batch)
    per_document = torch.nn.functional.cross_entropy(out.logits, batch["labels"], reduction="none")
    assert float(out.loss) == pytest.approx(float((weights[batch["labels"]] * per_document).mean()))
    assert float(out.loss) != pytest.approx(float(per_document.mean()), rel=1e-3)
