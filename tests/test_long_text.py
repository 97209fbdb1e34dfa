"""Chapter 9's helpers: windows that round-trip, pooling that ignores window order, a chunked classifier,
attention pooling and its scorer."""

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bertmem.data.windows import join_windows, pad_windows, split_windows, window_count, window_starts
from bertmem.model.chunked import ChunkedClassifier, fit_scorer, pool_windows, pooled_correct, read_windows
from bertmem.model.loading import tiny_classifier

CLS, SEP, PAD = 101, 102, 0


def test_window_starts_cover_the_text_and_end_at_its_last_token():
    assert window_starts(5, 8, 4) == [0]
    assert window_starts(10, 4, 2) == [0, 2, 4, 6]
    assert window_starts(11, 4, 3) == [0, 3, 6, 7]  # the last window moves back to end at token 11
    with pytest.raises(ValueError, match="stride"):
        window_starts(10, 4, 5)


def test_window_count_is_the_windows_split_windows_makes():
    for length, window, stride in ((1024, 512, 384), (512, 512, 384), (3, 8, 4), (100, 10, 3)):
        windows = split_windows([list(range(length - 2)) or [0]], window, stride, CLS, SEP)
        assert window_count(length, window, stride) == len(windows.input_ids)
    assert window_count(1024, 512, 384) == 3 and window_count(1024, 512, 128) == 5


@settings(max_examples=60, deadline=None)
@given(documents=st.lists(st.lists(st.integers(1000, 1100), min_size=1, max_size=40), min_size=1, max_size=5),
       window=st.integers(3, 12), stride_share=st.floats(0.01, 1.0))
def test_windows_round_trip_every_token(documents, window, stride_share):
    stride = max(1, round(stride_share * (window - 2)))
    windows = split_windows(documents, window, stride, CLS, SEP)
    assert join_windows(windows, len(documents)) == documents
    assert all(ids[0] == CLS and ids[-1] == SEP and len(ids) <= window for ids in windows.input_ids)
    assert sorted(set(windows.document)) == list(range(len(documents)))


def test_an_empty_document_is_refused_with_its_index():
    with pytest.raises(ValueError, match="document 1 has no tokens"):
        split_windows([[5], []], 8, 4, CLS, SEP)


def test_pooling_is_per_document_and_ignores_window_order():
    logits = torch.tensor([[1.0, 0.0], [3.0, 2.0], [0.0, 5.0], [-1.0, 1.0]])
    document = torch.tensor([0, 0, 1, 1])
    mean = pool_windows(logits, document, 2, "mean")
    assert torch.equal(mean, torch.tensor([[2.0, 1.0], [-0.5, 3.0]]))
    assert torch.equal(pool_windows(logits, document, 2, "max"), torch.tensor([[3.0, 2.0], [0.0, 5.0]]))
    order = torch.tensor([3, 1, 0, 2])
    assert torch.equal(pool_windows(logits[order], document[order], 2, "mean"), mean)
    with pytest.raises(ValueError, match="pooling"):
        pool_windows(logits, document, 2, "median")


def test_attention_pooling_weighs_windows_by_a_softmax_of_their_scores_per_document():
    logits = torch.tensor([[1.0, 0.0], [3.0, 2.0], [0.0, 5.0], [-1.0, 1.0], [4.0, 4.0]])
    document = torch.tensor([0, 0, 1, 1, 2])
    same = pool_windows(logits, document, 3, "attention", torch.full((5,), 7.0))
    torch.testing.assert_close(same, pool_windows(logits, document, 3, "mean"))  # equal scores: the mean
    sharp = pool_windows(logits, document, 3, "attention", torch.tensor([0.0, 50.0, 50.0, 0.0, -3.0]))
    torch.testing.assert_close(sharp, torch.tensor([[3.0, 2.0], [0.0, 5.0], [4.0, 4.0]]))  # the top window
    scores = torch.tensor([0.3, -1.0, 2.0, 0.5, 1.0])
    weights = torch.softmax(torch.tensor([2.0, 0.5]), 0)  # document 1's windows only
    torch.testing.assert_close(pool_windows(logits, document, 3, "attention", scores)[1],
                               weights[0] * logits[2] + weights[1] * logits[3])
    order = torch.tensor([4, 3, 1, 0, 2])
    torch.testing.assert_close(pool_windows(logits[order], document[order], 3, "attention", scores[order]),
                               pool_windows(logits, document, 3, "attention", scores))
    huge = pool_windows(logits, document, 3, "attention", torch.tensor([1e4, 0.0, 0.0, 0.0, 0.0]))
    assert torch.isfinite(huge).all()  # the top score is shifted to 0 before exp
    with pytest.raises(ValueError, match="takes scores"):
        pool_windows(logits, document, 3, "attention")
    with pytest.raises(ValueError, match="takes scores"):
        pool_windows(logits, document, 3, "mean", scores)


