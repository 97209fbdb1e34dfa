"""Model FLOPs and utilisation (`bertmem.experiments.cost`): the matmul count against PyTorch's own FLOP
counter, padded against useful work, and the recorded benches' MFU rebuilt from their batches (chapter 5, A3)."""


import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import BertConfig, BertForSequenceClassification

from bertmem.book.gpu_measured import (
    first_meeting_excess,
    pass_noise,
    recipe_peak_against_planner,
    recipe_work,
    recorded_gpu_run,
)
from bertmem.book.bench_info import recorded_bench
from bertmem.experiments.bench import BenchConfig, variant_shape
from bertmem.experiments.cost import BatchWork, batch_work, model_flops_utilisation, peak_method
from bertmem.memory.estimate import model_config, parameter_count
from bertmem.memory.speed import ModelWork
from bertmem.model.matmuls import matmul_shape, non_embedding_parameters

TINY = dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128, vocab_size=500,
            num_labels=3)


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_the_matmul_count_is_what_pytorchs_flop_counter_counts_in_a_training_step(attention):
    """Forward and backward of a classifier: every mm, addmm and bmm (or SDPA) PyTorch counts, and no more."""
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(**TINY, attn_implementation=attention)).train()
    ids, mask = torch.randint(5, 500, (3, 16)), torch.ones(3, 16, dtype=torch.long)
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 1, 2])).loss.backward()
    assert batch_work(matmul_shape(model), mask).padded_flops == counter.get_total_flops()


def test_the_count_covers_modernbert_where_it_runs_padded_batches():
    """ModernBERT's GLU and alternating local/global attention (a masked window, full products) in transformers 5:
    the count is what PyTorch counts; with FlashAttention it drops the padding and is refused. Eager attention is
    the check: with SDPA, ModernBERT always passes a mask, and PyTorch's counter then counts none of the CPU's
    attention kernel (its total comes to exactly the count without attention)."""
    attention = "eager"
    from transformers import ModernBertConfig, ModernBertForSequenceClassification

    torch.manual_seed(0)
    config = ModernBertConfig(num_hidden_layers=3, hidden_size=64, num_attention_heads=4, intermediate_size=96,
                              vocab_size=500, pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1,
                              sep_token_id=2, num_labels=3, local_attention=8, global_attn_every_n_layers=3,
                              attn_implementation=attention)
    model = ModernBertForSequenceClassification(config).train()
    ids, mask = torch.randint(5, 500, (3, 16)), torch.ones(3, 16, dtype=torch.long)
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 1, 2])).loss.backward()
    assert batch_work(matmul_shape(model), mask).padded_flops == counter.get_total_flops()
    model.config._attn_implementation = "flash_attention_2"
    with pytest.raises(ValueError, match="drops the padding"):
        matmul_shape(model)


@pytest.mark.parametrize("frozen", [1, 2])
def test_frozen_lower_layers_run_no_backward_below_the_first_trained_one(frozen):
    """Chapter 8's frozen layers: PyTorch counts no backward below them; the count differs from its total by
    exactly the first trained layer's Q, K and V input gradients (its input needs none: the stated overcount)."""
    from bertmem.model.adapters import freeze_lower_layers

    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(**{**TINY, "num_hidden_layers": 3},
                                                     attn_implementation="eager")).train()
    freeze_lower_layers(model, frozen)
    ids, mask = torch.randint(5, 500, (3, 16)), torch.ones(3, 16, dtype=torch.long)
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 1, 2])).loss.backward()
    shape = matmul_shape(model)
    assert shape.frozen_below == frozen and shape.frozen_below_per_token == frozen * shape.per_token // 3
    hidden, tokens = TINY["hidden_size"], 3 * 16
    assert batch_work(shape, mask).padded_flops - counter.get_total_flops() == 2 * 3 * hidden**2 * tokens


def test_checkpointing_recomputes_only_the_layers_a_gradient_reaches():
    from bertmem.model.adapters import freeze_lower_layers

    model = BertForSequenceClassification(BertConfig(**{**TINY, "num_hidden_layers": 4}))
    lengths = torch.tensor([16])
    whole = matmul_shape(model)
    assert whole.recompute_flops(lengths) == whole.forward_flops(lengths) - 2 * whole.per_example  # not the head
    freeze_lower_layers(model, 3)
    frozen = matmul_shape(model)
    assert frozen.recompute_flops(lengths) == pytest.approx(whole.recompute_flops(lengths) / 4)  # one layer of 4


