"""`bertmem train --compile`: torch.compile behind a flag, its compilations counted (chapter 5). On the CPU it
is only tested to run; its speed is a GPU's to measure (benchmarks/recipe_on_gpu.py)."""

import json

import pytest
import torch

from bertmem.cli import main
from bertmem.loop.config import RunConfig
from bertmem.model.compiled import (
    Compilations,
    check_compile_mode,
    compilations_since,
    compile_model,
    short_reason,
)
from tests.cli_helpers import cli_args


def test_reduce_overhead_needs_buckets_and_says_which_flag():
    with pytest.raises(ValueError, match="--pad-to-multiple-of 64"):
        check_compile_mode("reduce-overhead", None)
    check_compile_mode("reduce-overhead", 64)
    check_compile_mode("default", None)
    with pytest.raises(ValueError, match="must be one of"):
        check_compile_mode("max-speed", 64)


def test_compile_runs_only_in_the_plain_loop():
    with pytest.raises(ValueError, match="--backend plain"):
        RunConfig(compile="default", backend="trainer")
    with pytest.raises(ValueError, match="compile must be one of"):
        RunConfig(compile="yes")


class Scaled(torch.nn.Module):
    """A module of this file's own: PyTorch does not compile its own modules' frames (torch.nn is skipped)."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        return 2 * self.linear(x)


def test_a_new_shape_is_counted_as_a_recompilation():
    torch._dynamo.reset()
    layer = Scaled()
    before = compile_model(layer, "default")
    layer(torch.ones(2, 4))
    layer(torch.ones(2, 4))  # the same shape: no new compilation
    assert compilations_since(before) == Compilations(1, 0, (), True)
    layer(torch.ones(3, 4))  # a new batch size: recompiled (with the size made dynamic)
    counted = compilations_since(before)
    assert (counted.compiled, counted.recompilations) == (2, 1) and counted.reasons
    assert counted.line("default").startswith("torch.compile (default): 2 frames compiled, 1 of them a "
                                              "recompilation (the first: tensor 'x' size mismatch")
    assert "\n" not in counted.line("default")
    torch._dynamo.reset()


def test_counts_past_what_pytorch_keeps_are_lower_bounds():
    line = Compilations(64, 10, (), complete=False).line("default")
    assert line.startswith("torch.compile (default): at least 64 frames compiled, at least 10 of them")


def test_a_reason_is_one_line_without_its_stack():
    reason = ("0/0: self.config.problem_type is None      # if self.config.problem_type is None:  # x.py:1 in forward"
              "\nUser stack trace:\n  File \"x.py\", line 1")
    assert short_reason(reason) == "self.config.problem_type is None"


def test_compile_is_in_place_and_keeps_the_weights_names():
    layer = Scaled()
    names = list(layer.state_dict())
    compile_model(layer, "default")
    layer(torch.ones(2, 4))
    assert list(layer.state_dict()) == names  # no "_orig_mod." prefix: checkpoints load as before
    torch._dynamo.reset()


def test_off_compiles_nothing():
    layer = Scaled()
    assert compile_model(layer, "off") == []  # nothing asked of torch._dynamo
    assert layer._compiled_call_impl is None
    compile_model(layer, "default")
    assert layer._compiled_call_impl is not None  # what "off" leaves alone
    torch._dynamo.reset()


@pytest.mark.slow
def test_bertmem_train_compiles_and_prints_what_it_compiled(tmp_path, reviews_csv, capsys):
    torch._dynamo.reset()
    out = tmp_path / "compiled"
    main(cli_args(reviews_csv, out, "--compile", "default", "--max-steps", "3"))
    printed = capsys.readouterr().out
    counted = json.loads((out / "metrics.json").read_text())["compilations"]
    assert counted["compiled"] >= 1 and 0 <= counted["recompilations"] < counted["compiled"]
    assert f"torch.compile (default): {counted['compiled']} frame" in printed
    torch._dynamo.reset()
