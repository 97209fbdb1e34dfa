"""Few shapes for a GPU (chapter 5): bucketed padding, the shapes a run meets counted before it starts, the
attention-kernel rule for the card, and `bertmem train` printing its shapes and utilisation."""

from collections import Counter

import pandas as pd
import pytest
import torch
from transformers import BertConfig, BertForSequenceClassification

from bertmem.core.devices import cudnn_attention, cudnn_attention_first
from bertmem.data.batching import epoch_batches
from bertmem.data.frames import (
    bucket_length,
    epoch_padded_tokens,
    epoch_shapes,
    make_loader,
    tokenize_frame,
)
from bertmem.data.loaders import DataConfig
from bertmem.experiments.cost import batch_work, epoch_work
from bertmem.model.matmuls import matmul_shape
from bertmem.experiments.fit import attention_kernel_rule, bucket_for
from bertmem.loop.config import RunConfig, TrainConfig
from bertmem.model.loading import MINILM_ID, load_tokenizer
from bertmem.profiles import get_profile


@pytest.mark.parametrize("longest, multiple, cap, padded", [
    (300, 64, 512, 320), (500, 64, 512, 512), (510, 96, 512, 512), (64, 64, 512, 64), (13, None, 512, 13),
    (1, 8, 16, 8)])
def test_a_bucket_rounds_up_to_the_multiple_never_past_the_limit(longest, multiple, cap, padded):
    assert bucket_length(longest, multiple, cap) == padded


@pytest.fixture(scope="module")
def reviews():
    """400 texts of 1 to 40 words (more than the sampler's mega-batch of 50 micro-batches of 6, so epochs
    differ), and the tokenizer (MiniLM's, bert-base-uncased's vocabulary)."""
    tokenizer = load_tokenizer(MINILM_ID)
    frame = pd.DataFrame({"text": [" ".join(["word"] * (1 + i % 40)) for i in range(400)],
                          "label": [i % 2 for i in range(400)]})
    return frame, tokenizer


@pytest.mark.parametrize("group_by_length", [True, False])
def test_the_shapes_counted_before_the_run_are_the_loaders(reviews, group_by_length):
    frame, tokenizer = reviews
    encoded = tokenize_frame(frame, tokenizer, 32, "head")
    read = encoded.lengths()
    for multiple in (None, 8):
        loader = make_loader(encoded, tokenizer, 6, shuffle=True, seed=3, group_by_length=group_by_length,
                             pad_to_multiple_of=multiple, max_length=32)
        batches = list(epoch_batches(loader, 1))  # the first epoch as the loop draws it
        counted = epoch_shapes(read, 6, group_by_length, seed=3, multiple=multiple, max_length=32)
        assert counted == Counter(tuple(batch["input_ids"].shape) for batch in batches)
        assert epoch_padded_tokens(read, 6, group_by_length, 3, multiple=multiple, max_length=32) == sum(
            batch["input_ids"].numel() for batch in batches)
        # `bertmem train`'s MFU: the epoch's work from the counted shapes is the batches' own
        shape = matmul_shape(BertForSequenceClassification(BertConfig(num_hidden_layers=2, hidden_size=32,
                                                                      num_attention_heads=2, intermediate_size=64)))
        counted_work = epoch_work(shape, read, counted)
        batch_works = [batch_work(shape, batch["attention_mask"]) for batch in batches]
        assert counted_work.padded_flops == pytest.approx(sum(w.padded_flops for w in batch_works))
        assert counted_work.useful_flops == pytest.approx(sum(w.useful_flops for w in batch_works))
        assert counted_work.padded_tokens == sum(w.padded_tokens for w in batch_works)
    bucketed = epoch_shapes(read, 6, group_by_length, seed=3, multiple=8, max_length=32)
    lengths = {length for _, length in bucketed}
    assert lengths <= {8, 16, 24, 32} and {rows for rows, _ in bucketed} <= {6, 400 % 6}  # one short last batch
    unbucketed = {length for _, length in epoch_shapes(read, 6, group_by_length, seed=3)}
    assert len(lengths) < len(unbucketed) if group_by_length else len(lengths) <= len(unbucketed)


def test_bucketed_padding_changes_no_logit(reviews):
    """More padding under the attention mask: the same logits, so chapter 2's weighted sums stay exact."""
    frame, tokenizer = reviews
    encoded = tokenize_frame(frame.head(6), tokenizer, 32, "head")
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, attn_implementation="eager")
    model = BertForSequenceClassification(config).eval()
    plain, bucketed = (next(iter(make_loader(encoded, tokenizer, 6, pad_to_multiple_of=m, max_length=32)))
                       for m in (None, 16))
    assert bucketed["input_ids"].shape[1] % 16 == 0
    assert bucketed["input_ids"].shape[1] > plain["input_ids"].shape[1]
    with torch.no_grad():
        logits = [model(input_ids=b["input_ids"], attention_mask=b["attention_mask"]).logits
                  for b in (plain, bucketed)]
    torch.testing.assert_close(logits[0], logits[1], atol=1e-5, rtol=1e-5)
    assert torch.equal(plain["labels"], bucketed["labels"])