def test_a_trained_embedding_projection_keeps_the_backward_running_through_frozen_layers():
    """ELECTRA's embeddings_project (embedding size below the hidden size) is a Linear outside `embeddings`, which
    chapter 8's freezing leaves trained: the gradient reaches it through every layer."""
    from transformers import ElectraConfig, ElectraForSequenceClassification

    from bertmem.model.adapters import freeze_lower_layers

    model = ElectraForSequenceClassification(ElectraConfig(**{**TINY, "embedding_size": 32}))
    freeze_lower_layers(model, 1)
    assert model.electra.embeddings_project.weight.requires_grad
    assert matmul_shape(model).frozen_below == 0
    model.electra.embeddings_project.requires_grad_(False)
    assert matmul_shape(model).frozen_below == 1


def test_kaplans_6n_understates_and_6_all_parameters_overstates_bert_bases_matmul_work_at_512_tokens():
    """Kaplan et al. (2020)'s N leaves out the embeddings, and 6N leaves out attention's products: below the
    count. 6 · all parameters adds the embeddings, which multiply nothing: above. The time estimates' fallback for an
    architecture the count does not cover is 6N (#69 finding 9)."""
    shape = variant_shape(BenchConfig(model_id="bert-base-uncased"), "fp32 baseline", 2)
    assert shape.per_token == 12 * (4 * 768**2 + 2 * 768 * 3072)  # Q, K, V, output, and the two FFN matrices
    assert shape.per_example == 768**2 + 768 * 2  # the pooler and the head: one token per example
    with torch.device("meta"):
        model = BertForSequenceClassification(model_config("bert-base-uncased"))
    kaplan = 6 * non_embedding_parameters(model) * 512
    every = 6 * parameter_count("bert-base-uncased") * 512
    matmul = shape.training_flops(torch.tensor([512]))
    assert 0.89 < kaplan / matmul < 0.92  # attention's QKᵀ and AV: 12 · 12 · 768 · 512² FLOPs left out
    assert 1.14 < every / matmul < 1.18  # the embeddings' 23.8 M weights multiply nothing
    fallback = ModelWork(parameter_count("bert-base-uncased"), non_embedding=non_embedding_parameters(model))
    assert fallback.example_flops(512) == pytest.approx(kaplan)  # bert-base taken as if uncounted


def test_non_embedding_parameters_are_the_classifiers_less_its_embeddings_module():
    model = BertForSequenceClassification(BertConfig(**TINY))
    embeddings = sum(p.numel() for p in model.bert.embeddings.parameters())  # word, position, type, LayerNorm
    assert non_embedding_parameters(model) == sum(p.numel() for p in model.parameters()) - embeddings
    assert non_embedding_parameters(model) == sum(p.numel() for name, p in model.named_parameters()
                                                  if not name.startswith("bert.embeddings."))


def test_lora_adds_its_adapters_and_drops_the_frozen_weights_gradients():
    bench = BenchConfig(model_id="bert-base-uncased")
    full, lora = (variant_shape(bench, v, 2) for v in ("full recipe", "smallest footprint"))
    assert lora.per_token > full.per_token and lora.per_example == full.per_example  # the head counted once
    assert full.per_token_trained == full.per_token and lora.per_token_trained < 0.01 * lora.per_token
    lengths = torch.tensor([512])
    assert 0.65 < lora.training_flops(lengths) / full.training_flops(lengths) < 0.72  # about 2 forwards of 3


@pytest.mark.slow
def test_lora_training_flops_are_what_pytorch_counts_give_or_take_the_first_layers_input():
    from bertmem.model.adapters import apply_lora

    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(**TINY, attn_implementation="eager"))
    apply_lora(model, r=4)  # in place
    ids, mask = torch.randint(5, 500, (3, 16)), torch.ones(3, 16, dtype=torch.long)
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids, attention_mask=mask, labels=torch.tensor([0, 1, 2])).loss.backward()
    counted = batch_work(matmul_shape(model), mask).padded_flops
    assert counter.get_total_flops() <= counted < 1.2 * counter.get_total_flops()


def test_an_architecture_the_count_does_not_cover_is_refused_by_name():
    from transformers import AlbertConfig, AlbertForSequenceClassification

    with torch.device("meta"):
        albert = AlbertForSequenceClassification(AlbertConfig(num_hidden_layers=2, hidden_size=64,
                                                              num_attention_heads=4, intermediate_size=128))
    with pytest.raises(ValueError, match="not 'albert': no MFU for this model"):
        matmul_shape(albert)