def test_attention_pooled_classifier_starts_as_the_mean_and_trains_its_scorer():
    model = tiny_classifier(seed=0, dropout=0.0)
    batch = pad_windows(split_windows([[200 + i for i in range(30)], [300 + i for i in range(9)]], 10, 4, CLS, SEP),
                        PAD)
    labels = torch.tensor([1, 0])
    attention = ChunkedClassifier(model, pooling="attention")
    out = attention(**batch, labels=labels)
    torch.testing.assert_close(out.logits, ChunkedClassifier(model, "mean")(**batch).logits)
    out.loss.backward()
    assert attention.scorer.weight.grad.abs().sum() > 0  # the scores reach the loss
    assert model.get_input_embeddings().weight.grad[200].abs().sum() > 0  # and so does the encoder


def test_one_window_per_document_gives_the_classifiers_own_loss():
    model = tiny_classifier(seed=0, dropout=0.0).eval()
    documents = [[200 + i for i in range(6)], [300 + i for i in range(5)]]
    batch = pad_windows(split_windows(documents, 16, 8, CLS, SEP), PAD)
    labels = torch.tensor([0, 1])
    chunked = ChunkedClassifier(model)(**batch, labels=labels)
    plain = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels)
    torch.testing.assert_close(chunked.loss, plain.loss)
    torch.testing.assert_close(chunked.logits, plain.logits)


def test_a_long_document_trains_through_every_window():
    model = tiny_classifier(seed=0, dropout=0.0)
    windows = split_windows([[200 + i for i in range(30)]], 10, 4, CLS, SEP)
    batch = pad_windows(windows, PAD)
    assert len(windows.input_ids) == 7  # 28 + 2 content tokens in windows of 8 every 4
    out = ChunkedClassifier(model, pooling="mean")(**batch, labels=torch.tensor([1]))
    out.loss.backward()
    embeddings = model.get_input_embeddings().weight.grad
    assert out.logits.shape == (1, 2)
    assert all(embeddings[200 + i].abs().sum() > 0 for i in range(30))  # no token is cut off


def test_a_chunked_classifier_checkpoints_its_encoder_and_refuses_levers_it_cannot_place():
    from bertmem.loop.combined import prepare_trainable
    from bertmem.loop.config import TrainConfig
    from bertmem.model.loading import checkpointing_enabled, enable_gradient_checkpointing

    model = tiny_classifier(seed=0, dropout=0.0)
    chunked = ChunkedClassifier(model, pooling="attention")
    enable_gradient_checkpointing(chunked)
    assert checkpointing_enabled(model)
    batch = pad_windows(split_windows([[200 + i for i in range(30)]], 10, 4, CLS, SEP), PAD)
    chunked(**batch, labels=torch.tensor([1])).loss.backward()
    assert chunked.scorer.weight.grad is not None
    prepare_trainable(chunked, TrainConfig())  # nothing asked: nothing to refuse
    for lever in (dict(lora_r=8), dict(freeze_layers=1), dict(layerwise_decay=0.9)):
        with pytest.raises(ValueError, match=f"{next(iter(lever))} need a transformers classifier"):
            prepare_trainable(chunked, TrainConfig(**lever))
    assert checkpointing_enabled(chunked)  # seen through the wrapper, as the memory measurement asks


