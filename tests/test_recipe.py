"""Chapter 5's loop: length-grouped batches, checkpoint/resume, out-of-memory back-off, fused AdamW."""

import random

import pytest
import torch

from bertmem.core.faults import interrupt_after, out_of_memory_above
from bertmem.data.batching import LengthGroupedBatchSampler, padding_share
from bertmem.data.frames import EncodedDataset, make_loader
from bertmem.loop.checkpoint import CHECKPOINT_NAME, atomic_save, load_checkpoint
from bertmem.loop.combined import make_optimizer_and_scheduler, train
from bertmem.loop.config import RunConfig, TrainConfig
from bertmem.model.loading import tiny_classifier

QUIET = RunConfig(progress=False)  # no progress bars in tests



@pytest.fixture(scope="module")
def varied_dataset():
    """48 examples of 4..40 tokens, label written into token 1 (learnable)."""
    rng = random.Random(0)
    ids, labels = [], []
    for i in range(48):
        label = i % 2
        body = [rng.randrange(200, 990) for _ in range(rng.randrange(2, 38))]
        ids.append([101, 7 + label] + body + [102])
        labels.append(label)
    return EncodedDataset({"input_ids": ids, "attention_mask": [[1] * len(x) for x in ids]}, labels)


def fresh_model():
    return tiny_classifier(seed=0, dropout=0.1)


def test_length_grouped_sampler_covers_every_example_once_per_epoch(varied_dataset):
    lengths = varied_dataset.lengths()
    sampler = LengthGroupedBatchSampler(lengths, batch_size=5, seed=3, group_size=4)
    first = sampler.batches()
    assert sorted(i for b in first for i in b) == list(range(48)) and len(first) == len(sampler) == 10
    assert first == sampler.batches()  # same (seed, epoch): same order
    sampler.set_epoch(1)
    assert sampler.batches() != first
    grouped = padding_share(lengths, first)
    plain = padding_share(lengths, [list(range(i, min(i + 5, 48))) for i in range(0, 48, 5)])
    assert grouped < 0.6 * plain
    assert padding_share(lengths, first, pad_to=64) > plain


def test_length_grouped_sampler_rejects_bad_arguments():
    with pytest.raises(ValueError, match="batch_size"):
        LengthGroupedBatchSampler([3, 4], batch_size=0)
    with pytest.raises(ValueError, match="empty"):
        LengthGroupedBatchSampler([], batch_size=2)


def test_make_loader_groups_lengths_or_pads_to_max(varied_dataset, tokenizer):
    grouped = make_loader(varied_dataset, tokenizer, 8, shuffle=True, group_by_length=True)
    widths = [b["input_ids"].shape[1] for b in grouped]
    assert sum(len(b["labels"]) for b in grouped) == 48 and max(widths) > min(widths)
    padded = make_loader(varied_dataset, tokenizer, 8, pad_to_max_length=64)
    assert {b["input_ids"].shape[1] for b in padded} == {64}


@pytest.mark.parametrize("group_by_length", [False, True])
def test_resume_after_interrupt_gives_identical_weights(tmp_path, varied_dataset, tokenizer, group_by_length):
    def loader():
        return make_loader(varied_dataset, tokenizer, 4, shuffle=True, seed=1, group_by_length=group_by_length)

    config = TrainConfig(epochs=2, learning_rate=1e-3, accumulation_steps=2, seed=5)
    reference = fresh_model()
    expected = train(reference, loader(), config, run=QUIET)

    folder = str(tmp_path / "run")
    model = interrupt_after(fresh_model(), 12 + 7)  # Ctrl-C in the middle of a window of epoch 2
    with pytest.raises(KeyboardInterrupt, match="saved a checkpoint at optimizer step 9"):
        train(model, loader(), config, run=RunConfig(progress=False, output_dir=folder, checkpoint_every=4))
    saved = load_checkpoint(folder)
    assert saved["position"] == {**saved["position"], "epoch": 2, "micro_batches": 6, "step": 9}

    resumed_model = fresh_model()
    resumed = train(resumed_model, loader(), config, run=RunConfig(progress=False, output_dir=folder, resume=True))
    assert resumed.losses == expected.losses
    for (name, a), b in zip(reference.state_dict().items(), resumed_model.state_dict().values()):
        assert torch.equal(a, b), name


def test_resume_needs_a_checkpoint(tmp_path, tiny_batches):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        train(fresh_model(), tiny_batches, TrainConfig(),
              run=RunConfig(output_dir=str(tmp_path), resume=True, progress=False))
    for asked in (dict(resume=True), dict(checkpoint_every=5), dict(save_model=True)):
        with pytest.raises(ValueError, match=f"{next(iter(asked))} needs output_dir"):
            RunConfig(**asked)
    with pytest.raises(ValueError, match="checkpoint_every"):
        RunConfig(output_dir="x", checkpoint_every=0)
    assert RunConfig(output_dir="x").checkpoint_dir is None  # an output folder alone keeps no checkpoints
    assert RunConfig(output_dir="x", checkpoint_every=3).checkpoint_dir == "x"


