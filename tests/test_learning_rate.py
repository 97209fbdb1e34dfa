"""One default learning rate per model size, defined once (`bertmem.loop.optim.default_learning_rate`) and read by
TrainConfig, BenchConfig, the profiles, `bertmem train` and `bench` (chapter 0, the command line)."""

import pytest

import bertmem.experiments.bench as bench_module
import bertmem.experiments.run as run_module
import bertmem.profiles as profiles
from bertmem.cli import main
from bertmem.experiments.bench import BenchConfig
from bertmem.loop import BASE_LEARNING_RATE, SMALL_LEARNING_RATE, TrainConfig, default_learning_rate
from bertmem.loop.config import TINY_MODEL
from bertmem.profiles import get_profile, learning_rate_for

MINILM, BERT_BASE = "sentence-transformers/all-MiniLM-L6-v2", "bert-base-uncased"


def test_the_rate_follows_the_hidden_size():
    assert default_learning_rate(384) == SMALL_LEARNING_RATE == 1e-4
    assert default_learning_rate(768) == default_learning_rate(1024) == BASE_LEARNING_RATE == 2e-5
    assert learning_rate_for(MINILM) == learning_rate_for(TINY_MODEL) == SMALL_LEARNING_RATE
    assert learning_rate_for(BERT_BASE) == learning_rate_for("FacebookAI/roberta-large") == BASE_LEARNING_RATE


def test_every_default_is_the_rules():
    assert TrainConfig().learning_rate == learning_rate_for(BERT_BASE)  # without a model: a base-sized one's
    assert BenchConfig().learning_rate == learning_rate_for(BenchConfig().model_id)
    for name in ("cpu", "gpu", "full"):
        profile = get_profile(name, env={})
        assert profile.learning_rate == learning_rate_for(profile.model_id), name
        assert profile.train_config().learning_rate == profile.bench_config().learning_rate == profile.learning_rate


def test_a_profile_reading_another_model_takes_that_models_rate_unless_one_is_given():
    assert get_profile("cpu", env={"BERTMEM_MODEL_ID": BERT_BASE}).learning_rate == BASE_LEARNING_RATE
    assert get_profile("gpu", env={"BERTMEM_MODEL_ID": MINILM}).learning_rate == SMALL_LEARNING_RATE
    given = {"BERTMEM_MODEL_ID": BERT_BASE, "BERTMEM_LEARNING_RATE": "3e-5"}
    assert get_profile("cpu", env=given).learning_rate == 3e-5


def test_a_model_whose_size_cannot_be_read_is_one_sentence(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ValueError, match="not available offline"):
        learning_rate_for("nobody/no-model")  # the loader's own sentence, which names its fix
    with pytest.raises(ValueError, match="has no config.json"):
        learning_rate_for(str(tmp_path))  # a folder that is no saved model: the loader's too

    def not_found(model_id):
        raise OSError(f"{model_id} is not a valid model identifier")  # what the Hub answers a typo

    monkeypatch.setattr(profiles, "model_config", not_found)
    with pytest.raises(ValueError, match="cannot read nobody/no-model's configuration to choose its learning rate: "
                                         r"check .*--learning-rate"):
        learning_rate_for("nobody/no-model")


@pytest.fixture
def recipes(monkeypatch):
    """The TrainConfig (BenchConfig) each command builds, caught before anything trains."""
    caught = []

    def stop(*args, **kwargs):
        caught.append(next(a for a in args if isinstance(a, (TrainConfig, BenchConfig))))
        raise ValueError("caught")

    monkeypatch.setattr(run_module, "run_experiment", stop)
    monkeypatch.setattr(bench_module, "run_bench", stop)
    return caught


@pytest.mark.parametrize("model, flags, expected", [
    (MINILM, [], SMALL_LEARNING_RATE),
    (BERT_BASE, [], BASE_LEARNING_RATE),  # on the CPU profile too: not MiniLM's rate
    (BERT_BASE, ["--lr", "3e-4"], 3e-4),  # given (Hugging Face's alias): kept
    (MINILM, ["--learning-rate", "5e-5"], 5e-5),
])
def test_train_and_bench_take_the_trained_models_rate_unless_given(model, flags, expected, recipes, tmp_path,
                                                                    capsys):
    for argv in (["train", "--dataset", "sst2", "--output-dir", str(tmp_path / "t")],
                 ["bench", "--output-dir", str(tmp_path / "b")]):
        with pytest.raises(SystemExit):
            main([*argv, "--model", model, *flags])
        assert "caught" in capsys.readouterr().err
    assert [r.learning_rate for r in recipes] == [expected, expected]


def test_the_help_says_the_rule():
    from bertmem.cli import build_parser, subcommands

    helped = subcommands(build_parser())["train"].format_help()
    assert "by the model's size: 2e-5 from hidden size 768 up" in " ".join(helped.split())