def test_a_multiple_below_one_is_refused_naming_the_flag():
    with pytest.raises(ValueError, match="--pad-to-multiple-of 64"):
        DataConfig(pad_to_multiple_of=0)


def test_the_gpu_profiles_bucket_and_the_cpu_profile_does_not():
    assert get_profile("gpu").data_config().pad_to_multiple_of == 64
    assert get_profile("full").data_config().pad_to_multiple_of == 64
    assert get_profile("cpu").data_config().pad_to_multiple_of is None
    assert get_profile("gpu", env={"BERTMEM_PAD_TO_MULTIPLE_OF": "none"}).pad_to_multiple_of is None
    # one length already: padding to the limit wins, whatever the profile rounds to
    assert get_profile("gpu").data_config(pad_to_max_length=True).pad_to_max_length


@pytest.mark.parametrize("capability, cudnn, precision, first", [
    ((9, 0), 91600, "bf16", True),     # an H100/H200 with a recent cuDNN
    ((10, 0), 91600, "fp16", True),    # a B200
    ((9, 0), 91500, "bf16", False),    # cuDNN 9.15.0: PyTorch does not put it first
    ((9, 0), 91600, "fp32", False),    # fp32: cuDNN's attention never runs
    ((8, 0), 91600, "bf16", False),    # an A100: flash / memory-efficient come first
    ((7, 5), 91600, "fp16", False),    # a T4 (sm75): cuDNN's attention is not offered at all
    (None, None, "fp32", False),       # a CPU
])
def test_whether_pytorch_would_run_cudnns_attention_first_on_any_card(capability, cudnn, precision, first):
    assert cudnn_attention_first(capability, cudnn, precision) is first


@pytest.mark.parametrize("cudnn_first, lengths, keep", [(True, 24, False), (True, 4, False), (False, 200, True)])
def test_the_attention_kernel_rule(cudnn_first, lengths, keep):
    kept, line = attention_kernel_rule(cudnn_first, lengths)
    assert kept is keep and line.startswith("attention kernels:")
    assert (f"this run meets {lengths} padded lengths" in line) is not keep
    assert bucket_for(512) == 64 and bucket_for(1024) == 128 and bucket_for(100) == 16


def test_the_run_applies_the_rule_for_a_forced_card_and_restores_the_kernel_after(monkeypatch):
    import bertmem.experiments.run as run_module

    monkeypatch.setenv("BERTMEM_CUDA_CAPABILITY", "9.0")
    monkeypatch.setattr(run_module, "cudnn_runtime_version", lambda: 91600)
    model = BertForSequenceClassification(BertConfig(num_hidden_layers=1, hidden_size=32, num_attention_heads=2,
                                                     intermediate_size=64))
    shapes = Counter({(8, n): 1 for n in range(100, 500, 16)})  # 25 lengths
    cuda = torch.device("cuda")
    keep, line = run_module.kernel_choice(RunConfig(attention="sdpa"), TrainConfig(precision="bf16"), model, cuda,
                                          shapes)
    assert not keep and "meets 25 padded lengths" in line
    for choice, kept in (("on", True), ("off", False)):  # the reader's choice wins over the rule
        keep, line = run_module.kernel_choice(RunConfig(attention="sdpa", cudnn_attention=choice),
                                              TrainConfig(precision="bf16"), model, cuda, shapes)
        assert keep is kept and "(--cudnn-attention)" in line
    assert run_module.kernel_choice(RunConfig(attention="eager"), TrainConfig(precision="bf16"), model, cuda,
                                    shapes) == (True, None)
    assert run_module.kernel_choice(RunConfig(attention="sdpa"), TrainConfig(precision="bf16"), model,
                                    torch.device("cpu"), shapes) == (True, None)
    before = torch.backends.cuda.cudnn_sdp_enabled()
    with cudnn_attention(not before):
        assert torch.backends.cuda.cudnn_sdp_enabled() is (not before)
    assert torch.backends.cuda.cudnn_sdp_enabled() is before


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["plain", "trainer"])
def test_train_prints_its_shapes_and_utilisation(tmp_path, capsys, backend):
    from bertmem.experiments.run import run_experiment

    path = tmp_path / "reviews.csv"
    pd.DataFrame({"text": [f"review {i} " + " ".join(["good"] * (1 + i % 20)) for i in range(64)],
                  "label": [i % 2 for i in range(64)]}).to_csv(path, index=False)
    data = DataConfig(dataset=str(path), train_size=32, eval_size=16, max_length=32, micro_batch=8,
                      pad_to_multiple_of=8)
    summary = run_experiment(RunConfig(model_id="tiny-bert", progress=False, backend=backend), data,
                             TrainConfig(epochs=1))
    printed = capsys.readouterr().out
    assert "shapes: " in printed and "lengths rounded up to multiples of 8" in printed
    assert all(int(key.split("×")[1]) % 8 == 0 for key in summary["shapes"])
    used = summary["utilisation"]
    if backend == "trainer":  # the Trainer's epochs carry no training time of their own: no MFU, no crash
        assert used is None and "MFU" not in printed
        return
    assert 0 < used["useful MFU"] <= used["MFU"] < 1 and f"MFU {used['MFU']:.1%}" in printed
    assert "measured here" in used["peak"]
