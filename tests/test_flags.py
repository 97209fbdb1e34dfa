"""The command line is generated from the configuration dataclasses: names, defaults, help, validation."""

import dataclasses

import pytest

from bertmem.bench import BenchConfig
from bertmem.cli import build_parser, main
from bertmem.run_config import RunConfig
from bertmem.flags import config_from_flags, flag_fields, flag_name
from bertmem.loaders import DataConfig
from bertmem.planner import PlanRequest
from bertmem.profile import get_profile
from bertmem.train import TrainConfig


def subparser(name):
    parser = build_parser()
    return next(a for a in parser._subparsers._group_actions if a.dest == "command").choices[name]


@pytest.mark.parametrize("command, classes", [("train", (RunConfig, DataConfig, TrainConfig)),
                                              ("bench", (BenchConfig,)), ("plan", (PlanRequest,))])
def test_every_helped_field_is_a_flag_of_its_command(command, classes):
    options = {o for a in subparser(command)._actions for o in a.option_strings}
    for cls in classes:
        for f in flag_fields(cls):
            assert flag_name(f) in options, f"{cls.__name__}.{f.name} has help but no flag"


def test_train_flags_build_the_three_configs_with_the_profiles_defaults():
    args = subparser("train").parse_args(["--output-dir", "out", "--lr", "3e-5", "--train-size", "all",
                                          "--no-group-by-length", "--max-grad-norm", "0",
                                          "--layerwise-decay", "0.9", "--gradient-checkpointing"])
    profile = get_profile()
    data, recipe, run = (config_from_flags(c, args) for c in (DataConfig, TrainConfig, RunConfig))
    assert data == DataConfig.from_profile(profile, train_size=None, group_by_length=False)
    assert recipe == TrainConfig.from_profile(profile, learning_rate=3e-5, max_grad_norm=None,
                                              layerwise_decay=0.9, gradient_checkpointing=True)
    assert run == RunConfig.from_profile(profile, output_dir="out")


def test_train_defaults_a_reader_relies_on():
    args = subparser("train").parse_args(["--output-dir", "out"])
    data, recipe = config_from_flags(DataConfig, args), config_from_flags(TrainConfig, args)
    assert (data.data_seed, data.eval_batch_size, data.group_by_length, data.pad_to_max_length) == (0, None, True,
                                                                                                   False)
    assert (recipe.precision, recipe.seed, recipe.max_grad_norm, recipe.accumulation_steps) == ("auto", 0, 1.0, 1)
    assert recipe.learning_rate == get_profile().learning_rate and data.max_length == get_profile().max_length


def test_no_flag_is_a_prefix_of_another():
    # --seed used to pick bench's data; with abbreviations on it would silently mean --seeds
    args = subparser("bench").parse_args(["--seed", "4"])
    assert args.seed == 4 and args.seeds == BenchConfig.from_profile(get_profile()).seeds
    with pytest.raises(SystemExit):
        subparser("train").parse_args(["--output-dir", "out", "--grad", "--lr", "1e-4"])


def test_bench_seeds_and_data_seed():
    args = subparser("bench").parse_args(["--seeds", "3", "4", "--data-seed", "2", "--no-progress"])
    bench = config_from_flags(BenchConfig, args)
    assert bench.seeds == (3, 4) and bench.seed == 2 and bench.progress is False


@pytest.mark.parametrize("flags, message", [
    (["--batch-size", "0"], "batch_size must be >= 1"),
    (["--warmup-ratio", "1.5"], "warmup_ratio must be in [0, 1)"),
    (["--eval-batch-size", "0"], "eval_batch_size must be >= 1"),
])
def test_a_bad_value_fails_in_the_dataclass_with_one_line(flags, message, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["train", "--output-dir", "out", *flags])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_configs_are_frozen_so_variants_are_replacements():
    recipe = TrainConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        recipe.epochs = 2
    assert dataclasses.replace(recipe, epochs=2).epochs == 2 and recipe.epochs == 1


def test_an_unreadable_value_names_the_flag(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["train", "--output-dir", "out", "--train-size", "lots"])
    assert stop.value.code == 2
    assert "argument --train-size: 'lots' is not a valid train_size" in capsys.readouterr().err