def test_bertmem_train_refuses_window_with_encoder_levers_before_loading_anything(tmp_path, capsys):
    from bertmem.cli import main

    out = tmp_path / "run"
    with pytest.raises(SystemExit) as stop:
        main(["train", "--model", "tiny-bert", "--dataset", str(tmp_path / "missing.csv"), "--window", "16",
              "--max-length", "64", "--lora-r", "4", "--output-dir", str(out)])
    assert stop.value.code == 2 and not out.exists()  # refused before the (missing) data or the folder
    assert "lora_r cannot find its encoder" in capsys.readouterr().err


def test_the_planner_reads_a_long_document_as_its_windows():
    """A 1,024-token document in windows of 512 is 3 sequences of 512 (5 every 128 tokens): plans count documents."""
    from bertmem.core.units import GIB
    from bertmem.memory.planner import PlanRequest, estimate_for, windows_per_document

    request = PlanRequest(model_id="bert-base-uncased", max_length=1024, window=512, memory_bytes=15 * GIB,
                          precision="fp16")
    assert windows_per_document(request) == 3  # 1,022 text tokens, 510 per window, a start every 384
    assert windows_per_document(dataclasses.replace(request, stride=128)) == 5
    one_long = PlanRequest(model_id="bert-base-uncased", max_length=512, memory_bytes=15 * GIB, precision="fp16")
    assert estimate_for(request, 2).step_peak == estimate_for(one_long, 6).step_peak
    assert windows_per_document(PlanRequest(max_length=512, window=512)) == 1
    with pytest.raises(ValueError, match="window must be in"):
        PlanRequest(max_length=512, window=1024)
    with pytest.raises(ValueError, match="stride needs a window"):
        PlanRequest(max_length=512, stride=100)


def test_window_loader_reads_every_review_whole_or_up_to_max_tokens():
    import pandas as pd

    from bertmem.data.frames import content_tokens
    from bertmem.data.windows import window_loader
    from bertmem.model.loading import MINILM_ID, load_tokenizer

    tokenizer = load_tokenizer(MINILM_ID)
    texts = [" ".join(f"w{i}" for i in range(n)) for n in (3, 40, 90)]
    frame = pd.DataFrame({"text": texts, "label": [0, 1, 1]})
    batches = list(window_loader(frame, tokenizer, window=16, stride=7, documents_per_batch=2))
    assert [b["labels"].tolist() for b in batches] == [[0, 1], [1]]  # one label per review, not per window
    tokens = content_tokens(texts, tokenizer)
    for batch, first in zip(batches, (0, 2)):
        rows = [[int(t) for t, keep in zip(ids, mask) if keep] for ids, mask in
                zip(batch["input_ids"], batch["attention_mask"])]
        windows = split_windows(tokens[first:first + 2], 16, 7, tokenizer.cls_token_id, tokenizer.sep_token_id)
        assert rows == windows.input_ids and batch["document"].tolist() == windows.document
    capped = next(iter(window_loader(frame, tokenizer, window=16, stride=7, documents_per_batch=3, max_tokens=20)))
    assert int((capped["document"] == 2).sum()) == len(window_starts(20, 14, 7))
    shuffled = [b["labels"].tolist() for b in window_loader(frame, tokenizer, 16, 7, 1, shuffle=True, seed=3)]
    again = [b["labels"].tolist() for b in window_loader(frame, tokenizer, 16, 7, 1, shuffle=True, seed=3)]
    assert shuffled == again and sorted(sum(shuffled, [])) == [0, 1, 1]  # a seeded order, every review once
    with pytest.raises(ValueError, match="stride must be in"):
        window_loader(frame, tokenizer, window=16, stride=15, documents_per_batch=2)