def test_padding_is_work_the_card_does_and_useful_mfu_leaves_it_out():
    shape = matmul_shape(BertForSequenceClassification(BertConfig(**TINY)))
    mask = torch.tensor([[1] * 8, [1] * 2 + [0] * 6])
    work = batch_work(shape, mask)
    assert (work.padded_tokens, work.tokens) == (16, 10)
    ones = [torch.ones(1, n, dtype=torch.long) for n in (8, 2)]
    alone = batch_work(shape, ones[0]) + batch_work(shape, ones[1])
    assert work.useful_flops == alone.useful_flops < work.padded_flops
    # 2 s at a peak of the work per second: twice the work
    used = model_flops_utilisation(work, seconds=2.0, peak_tflops=work.padded_flops / 1e12)
    assert used.padded == pytest.approx(0.5)
    assert used.useful == pytest.approx(0.5 * alone.padded_flops / work.padded_flops)
    with pytest.raises(ValueError, match="must be > 0"):
        model_flops_utilisation(BatchWork(1, 1, 1.0, 1.0), 0.0, 1.0)


def test_the_peak_method_says_whether_tf32_was_allowed():
    assert "TF32 off" in peak_method("cuda", "highest")
    assert "8,192 × 8,192" in peak_method("cuda", "highest")
    assert "TF32 or lower allowed" in peak_method("cuda", "high") and "'medium'" in peak_method("cuda", "medium")
    assert "measured here" in peak_method("cuda", "highest")  # not a datasheet's
    assert "TF32" not in peak_method("cpu", "highest") and "1,024" in peak_method("cpu")


# --- the recorded benches, their MFU recomputed from rebuilt batches (scripts/add_work.py) ---

RUN = recorded_gpu_run()


@pytest.mark.parametrize("bench", [recorded_bench(), RUN["bench"], RUN["bench, cuDNN attention off"]],
                         ids=["cpu", "gpu default", "gpu cudnn off"])
def test_every_recorded_mfu_follows_from_its_rounds_work_time_and_peak(bench):
    assert "rebuilt" in bench["work"]
    settings = bench["settings"]
    for peaks, runs in zip(bench["matmul_tflops_per_round"], bench["rounds"]):
        for row in runs:
            work = BatchWork(row["padded tokens per epoch"], row["tokens per epoch"],
                             row["training FLOPs per epoch"], row["useful FLOPs per epoch"])
            used = model_flops_utilisation(work, row["time per epoch (s)"], peaks[row["precision"]])
            assert (row["MFU"], row["useful MFU"]) == pytest.approx((used.padded, used.useful))
            if row["padding"].startswith("to "):  # padded to the limit: every example at max_length
                assert row["padded tokens per epoch"] == settings["train_size"] * settings["max_length"]
            assert row["tokens per epoch"] <= row["padded tokens per epoch"]


def test_the_rebuilt_batches_are_the_ones_the_gpu_run_trained_on():
    """The run's own MFU was 6 · parameters · padded tokens over time and peak: the padded tokens it implied
    (285,120 and 285,160 for the recipe's two seeds) are exactly those of the rebuilt first epoch."""
    for row in (r for runs in RUN["bench"]["rounds"] for r in runs if r["variant"] == "full recipe"):
        implied = {0: 285_120, 1: 285_160}[row["seed"]]
        assert row["padded tokens per epoch"] == implied


def test_the_recipes_epoch_time_ratio_is_its_work_over_its_rate():
    work = recipe_work(RUN)
    assert work["epoch time ratio"] == pytest.approx(work["work ratio"] / work["rate ratio"])
    assert 0.5 < work["padded token ratio"] < 0.6 and work["rate ratio"] < 1  # less work, done more slowly


def test_the_first_meeting_excess_and_the_pass_noise_come_from_the_recorded_steps():
    excess = first_meeting_excess(RUN)
    assert [round(x, 1) for x in excess["excess per round (s)"]] == [17.3, 9.5]
    assert (excess["steps per round"], excess["micro-batches per round"]) == (30, 120)
    assert pass_noise(RUN) == pytest.approx(34.2919460000104 / 29.946389499997395 - 1)
    peak = recipe_peak_against_planner(RUN)
    assert peak["nominal allocated"] < peak["recipe allocated"] and peak["recipe with context"] > peak["planner asks"]
