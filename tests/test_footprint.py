"""Chapter 8's levers: freezing, LoRA (and merging it for saving), 8-bit and factored optimizer state."""

import pytest
import torch
from torch.utils.data import DataLoader

from bertmem.book.demos import synthetic_batch
from bertmem.loop.combined import train
from bertmem.loop.config import RunConfig, TrainConfig
from bertmem.loop.optim import make_optimizer
from bertmem.memory.estimate import estimate_step_memory
from bertmem.memory.measure import measure_step_memory
from bertmem.memory.planner import PlanRequest, plan_micro_batch
from bertmem.model.adapters import (
    apply_lora,
    freeze_lower_layers,
    has_lora,
    lora_target_modules,
    merge_lora,
    trainable_share,
)
from bertmem.model.loading import classifier_from_config, tiny_bert_config, tiny_classifier

QUIET = RunConfig(progress=False)  # no progress bars in tests

CONFIG = tiny_bert_config(hidden_size=256, intermediate_size=1024, num_attention_heads=4, num_hidden_layers=2,
                          attention_probs_dropout_prob=0.1)


def padded_batch(b=8, s=64):
    ids = torch.randint(5, 1000, (b, s), generator=torch.Generator().manual_seed(0))
    mask = torch.ones_like(ids)
    mask[0, s // 2:] = 0
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": torch.zeros_like(ids),
            "labels": torch.zeros(b, dtype=torch.long)}


def test_freezing_stops_embeddings_and_bottom_layers():
    model = tiny_classifier(seed=0)
    frozen = freeze_lower_layers(model, 1)
    names = [n for n, p in model.named_parameters() if not p.requires_grad]
    assert frozen == sum(p.numel() for p in model.parameters() if not p.requires_grad)
    assert all(n.startswith(("bert.embeddings.", "bert.encoder.layer.0.")) for n in names)
    assert any(n.startswith("bert.embeddings.") for n in names) and any(".layer.0." in n for n in names)
    with pytest.raises(ValueError, match=r"freeze_layers must be in \[0, 2\]"):
        freeze_lower_layers(tiny_classifier(seed=0), 3)


def test_lora_targets_query_and_value_and_trains_only_adapters_and_head():
    model = tiny_classifier(seed=0, dropout=0.0).eval()
    assert lora_target_modules(model) == ["query", "value"]
    batch = synthetic_batch(4)
    with torch.no_grad():
        before = model(**batch).logits
    trainable = apply_lora(model, r=4)
    with torch.no_grad():
        after = model(**batch).logits
    assert torch.equal(before, after)  # B starts at zero: the adapted model is the pretrained one
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    head = ("classifier.", "bert.pooler.")  # the pooler feeds only the classifier: trained with it
    assert names and all("lora_" in n or n.startswith(head) for n in names)
    assert trainable == sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert 0 < trainable_share(model) < 0.1 and has_lora(model)
    with pytest.raises(ValueError, match="no query/value projections"):
        lora_target_modules(torch.nn.Sequential(torch.nn.Linear(2, 2)))


def test_merged_lora_gives_the_same_logits_and_saves_a_plain_model(tmp_path):
    from transformers import AutoModelForSequenceClassification

    model = tiny_classifier(seed=0, dropout=0.0).eval()
    apply_lora(model, r=4)
    for name, param in model.named_parameters():
        if "lora_B" in name:
            torch.nn.init.normal_(param)  # as after training: the adapters now change the output
    batch = synthetic_batch(4)
    with torch.no_grad():
        adapted = model(**batch).logits
        merged = merge_lora(model)(**batch).logits
    assert torch.allclose(adapted, merged, atol=1e-5) and not has_lora(model)
    model.save_pretrained(tmp_path / "model")
    reloaded = AutoModelForSequenceClassification.from_pretrained(tmp_path / "model").eval()
    with torch.no_grad():
        assert torch.allclose(reloaded(**batch).logits, merged, atol=1e-6)


def test_optimizer_choices_and_their_state_bytes():
    sizes = {}
    for name in ("adamw", "adamw8bit", "adafactor"):
        model = classifier_from_config(CONFIG, "eager").train()
        report = measure_step_memory(model, padded_batch(), make_optimizer(list(model.parameters()), name))
        sizes[name] = report.optimizer_state / report.parameters * 4  # bytes of state per parameter
    assert sizes["adamw"] == pytest.approx(8, rel=0.01)
    assert 1.9 < sizes["adamw8bit"] < 2.3  # two uint8 moments, a scale per 256, fp32 for tiny tensors
    assert sizes["adafactor"] < 0.1  # a row and a column per matrix, no first moment
    with pytest.raises(ValueError, match="optimizer must be one of"):
        make_optimizer([torch.nn.Parameter(torch.zeros(1))], "lion")


