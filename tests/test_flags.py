"""The command line is generated from the configuration dataclasses: names, defaults, help, validation."""

import dataclasses

import pytest

from bertmem.cli import build_parser, main, run_from_flags
from bertmem.core.flags import config_from_flags, flag_fields, flag_name
from bertmem.data.loaders import DataConfig
from bertmem.experiments.bench import BenchConfig
from bertmem.loop.config import RunConfig, TrainConfig
from bertmem.memory.planner import PlanRequest
from bertmem.profiles import get_profile


def subparser(name):
    parser = build_parser()
    return next(a for a in parser._subparsers._group_actions if a.dest == "command").choices[name]


DATASET = ("--dataset", get_profile().dataset)  # train has no default dataset: a forgotten flag never trains IMDb


def test_train_without_a_dataset_stops_in_one_sentence_and_predict_names_its_required_flags(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["train", "--output-dir", "out"])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and err[-1].endswith("the following arguments are required: --dataset")
    help_text = subparser("predict").format_help()
    assert "(default: )" not in help_text and help_text.count("(required)") == 2
    with pytest.raises(SystemExit):
        main(["predict", "--dataset", "new.csv"])
    assert "required: --model" in capsys.readouterr().err


@pytest.mark.parametrize("command, classes", [("train", (RunConfig, DataConfig, TrainConfig)),
                                              ("bench", (BenchConfig,)), ("plan", (PlanRequest,))])
def test_every_helped_field_is_a_flag_of_its_command(command, classes):
    options = {o for a in subparser(command)._actions for o in a.option_strings}
    for cls in classes:
        for f in flag_fields(cls):
            assert flag_name(f) in options, f"{cls.__name__}.{f.name} has help but no flag"


def test_train_flags_build_the_three_configs_with_the_profiles_defaults():
    args = subparser("train").parse_args([*DATASET, "--output-dir", "out", "--lr", "3e-5", "--train-size", "all",
                                          "--no-group-by-length", "--max-grad-norm", "0",
                                          "--layerwise-decay", "0.9", "--gradient-checkpointing"])
    profile = get_profile()
    data, recipe = (config_from_flags(c, args) for c in (DataConfig, TrainConfig))
    assert data == profile.data_config(train_size=None, group_by_length=False)
    assert recipe == profile.train_config(learning_rate=3e-5, max_grad_norm=None,
                                              layerwise_decay=0.9, gradient_checkpointing=True)
    assert run_from_flags(args, profile) == profile.run_config(output_dir="out", save_model=True,  # kept: A1
                                                               checkpoint_minutes=profile.checkpoint_minutes)
    assert not RunConfig().save_model  # in Python a run keeps no model unless asked (a chapter trains many)


def test_train_defaults_a_reader_relies_on():
    args = subparser("train").parse_args([*DATASET, "--output-dir", "out"])
    data, recipe = config_from_flags(DataConfig, args), config_from_flags(TrainConfig, args)
    assert (data.data_seed, data.eval_batch_size, data.group_by_length, data.pad_to_max_length) == (0, None, True,
                                                                                                   False)
    assert (recipe.precision, recipe.seed, recipe.max_grad_norm, recipe.accumulation_steps) == ("auto", 0, 1.0, 1)
    assert recipe.learning_rate == get_profile().learning_rate and data.max_length == get_profile().max_length


def test_no_flag_is_a_prefix_of_another():
    # bench has no --seed (train's --seed is the training seed; bench's data seed is --data-seed): with
    # abbreviations on it would silently mean --seeds
    with pytest.raises(SystemExit):
        subparser("bench").parse_args(["--seed", "4"])
    with pytest.raises(SystemExit):
        subparser("train").parse_args([*DATASET, "--output-dir", "out", "--grad", "--lr", "1e-4"])


def test_bench_seeds_and_data_seed():
    args = subparser("bench").parse_args(["--seeds", "3", "4", "--data-seed", "2", "--no-progress"])
    bench = config_from_flags(BenchConfig, args)
    assert bench.seeds == (3, 4) and bench.data_seed == 2 and bench.progress is False


@pytest.mark.parametrize("flags, message", [
    (["--micro-batch", "0"], "micro_batch and eval_batch_size must be >= 1"),
    (["--warmup-ratio", "1.5"], "warmup_ratio must be in [0, 1)"),
    (["--eval-batch-size", "0"], "eval_batch_size must be >= 1"),
])
def test_a_bad_value_fails_in_the_dataclass_with_one_line(flags, message, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["train", *DATASET, "--output-dir", "out", *flags])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_configs_are_frozen_so_variants_are_replacements():
    recipe = TrainConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        recipe.epochs = 2
    assert dataclasses.replace(recipe, epochs=2).epochs == 2 and recipe.epochs == 1


