"""`--deterministic` (chapter 5b): the flag, the process setting it makes in every backend, old checkpoints, the CPU.

On a GPU the switch asks PyTorch for deterministic kernels so that a resumed run can match an uninterrupted one to
the bit; that part needs a GPU and is not tested here. On the CPU it must change no number.
"""

import os

import pytest
import torch
from torch.utils.data import DataLoader

from bertmem.cli import build_parser, subcommands
from bertmem.core.devices import CUBLAS_WORKSPACE_ENV, DETERMINISTIC_CUBLAS, use_deterministic_algorithms
from bertmem.core.flags import config_from_flags
from bertmem.core.faults import interrupt_after
from bertmem.loop.accelerate_loop import train_with_accelerate
from bertmem.loop.checkpoint import CHECKPOINT_NAME, atomic_save, load_checkpoint
from bertmem.loop.combined import train
from bertmem.loop.config import RunConfig, TrainConfig
from bertmem.loop.hf_trainer import train_with_trainer
from bertmem.model.loading import tiny_classifier
from bertmem.profiles import get_profile

QUIET = RunConfig(progress=False)
RECIPE = dict(epochs=2, learning_rate=1e-3, accumulation_steps=2, fused_optimizer=False)


@pytest.fixture(autouse=True)
def process_as_found(monkeypatch):
    """Each test starts with deterministic algorithms off and $CUBLAS_WORKSPACE_CONFIG unset, and leaves them so."""
    monkeypatch.delenv(CUBLAS_WORKSPACE_ENV, raising=False)
    torch.use_deterministic_algorithms(False)
    yield
    use_deterministic_algorithms(False)  # gives back what a switched-on run remembered
    torch.use_deterministic_algorithms(False)
    os.environ.pop(CUBLAS_WORKSPACE_ENV, None)