def test_long_subset_keeps_only_reviews_longer_than_the_limit_balanced_per_label():
    import pandas as pd

    from bertmem.data.windows import long_subset
    from bertmem.model.loading import MINILM_ID, load_tokenizer

    tokenizer = load_tokenizer(MINILM_ID)
    texts = [" ".join(["good"] * n) for n in (5, 50, 6, 60, 70, 80)]
    frame = pd.DataFrame({"text": texts, "label": [0, 0, 1, 1, 0, 1]})
    picked = long_subset(frame, tokenizer, longer_than=10, size=4)
    assert sorted(picked["text"].str.count("good")) == [50, 60, 70, 80]
    assert picked["label"].value_counts().to_dict() == {0: 2, 1: 2}
    known = [n + 2 for n in (5, 50, 6, 60, 70, 80)]  # "good" is one token; + [CLS], [SEP]
    assert long_subset(frame, tokenizer, longer_than=10, size=4, lengths=known).equals(picked)
    with pytest.raises(ValueError, match="only 2 of 6 texts are longer than 65 tokens"):
        long_subset(frame, tokenizer, longer_than=65, size=4)
    with pytest.raises(ValueError, match="label 0 has only 1"):
        long_subset(frame, tokenizer, longer_than=55, size=3)  # three long reviews, one of them negative


def test_read_windows_scores_each_review_once_from_its_pooled_windows():
    model = tiny_classifier(seed=0, dropout=0.0)
    documents = [[200 + i for i in range(30)], [300 + i for i in range(5)], [400 + i for i in range(12)]]
    windows = split_windows(documents, 12, 5, CLS, SEP)
    batch = pad_windows(windows, PAD)
    labels = torch.tensor([1, 0, 1])
    whole = {**batch, "labels": labels}
    first = {**pad_windows(split_windows(documents[:2], 12, 5, CLS, SEP), PAD), "labels": labels[:2]}
    second = {**pad_windows(split_windows(documents[2:], 12, 5, CLS, SEP), PAD), "labels": labels[2:]}
    reading = read_windows(model, [first, second])  # two batches: documents numbered across them
    assert reading.document.tolist() == windows.document and torch.equal(reading.labels, labels)
    torch.testing.assert_close(reading.logits, read_windows(model, [whole]).logits)
    assert reading.vectors.shape == (len(windows.input_ids), model.config.hidden_size)
    for how in ("mean", "max"):
        pooled = ChunkedClassifier(model, how).eval()(**batch).logits
        assert pooled_correct(reading, how) == (pooled.argmax(-1) == labels).int().tolist()
    batch["labels"] = labels
    assert ChunkedClassifier(model)(**batch).loss.ndim == 0  # `.loss`, as a plain classifier's output has


def test_a_fitted_scorer_learns_to_trust_the_window_that_knows_the_label():
    """Each document has one window whose logits say its label and noise windows; the scorer finds the first kind
    from a feature only those windows carry, and attention then beats the mean."""
    from bertmem.model.chunked import WindowReading

    generator = torch.Generator().manual_seed(0)
    documents, per_document = 64, 4
    labels = torch.randint(0, 2, (documents,), generator=generator)
    logits = 3 * torch.randn(documents * per_document, 2, generator=generator)
    vectors = torch.randn(documents * per_document, 8, generator=generator)
    informative = torch.arange(documents) * per_document  # the first window of each document
    logits[informative] = 4 * torch.nn.functional.one_hot(labels, 2).float() - 2
    vectors[informative, 0] += 3.0  # what marks it
    reading = WindowReading(logits, vectors, torch.arange(documents).repeat_interleave(per_document), labels)
    scorer = fit_scorer(reading, steps=200, lr=5e-2)
    assert scorer.weight[0, 0] > scorer.weight[0, 1:].abs().max()
    assert sum(pooled_correct(reading, "attention", scorer)) > sum(pooled_correct(reading, "mean")) + 5
    untrained = fit_scorer(reading, steps=0)
    assert pooled_correct(reading, "attention", untrained) == pooled_correct(reading, "mean")