def test_an_unreadable_value_names_the_flag(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["train", *DATASET, "--output-dir", "out", "--train-size", "lots"])
    assert stop.value.code == 2
    assert "argument --train-size: 'lots' is not a valid train_size" in capsys.readouterr().err


def test_one_name_per_idea_with_the_old_flags_as_aliases():
    """micro_batch, accumulation_steps, learning_rate, model_id: the same words in classes, flags and JSON."""
    new = subparser("train").parse_args([*DATASET, "--output-dir", "o", "--micro-batch", "4",
                                         "--learning-rate", "3e-5"])
    old = subparser("train").parse_args([*DATASET, "--output-dir", "o", "--batch-size", "4", "--lr", "3e-5"])
    assert config_from_flags(DataConfig, new) == config_from_flags(DataConfig, old)
    assert config_from_flags(DataConfig, new).micro_batch == 4
    assert config_from_flags(TrainConfig, old).learning_rate == 3e-5
    bench = config_from_flags(BenchConfig, subparser("bench").parse_args(["--accumulation", "2", "--model", "m"]))
    assert (bench.accumulation_steps, bench.model_id) == (2, "m")


@pytest.mark.parametrize("build, old, new", [
    (lambda: DataConfig(batch_size=4), "batch_size", "micro_batch"),
    (lambda: RunConfig(model="m"), "model", "model_id"),
    (lambda: BenchConfig(accumulation=2), "accumulation", "accumulation_steps"),
    (lambda: BenchConfig(seed=1), "seed", "data_seed"),
])
def test_an_old_keyword_names_its_new_spelling(build, old, new):
    with pytest.raises(TypeError, match=f"{old}= is now {new}="):
        build()


def test_the_old_environment_name_is_refused_with_the_new_one():
    with pytest.raises(ValueError, match="BERTMEM_BATCH_SIZE is now BERTMEM_MICRO_BATCH"):
        get_profile("cpu", env={"BERTMEM_BATCH_SIZE": "4"})
    assert get_profile("cpu", env={"BERTMEM_MICRO_BATCH": "4"}).micro_batch == 4


def test_the_plain_loops_defaults_are_the_recipes():
    """Chapter 0's train_baseline and make_optimizer default to TrainConfig's values: one default per knob."""
    import inspect

    from bertmem.loop.baseline import train_baseline
    from bertmem.loop.optim import make_optimizer

    recipe = TrainConfig()
    loop = inspect.signature(train_baseline).parameters
    for name in ("epochs", "learning_rate", "weight_decay", "warmup_ratio", "max_grad_norm"):
        assert loop[name].default == getattr(recipe, name), name
    optimizer = inspect.signature(make_optimizer).parameters
    assert (optimizer["lr"].default, optimizer["weight_decay"].default) == (recipe.learning_rate,
                                                                             recipe.weight_decay)


def test_a_bad_environment_variable_is_one_line_not_a_traceback(capsys, monkeypatch):
    monkeypatch.setenv("BERTMEM_BATCH_SIZE", "4")
    assert main(["plan", "--json"]) == 2
    err = capsys.readouterr().err
    assert "BERTMEM_BATCH_SIZE is now BERTMEM_MICRO_BATCH" in err and len(err.strip().splitlines()) == 1


def test_hugging_faces_flag_names_are_aliases_of_ours():
    """TrainingArguments' and the example scripts' names, for readers who come from the Trainer."""
    ours = subparser("train").parse_args([*DATASET, "--output-dir", "o", "--accumulation-steps", "4", "--epochs", "2",
                                          "--micro-batch", "16", "--max-length", "128", "--label-column", "topic"])
    theirs = subparser("train").parse_args([*DATASET, "--output-dir", "o", "--gradient-accumulation-steps", "4",
                                            "--num-train-epochs", "2", "--per-device-train-batch-size", "16",
                                            "--max-seq-length", "128", "--label-column-name", "topic"])
    assert vars(ours) == vars(theirs) and (ours.accumulation_steps, ours.epochs) == (4, 2)
    assert subparser("plan").parse_args(["--max-seq-length", "384"]).max_length == 384  # plan and train alike


def test_an_alias_counts_as_its_flag_where_a_rule_asks_what_was_given(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["train", *DATASET, "--output-dir", "out", "--micro-batch", "auto", "--gradient-accumulation-steps", "2"])
    assert stop.value.code == 2 and "--micro-batch auto plans the accumulation steps" in capsys.readouterr().err