def test_atomic_save_keeps_the_old_file_when_writing_fails(tmp_path):
    path = tmp_path / CHECKPOINT_NAME
    atomic_save({"v": 1}, path)

    class Unpicklable:
        def __reduce__(self):
            raise RuntimeError("cannot pickle")

    with pytest.raises(RuntimeError, match="cannot pickle"):
        atomic_save({"v": Unpicklable()}, path)
    assert torch.load(path)["v"] == 1
    assert [p.name for p in tmp_path.iterdir()] == [CHECKPOINT_NAME]


def test_oom_backoff_halves_micro_batch_and_keeps_the_gradient(tiny_batches):
    config = dict(epochs=1, learning_rate=1e-3, max_grad_norm=None)
    with pytest.raises(torch.OutOfMemoryError):
        train(out_of_memory_above(fresh_model(), 2), tiny_batches, TrainConfig(**config), run=QUIET)
    with pytest.warns(UserWarning, match="effective batch unchanged: 8"):
        backed = train(out_of_memory_above(fresh_model(), 2), tiny_batches, TrainConfig(**config, oom_backoff=True),
                       run=QUIET)
    assert backed.backoffs == [{"step": 1, "splits": 4}]  # 8 -> 4 -> 2 examples per micro-batch
    halves = [{k: v[i:i + 2] for k, v in b.items()} for b in tiny_batches for i in range(0, 8, 2)]
    reference = train(fresh_model(), halves, TrainConfig(**config, accumulation_steps=4), run=QUIET)
    assert backed.losses == pytest.approx(reference.losses, rel=1e-4)


def test_oom_backoff_gives_up_at_one_example(tiny_batches):
    with pytest.raises(RuntimeError, match="one example"):
        train(out_of_memory_above(fresh_model(), 0), tiny_batches, TrainConfig(oom_backoff=True), run=QUIET)


def test_fused_adamw_where_supported_and_gradient_checkpointing(tiny_batches):
    model = fresh_model()
    optimizer, _ = make_optimizer_and_scheduler(model, TrainConfig(), 10)
    assert optimizer.defaults["fused"] is True
    optimizer, _ = make_optimizer_and_scheduler(model, TrainConfig(fused_optimizer=False), 10)
    assert not optimizer.defaults["fused"]
    plain = train(fresh_model(), tiny_batches, TrainConfig(learning_rate=1e-3), run=QUIET)
    checkpointed_model = fresh_model()
    checkpointed = train(checkpointed_model, tiny_batches,
                         TrainConfig(learning_rate=1e-3, gradient_checkpointing=True), run=QUIET)
    from bertmem.model.loading import checkpointing_enabled

    assert checkpointing_enabled(checkpointed_model) and not checkpointing_enabled(fresh_model())
    assert checkpointed.losses == pytest.approx(plain.losses, rel=1e-5)


def test_fault_injection_helpers_check_their_arguments():
    with pytest.raises(ValueError, match="calls"):
        interrupt_after(fresh_model(), 0)
    with pytest.raises(ValueError, match="max_examples"):
        out_of_memory_above(fresh_model(), -1)


class _ReadsToken1(torch.nn.Module):
    """A stand-in classifier: predicts the label written into token 1, wrong on every third example."""

    def __init__(self):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(()))

    def forward(self, input_ids, attention_mask, labels):
        guess = (input_ids[:, 1] - 7).clamp(0, 1)
        guess = torch.where(input_ids[:, 2] % 3 == 0, 1 - guess, guess)
        logits = torch.nn.functional.one_hot(guess, 2).float() + self.bias
        loss = torch.nn.functional.cross_entropy(logits, labels)
        return type("Out", (), {"logits": logits, "loss": loss})()


def test_predictions_come_back_in_the_test_sets_order_however_it_is_batched(varied_dataset, tokenizer):
    from bertmem.loop.baseline import TrainResult, evaluate_into, predict

    model = _ReadsToken1()
    expected = [int(ids[2] % 3 != 0) for ids in varied_dataset.encodings["input_ids"]]
    for batch_size, grouped in [(5, True), (7, True), (4, False)]:
        loader = make_loader(varied_dataset, tokenizer, batch_size, group_by_length=grouped)
        predictions = predict(model, loader)
        assert predictions.labels.tolist() == varied_dataset.labels  # the dataset's order, not the loader's
        result = TrainResult()
        metrics = evaluate_into(result, model, loader)
        assert result.correct == expected and metrics["accuracy"] == pytest.approx(sum(expected) / 48)
