import pytest
import torch
from transformers import (
    AutoModelForSequenceClassification,
    BertConfig,
    DebertaV2Config,
    DistilBertConfig,
    ElectraConfig,
    RobertaConfig,
    TrainingArguments,
    get_linear_schedule_with_warmup,
)

from bertmem.loop.optim import EMBEDDINGS, HEAD, layer_assignment, layerwise_param_groups, post_param_groups
from bertmem.model import tiny_classifier
from bertmem.model.loading import find_encoder_layers

SMALL = dict(vocab_size=100, hidden_size=16, num_attention_heads=2, intermediate_size=32,
             max_position_embeddings=64, num_labels=2)
CONFIGS = {
    "bert": lambda: BertConfig(num_hidden_layers=3, **SMALL),
    "roberta": lambda: RobertaConfig(num_hidden_layers=3, **SMALL),
    "electra": lambda: ElectraConfig(num_hidden_layers=3, embedding_size=8, **SMALL),
    "deberta-v2": lambda: DebertaV2Config(num_hidden_layers=3, relative_attention=True, position_buckets=8,
                                          pos_att_type=["p2c", "c2p"], **SMALL),
    "distilbert": lambda: DistilBertConfig(vocab_size=100, dim=16, n_layers=3, n_heads=2, hidden_dim=32,
                                           max_position_embeddings=64, num_labels=2),
}


def model_for(arch):
    torch.manual_seed(0)
    return AutoModelForSequenceClassification.from_config(CONFIGS[arch]())


@pytest.mark.parametrize("arch", sorted(CONFIGS))
def test_every_trainable_parameter_in_exactly_one_group(arch):
    model = model_for(arch)
    groups = layerwise_param_groups(model, base_lr=1e-3, decay=0.9)
    ids = [id(p) for g in groups for p in g["params"]]
    assert len(ids) == len(set(ids))
    assert set(ids) == {id(p) for p in model.parameters()}
    assert len(find_encoder_layers(model)[1]) == 3


@pytest.mark.parametrize("arch", sorted(CONFIGS))
def test_learning_rates_follow_the_formula(arch):
    model = model_for(arch)
    base, decay, L = 1e-3, 0.8, 3
    assignment = layer_assignment(model)
    assert {a for a in assignment.values()} == {EMBEDDINGS, HEAD, "layer.1", "layer.2", "layer.3"}
    for group in layerwise_param_groups(model, base, decay):
        where = assignment[group["param_names"][0]]
        assert all(assignment[n] == where for n in group["param_names"])
        expected = {HEAD: base, EMBEDDINGS: base * decay ** L}.get(where)
        if expected is None:
            expected = base * decay ** (L - int(where.split(".")[1]))
        assert group["lr"] == pytest.approx(expected)


def test_head_includes_pooler_and_classifier_and_no_decay_for_bias_and_layernorm():
    model = model_for("bert")
    assignment = layer_assignment(model)
    assert assignment["bert.pooler.dense.weight"] == HEAD and assignment["classifier.weight"] == HEAD
    assert assignment["bert.embeddings.word_embeddings.weight"] == EMBEDDINGS
    assert assignment["bert.encoder.layer.2.output.dense.weight"] == "layer.3"
    for group in layerwise_param_groups(model, 1e-3, weight_decay=0.05):
        for name, p in zip(group["param_names"], group["params"]):
            is_bias_or_norm = name.endswith("bias") or "LayerNorm" in name
            assert group["weight_decay"] == (0.0 if is_bias_or_norm else 0.05), name


def test_frozen_parameters_are_left_out():
    model = model_for("bert")
    for p in model.bert.embeddings.parameters():
        p.requires_grad_(False)
    names = {n for g in layerwise_param_groups(model, 1e-3) for n in g["param_names"]}
    assert not any("embeddings" in n for n in names)
    assert "classifier.weight" in names


def test_unassignable_parameter_is_an_error_naming_it():
    model = model_for("bert")
    model.bert.register_parameter("mystery", torch.nn.Parameter(torch.zeros(2)))
    with pytest.raises(ValueError, match="bert.mystery"):
        layerwise_param_groups(model, 1e-3)