@pytest.mark.slow
@pytest.mark.parametrize("optimizer, lora_r, freeze", [("adamw8bit", None, 0), ("adafactor", None, 0),
                                                       ("adamw", 8, 0), ("adamw", None, 1)])
def test_the_estimate_knows_each_lever(optimizer, lora_r, freeze):
    estimate = estimate_step_memory(CONFIG, 8, 64, optimizer=optimizer, lora_r=lora_r, freeze_layers=freeze,
                                    device="cpu", attention="eager")
    torch.manual_seed(0)
    model = classifier_from_config(CONFIG, "eager").train()
    if freeze:
        freeze_lower_layers(model, freeze)
    if lora_r:
        apply_lora(model, lora_r)
    real = measure_step_memory(model, padded_batch(),
                               make_optimizer([p for p in model.parameters() if p.requires_grad], optimizer))
    assert (estimate.optimizer_state, estimate.gradients, estimate.activations) == (
        real.optimizer_state, real.gradients, real.activations)
    assert estimate.step_peak == pytest.approx(real.step_peak, rel=0.001)


def test_lora_in_the_loop_leaves_the_pretrained_weights_alone():
    model = tiny_classifier(seed=0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    examples = [dict(zip(("input_ids", "attention_mask", "labels"), row))
                for row in zip(*synthetic_batch(32, generator=torch.Generator().manual_seed(1)).values())]
    train(model, DataLoader(examples, batch_size=8), TrainConfig(learning_rate=1e-2, lora_r=4), run=QUIET)
    after = {n.replace(".base_layer", ""): p for n, p in model.named_parameters()}  # LoRA wraps the base
    head = ("classifier.", "bert.pooler.")  # trained with the head
    assert all(torch.equal(before[n], after[n]) for n in before if not n.startswith(head))
    assert not torch.equal(before["classifier.weight"], after["classifier.weight"])
    assert any("lora_B" in n and p.abs().sum() > 0 for n, p in after.items())  # the adapters learned


@pytest.mark.parametrize("kwargs, message", [(dict(optimizer="lion"), "optimizer must be one of"),
                                             (dict(lora_r=0), "lora_r must be an int >= 1"),
                                             (dict(freeze_layers=-1), "freeze_layers must be an int >= 0")])
def test_recipe_rejects_bad_levers(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**kwargs)


@pytest.mark.slow
def test_the_planner_includes_the_levers():
    base = PlanRequest(model_id="bert-base-uncased", memory_bytes=15 * 2**30, precision="fp16")
    lora = PlanRequest(model_id="bert-base-uncased", memory_bytes=15 * 2**30, precision="fp16", lora_r=8)
    full_plan, lora_plan = plan_micro_batch(base), plan_micro_batch(lora)
    assert lora_plan.breakdown["optimizer state"] < full_plan.breakdown["optimizer state"] / 50
    assert lora_plan.estimated_peak_bytes < full_plan.estimated_peak_bytes


def test_eight_bit_state_skips_tiny_tensors():
    from bertmem.memory.analytic import state_bytes_per_value

    assert state_bytes_per_value(4095, "adamw8bit") == 8.0  # under bitsandbytes' 4096: fp32 moments
    assert 2.0 < state_bytes_per_value(4096, "adamw8bit") < 2.6  # uint8 moments, scales, the shared maps
    assert state_bytes_per_value(4096, "adafactor") == pytest.approx(4.0, abs=0.01)  # a vector: not factored


def test_levers_side_by_side_on_a_tiny_model(tmp_path, synthetic_frame):
    from bertmem.data.loaders import DataConfig
    from bertmem.experiments.levers import FULL, lever_recipes, run_levers

    path = tmp_path / "reviews.csv"
    synthetic_frame.to_csv(path, index=False)
    recipes = lever_recipes(TrainConfig(learning_rate=1e-3), num_layers=2)
    assert recipes["8-bit AdamW"].optimizer == "adamw8bit" and recipes["LoRA r=8"].learning_rate == 1e-2
    assert recipes["frozen lower 1 of 2 layers"].freeze_layers == 1
    chosen = {k: recipes[k] for k in (FULL, "LoRA r=8", "frozen lower 1 of 2 layers")}
    data = DataConfig(dataset=str(path), train_size=32, eval_size=16, max_length=16, micro_batch=8)
    rows = run_levers(RunConfig(model_id="tiny-bert", device="cpu"), data, chosen, seeds=(0, 1))
    by_lever = {r["lever"]: r for r in rows}
    assert list(by_lever) == list(chosen) and all(len(r["accuracies"]) == 2 for r in rows)
    assert by_lever[FULL]["trainable share"] == 1.0 and by_lever["LoRA r=8"]["trainable share"] < 0.2
    assert by_lever["LoRA r=8"]["optimizer state (MiB)"] < by_lever[FULL]["optimizer state (MiB)"] / 5
    assert "accuracy Δ vs noise" in by_lever["LoRA r=8"] and "accuracy Δ vs noise" not in by_lever[FULL]
    # whether a lever's runs differed from full fine-tuning at all, seed by seed (chapter 8's 8-bit question)
    assert by_lever["LoRA r=8"]["largest step-loss gap"] > 0 and by_lever[FULL]["eval loss"] > 0
    assert 0 <= by_lever["LoRA r=8"]["answers changed"] <= 2 * 16 and "answers changed" not in by_lever[FULL]


def test_the_levers_run_with_the_functions_a_chapter_passes(tmp_path, synthetic_frame):
    # chapter 8 passes the apply_lora, freeze_lower_layers and make_optimizer its cells show: an edit there must
    # reach the memory measurement and every training run
    from bertmem.data.loaders import DataConfig
    from bertmem.experiments.levers import FULL, lever_recipes, run_levers
    from bertmem.loop.combined import Levers
    from bertmem.model.adapters import apply_lora, freeze_lower_layers

    calls = []

    def recorded(name, function):
        def wrapper(*args, **kwargs):
            calls.append(name)
            return function(*args, **kwargs)
        return wrapper

    levers = Levers(recorded("lora", apply_lora), recorded("freeze", freeze_lower_layers),
                    recorded("optimizer", make_optimizer))
    path = tmp_path / "reviews.csv"
    synthetic_frame.to_csv(path, index=False)
    recipes = lever_recipes(TrainConfig(learning_rate=1e-3, max_steps=1), num_layers=2)
    chosen = {k: recipes[k] for k in (FULL, "LoRA r=8", "frozen lower 1 of 2 layers")}
    data = DataConfig(dataset=str(path), train_size=16, eval_size=8, max_length=16, micro_batch=8)
    rows = run_levers(RunConfig(model_id="tiny-bert", device="cpu"), data, chosen, seeds=(0,), levers=levers)
    # each lever: once for its memory, once for its run; every optimizer comes from the passed function
    assert calls.count("lora") == 2 and calls.count("freeze") == 2 and calls.count("optimizer") == 6
    assert [r["lever"] for r in rows] == list(chosen)


def test_lora_with_frozen_layers_freezes_their_adapters_too_and_trains_the_pooler_with_the_head():
    from bertmem.loop.combined import prepare_trainable

    model = tiny_classifier(seed=0)
    prepare_trainable(model, TrainConfig(lora_r=4, freeze_layers=1))
    trained = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trained and not any(".layer.0." in n for n in trained)  # the frozen layer's adapters too
    assert any(".layer.1." in n and "lora_" in n for n in trained) and "classifier.weight" in trained
    # BERT's pooler feeds only the classifier: trained with the head (MiniLM's was never trained)
    assert {"bert.pooler.dense.weight", "bert.pooler.dense.bias"} <= set(trained)
    assert not any(n.startswith("bert.encoder.") and "lora_" not in n for n in trained)


@pytest.mark.slow
def test_the_linear_guess_agrees_with_the_planner_for_bert_base():
    from bertmem.experiments.levers import FULL, estimated_lever_rows

    rows = {r["lever"]: r for r in estimated_lever_rows("bert-base-uncased", cards_gb=(16,))}
    plan = plan_micro_batch(PlanRequest(model_id="bert-base-uncased", memory_bytes=16 * 10**9, precision="fp16",
                                        effective_batch=1024))
    assert rows[FULL]["largest micro-batch, 16 GB"] == plan.largest_fitting_batch