def rows(n: int = 16) -> list[dict]:
    """`n` reviews of 12 random tokens, the label written into token 1 (learnable)."""
    g = torch.Generator().manual_seed(0)
    found = []
    for _ in range(n):
        ids = torch.randint(5, 1000, (12,), generator=g)
        label = int(torch.randint(0, 2, (1,), generator=g))
        ids[1] = 7 + label
        found.append({"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.tensor(label)})
    return found


def loader(shuffle: bool = False) -> DataLoader:
    generator = torch.Generator().manual_seed(1) if shuffle else None
    return DataLoader(rows(), batch_size=4, shuffle=shuffle, generator=generator)


def watched(model: torch.nn.Module, seen: list) -> torch.nn.Module:
    """The model, noting at every forward pass whether deterministic algorithms are on and the cuBLAS setting."""
    model.register_forward_pre_hook(
        lambda module, args: seen.append((torch.are_deterministic_algorithms_enabled(),
                                          os.environ.get(CUBLAS_WORKSPACE_ENV))))
    return model


def test_the_flag_reaches_the_recipe():
    train_parser = subcommands(build_parser())["train"]
    base = ["--dataset", get_profile().dataset, "--output-dir", "out"]
    assert config_from_flags(TrainConfig, train_parser.parse_args(base)).deterministic is False
    assert config_from_flags(TrainConfig, train_parser.parse_args([*base, "--deterministic"])).deterministic is True
    assert config_from_flags(TrainConfig, train_parser.parse_args([*base, "--no-deterministic"])).deterministic is False
    assert "may cost GPU speed (not measured" in " ".join(train_parser.format_help().split())  # the cost is said


BACKENDS = {
    "plain": lambda model, config: train(model, loader(), config, run=QUIET),
    "accelerate": lambda model, config: train_with_accelerate(model, loader(), config, run=QUIET),
    "trainer": lambda model, config: train_with_trainer(model, loader(), config, run=QUIET),
}


@pytest.mark.parametrize("backend", sorted(BACKENDS))
def test_each_backend_trains_under_deterministic_algorithms_and_the_next_run_gives_them_back(backend):
    """On: every forward pass runs with them and the cuBLAS setting. The setting holds after the run, like the seed
    (chapter 5 shows `train` whole, so no block wraps it); a run without the switch puts back what was there."""
    run, config = BACKENDS[backend], TrainConfig(**RECIPE, max_steps=2)
    on, off = [], []
    run(watched(tiny_classifier(seed=0), on), TrainConfig(**RECIPE, max_steps=2, deterministic=True))
    assert on and set(on) == {(True, DETERMINISTIC_CUBLAS)}
    assert torch.are_deterministic_algorithms_enabled()  # held until the next run sets it anew
    run(watched(tiny_classifier(seed=0), off), config)
    assert off and set(off) == {(False, None)}
    assert not torch.are_deterministic_algorithms_enabled() and CUBLAS_WORKSPACE_ENV not in os.environ


def test_a_readers_own_setting_is_kept_and_given_back():
    torch.use_deterministic_algorithms(True, warn_only=True)
    os.environ[CUBLAS_WORKSPACE_ENV] = ":16:8"
    use_deterministic_algorithms(False)  # a run without the switch changes nothing it did not set
    assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
    use_deterministic_algorithms(True)  # strict: warn-only keeps the fast GPU kernels
    assert torch.are_deterministic_algorithms_enabled() and not torch.is_deterministic_algorithms_warn_only_enabled()
    assert os.environ[CUBLAS_WORKSPACE_ENV] == ":16:8"  # the reader's value stays
    use_deterministic_algorithms(True)  # a second run with it remembers nothing new
    use_deterministic_algorithms(False)
    assert torch.are_deterministic_algorithms_enabled() and torch.is_deterministic_algorithms_warn_only_enabled()
    assert os.environ[CUBLAS_WORKSPACE_ENV] == ":16:8"


def test_a_cpu_run_gives_the_same_losses_and_weights_with_and_without_the_switch():
    """Dropout on, shuffled data: the switch changes which kernels may run, never the CPU's numbers."""
    seen = []
    fast_model, exact_model = tiny_classifier(seed=0), watched(tiny_classifier(seed=0), seen)
    fast = train(fast_model, loader(shuffle=True), TrainConfig(**RECIPE), run=QUIET)
    exact = train(exact_model, loader(shuffle=True), TrainConfig(**RECIPE, deterministic=True), run=QUIET)
    assert {on for on, _ in seen} == {True}  # it did run under deterministic algorithms
    assert len(fast.losses) == 4 and exact.losses == fast.losses
    for (name, a), b in zip(fast_model.state_dict().items(), exact_model.state_dict().values()):
        assert torch.equal(a, b), name


def test_a_checkpoint_written_before_the_setting_existed_resumes_to_the_uninterrupted_weights(tmp_path):
    """A checkpoint of an older bertmem has no `deterministic` in its settings: it resumes (the setting may change on
    resume, like the device: it moves neither the data, the steps nor the schedule)."""
    config = TrainConfig(**RECIPE)
    reference = tiny_classifier(seed=0)
    expected = train(reference, loader(shuffle=True), config, run=QUIET)
    folder = str(tmp_path / "run")
    with pytest.raises(KeyboardInterrupt):
        train(interrupt_after(tiny_classifier(seed=0), 7), loader(shuffle=True), config,  # epoch 2, mid-window
              run=RunConfig(progress=False, output_dir=folder, checkpoint_every=100))
    state = load_checkpoint(folder)
    assert state["position"]["step"] == 3 and state["settings"]["deterministic"] is False
    del state["settings"]["deterministic"]  # as written before the setting existed
    atomic_save(state, tmp_path / "run" / CHECKPOINT_NAME)
    resumed_model = tiny_classifier(seed=0)
    resumed = train(resumed_model, loader(shuffle=True), config,
                    run=RunConfig(progress=False, output_dir=folder, resume=True))
    assert resumed.losses == expected.losses
    for (name, a), b in zip(reference.state_dict().items(), resumed_model.state_dict().values()):
        assert torch.equal(a, b), name