def test_bertmem_train_reads_windows_end_to_end_and_saves_a_plain_classifier(tmp_path, reviews_csv):
    import json

    from cli_helpers import cli_args
    from transformers import AutoModelForSequenceClassification

    from bertmem.cli import main

    out = tmp_path / "run"
    args = cli_args(reviews_csv, out, "--window", "16", "--stride", "10", "--save-model")
    args[args.index("--max-length") + 1] = "64"  # up to 64 tokens of each review, in windows of 16
    assert main(args) == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["eval_examples"] == 24 and 0.0 <= metrics["final"]["accuracy"] <= 1.0
    config = json.loads((out / "config.json").read_text())["data"]
    assert (config["window"], config["stride"]) == (16, 10)
    saved = AutoModelForSequenceClassification.from_pretrained(out / "model")  # no pooling wrapper saved
    assert saved.config.num_labels == 2


def test_a_window_needs_room_and_a_stride_needs_a_window():
    from bertmem.data.loaders import DataConfig

    with pytest.raises(ValueError, match="raise --max-length"):
        DataConfig(max_length=64, window=128)
    with pytest.raises(ValueError, match="stride needs a window"):
        DataConfig(stride=8)
    assert DataConfig(max_length=512, window=128).window_stride() == 96


@pytest.mark.slow
def test_long_input_estimates_order_the_readings_as_the_chapter_says():
    from bertmem.memory.long_inputs import long_input_estimates

    rows = {row["reading"]: row for row in long_input_estimates((512, 2048), window=512, stride=384)}
    eager, fused = rows["one sequence, eager attention"], rows["one sequence, SDPA"]
    checkpointed = rows["one sequence, SDPA + checkpointing"]
    windows = rows["windows of 512 every 384 tokens, SDPA"]
    assert eager[2048] > fused[2048] > checkpointed[2048]  # the n² scores, then the saved activations
    assert windows[512] == pytest.approx(fused[512])  # one window is the sequence itself
    assert eager[2048] - eager[512] > 2 * (windows[2048] - windows[512])  # quadratic against linear growth
    assert list(rows)[4:] == ["ModernBERT-base", "Longformer-base", "BigBird-RoBERTa-base, fp32"]
    assert all(row[n] > 0 for row in rows.values() for n in (512, 2048))
    alone = long_input_estimates((512,), window=512, stride=384, workers=1)  # one process: the same numbers
    assert [row[512] for row in alone] == [row[512] for row in rows.values()]


@pytest.mark.slow
def test_longformers_estimate_with_a_global_cls_is_a_real_step_on_this_cpu():
    """FakeTensorMode cannot ask the data which tokens attend globally; the estimate answers [CLS], as the
    classifier sets it, and then agrees with a real step byte for byte (this machine's kernels)."""
    from transformers import AutoModelForSequenceClassification, LongformerConfig

    from bertmem.memory.estimate import estimate_step_memory
    from bertmem.memory.measure import measure_step_memory

    config = LongformerConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                              attention_window=32, max_position_embeddings=260, vocab_size=1000, num_labels=2)
    from transformers.models.longformer.modeling_longformer import LongformerSelfAttention

    item, indices = torch.Tensor.item, LongformerSelfAttention.__dict__["_get_global_attn_indices"]
    estimated = estimate_step_memory(config, 2, 256, precision="fp32", attention="eager", device="cpu")
    assert torch.Tensor.item is item  # the answers are given only inside the estimate
    assert LongformerSelfAttention.__dict__["_get_global_attn_indices"] is indices
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_config(config, attn_implementation="eager").train()
    ids = torch.randint(5, 1000, (2, 256))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": torch.tensor([0, 1])}
    real = measure_step_memory(model, batch, torch.optim.AdamW(model.parameters(), foreach=False))
    assert estimated.step_peak == pytest.approx(real.step_peak, rel=1e-3)


@pytest.mark.slow
def test_bigbirds_fp16_step_does_not_trace_as_the_chapter_says():
    """BigBird's fp16 step scatters mixed dtypes under FakeTensorMode; the chapter estimates it in fp32."""
    from transformers import BigBirdConfig

    from bertmem.memory.estimate import estimate_step_memory

    with pytest.raises(RuntimeError, match="scatter"):
        estimate_step_memory(BigBirdConfig(), 1, 1024, precision="fp16", attention="eager")