@pytest.mark.parametrize("kwargs", [{"base_lr": 0}, {"decay": 0}, {"decay": 1.5}, {"weight_decay": -0.1}])
def test_bad_arguments(kwargs):
    args = {"base_lr": 1e-3, **kwargs}
    with pytest.raises(ValueError):
        layerwise_param_groups(model_for("bert"), **args)


def test_scheduler_scales_every_group_by_the_same_factor():
    model = model_for("bert")
    groups = layerwise_param_groups(model, 1e-3, 0.9)
    initial = [g["lr"] for g in groups]
    opt = torch.optim.AdamW(groups)
    sched = get_linear_schedule_with_warmup(opt, num_warmup_steps=2, num_training_steps=10)
    for _ in range(5):
        opt.step()
        sched.step()
        factors = [g["lr"] / lr0 for g, lr0 in zip(opt.param_groups, initial)]
        assert max(factors) == pytest.approx(min(factors))


def test_seed_article_grouping_misses_head_and_embeddings():
    model = model_for("bert")
    covered = {id(p) for g in post_param_groups(model) for p in g["params"]}
    missed = [n for n, p in model.named_parameters() if id(p) not in covered]
    assert "classifier.weight" in missed and "bert.pooler.dense.weight" in missed
    assert any("embeddings" in n for n in missed)
    # and so an optimizer built from it never updates the classifier
    opt = torch.optim.AdamW(post_param_groups(model, base_lr=1e-2))
    before = model.classifier.weight.detach().clone()
    batch = {"input_ids": torch.randint(0, 100, (4, 8)), "labels": torch.tensor([0, 1, 0, 1])}
    model(**batch).loss.backward()
    opt.step()
    assert torch.equal(model.classifier.weight, before)


def test_seed_article_trainer_argument_does_not_exist():
    with pytest.raises(TypeError, match="layerwise_learning_rate_decay"):
        TrainingArguments(output_dir="unused", gradient_accumulation_steps=4, layerwise_learning_rate_decay=0.95)


def test_train_builds_its_groups_with_the_function_a_chapter_passes(tiny_model, tiny_batches):
    """Chapter 4 passes the layerwise_param_groups its page shows: train must call that one, not the package's."""
    from bertmem.loop import Levers, TrainConfig, train

    seen = []

    def scaled_groups(model, base_lr, decay, weight_decay):
        seen.append((base_lr, decay))
        groups = layerwise_param_groups(model, base_lr, decay, weight_decay)
        return [{**group, "lr": 10 * group["lr"]} for group in groups]  # an edited page

    config = TrainConfig(learning_rate=1e-3, layerwise_decay=0.9, epochs=1, warmup_ratio=0.0)
    package = train(tiny_model, tiny_batches, config)
    edited = train(tiny_classifier(seed=0), tiny_batches, config, levers=Levers(layerwise_param_groups=scaled_groups))
    assert seen == [(1e-3, 0.9)]
    # the logged rate is the head's group: ten times the package's at every step
    assert [h["lr"] for h in edited.history] == pytest.approx([10 * h["lr"] for h in package.history])


@pytest.mark.slow  # estimates bert-base four times under FakeTensorMode
def test_the_lever_tables_take_the_rank_a_chapter_sets():
    from bertmem.experiments.levers import FULL, estimated_lever_rows, lever_recipes
    from bertmem.loop import TrainConfig

    recipes = lever_recipes(TrainConfig(), 12, lora_rank=2)
    assert recipes["LoRA r=2"].lora_r == 2 and FULL in recipes and "LoRA r=8" not in recipes
    rows = {r["lever"]: r for r in estimated_lever_rows("bert-base-uncased", seq_len=512, micro_batch=8,
                                                        lora_rank=2)}
    eight = {r["lever"]: r for r in estimated_lever_rows("bert-base-uncased", seq_len=512, micro_batch=8)}
    assert rows["LoRA r=2"]["optimizer state (GiB)"] < eight["LoRA r=8"]["optimizer state (GiB)"]
