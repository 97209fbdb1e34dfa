"""Chapter 9's helpers: windows that round-trip, pooling that ignores window order, a chunked classifier."""

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from bertmem.long_text import (ChunkedClassifier, join_windows, pad_windows, pool_windows, split_windows,
                               window_starts)
from bertmem.models import tiny_classifier

CLS, SEP, PAD = 101, 102, 0


def test_window_starts_cover_the_text_and_end_at_its_last_token():
    assert window_starts(5, 8, 4) == [0]
    assert window_starts(10, 4, 2) == [0, 2, 4, 6]
    assert window_starts(11, 4, 3) == [0, 3, 6, 7]  # the last window moves back to end at token 11
    with pytest.raises(ValueError, match="stride"):
        window_starts(10, 4, 5)


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


def test_one_window_per_document_gives_the_classifiers_own_loss():
    model = tiny_classifier(seed=0, dropout=0.0).eval()
    documents = [[200 + i for i in range(6)], [300 + i for i in range(5)]]
    batch = pad_windows(split_windows(documents, 16, 8, CLS, SEP), PAD)
    labels = torch.tensor([0, 1])
    chunked = ChunkedClassifier(model)(**batch, labels=labels)
    plain = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=labels)
    torch.testing.assert_close(chunked["loss"], plain.loss)
    torch.testing.assert_close(chunked["logits"], plain.logits)


def test_a_long_document_trains_through_every_window():
    model = tiny_classifier(seed=0, dropout=0.0)
    windows = split_windows([[200 + i for i in range(30)]], 10, 4, CLS, SEP)
    batch = pad_windows(windows, PAD)
    assert len(windows.input_ids) == 7  # 28 + 2 content tokens in windows of 8 every 4
    out = ChunkedClassifier(model, pooling="mean")(**batch, labels=torch.tensor([1]))
    out["loss"].backward()
    embeddings = model.get_input_embeddings().weight.grad
    assert out["logits"].shape == (1, 2)
    assert all(embeddings[200 + i].abs().sum() > 0 for i in range(30))  # no token is cut off


def test_the_planner_reads_a_long_document_as_its_windows():
    """A 1,024-token document in windows of 512 is 3 or 4 sequences of 512: the plan counts documents."""
    from bertmem.planner import GIB, PlanRequest, estimate_for, windows_per_document

    request = PlanRequest(model_id="bert-base-uncased", max_length=1024, window=512, memory_bytes=15 * GIB,
                          precision="fp16")
    assert windows_per_document(request) == 4  # 1,022 text tokens, 510 per window, a start every 255
    assert windows_per_document(dataclasses.replace(request, stride=256)) == 3
    one_long = PlanRequest(model_id="bert-base-uncased", max_length=512, memory_bytes=15 * GIB, precision="fp16")
    assert estimate_for(request, 2).step_peak == estimate_for(one_long, 8).step_peak
    assert windows_per_document(PlanRequest(max_length=512, window=512)) == 1
    with pytest.raises(ValueError, match="window must be in"):
        PlanRequest(max_length=512, window=1024)
    with pytest.raises(ValueError, match="stride needs a window"):
        PlanRequest(max_length=512, stride=100)
