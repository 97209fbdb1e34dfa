"""Edit the cell, change the result: each chapter's result is computed by the definitions its page shows. Each test
runs the chapter's own result cell at tiny sizes, once with the page's definition and once with an edited copy (a
reader's edit), and asserts that the result changes. Pointed back at the package's copy, the run would not see the
edit, and the test fails."""

import dataclasses

import pandas as pd
import pytest

from bertmem.core import seed_everything
from bertmem.data import load_text_classification
from bertmem.experiments import FULL
from bertmem.model import load_tokenizer
from bertmem.profiles import get_profile
from notebook_cells import cell_with, code_cells, definitions_only, edited, run_cells

pytestmark = pytest.mark.slow  # a chapter's cells run, seconds each


@pytest.fixture(autouse=True)
def tiny_model_id(tiny_bert) -> str:
    """Every chapter's model in this file is the tiny random BERT."""
    return tiny_bert


def quiet(namespace: dict) -> dict:
    """A namespace where `display` and `plt.show` draw nothing (a test has no page)."""
    return {**namespace, "display": lambda *args, **kwargs: None}


def chapter_cells(notebook: str) -> tuple[list[str], str]:
    """A chapter's code cells and its setup cell (imports, profile, setup line)."""
    cells = code_cells(notebook)
    return cells, cell_with(cells, f'print(setup_line("{notebook.split("_")[0]}", profile))')


@pytest.fixture
def chapter_4_sweep(tiny_settings):
    """Chapter 4's groups cell, and its α sweep run at tiny sizes with given definitions: the sweep's runs. With
    MiniLM, not the tiny random BERT: two steps on 16 rows move a random 2-layer model's loss by less than the
    6 decimals the tests compare, whatever the layers' rates."""
    cells, setup = chapter_cells("04_layerwise_lr_decay.ipynb")
    sweep = cell_with(cells, "for alpha in (1.0, 0.95, 0.9):\n    for seed in seeds:")

    assignment = cell_with(cells, "def layer_assignment(")

    def runs(definitions: str, assignment_cell: str = assignment) -> list[dict]:
        namespace = run_cells([setup, assignment_cell, definitions], {})
        profile = dataclasses.replace(get_profile("cpu", env={}), epochs=1)
        namespace.update(profile=profile, chapter_settings=tiny_settings, tokenizer=load_tokenizer(profile.model_id))
        return run_cells([sweep], namespace)["runs"]
    return cell_with(cells, "def layerwise_param_groups("), assignment, runs


def test_chapter_4_sweep_runs_the_pages_groups(chapter_4_sweep):
    groups, _, runs = chapter_4_sweep

    def table(definitions: str) -> list[tuple]:
        return [(r["alpha"], r["seed"], round(r["eval_loss"], 6)) for r in runs(definitions)]

    page = table(groups)
    # a reader's edit: every group's rate ten times higher
    faster = table(edited(groups, '"lr": base_lr * group_lr_scale(', '"lr": 10 * base_lr * group_lr_scale('))
    assert len(page) == 3 and [r[:2] for r in page] == [r[:2] for r in faster]
    assert all(a[2] != b[2] for a, b in zip(page, faster)), (page, faster)


def test_chapter_9_reads_and_pools_with_the_pages_windows():
    from bertmem.data import long_subset
    from bertmem.model import load_classifier

    cells, setup = chapter_cells("09_beyond_512.ipynb")
    split = cell_with(cells, "def split_windows(")
    pool = cell_with(cells, "def pool_windows(")
    helpers = [cell_with(cells, "def fit_scorer("), cell_with(cells, "def read_windows("),
               definitions_only(cell_with(cells, "def accuracy_row("))]
    reading = cell_with(cells, "for how in POOLINGS:\n        by = scorer")
    base = run_cells([setup], {})
    data = dataclasses.replace(base["data"], eval_size=12)
    tokenizer, window = base["tokenizer"], base["window"]
    long_test = long_subset(load_text_classification(data.dataset, "test", size=400, seed=1), tokenizer, window, 6)
    seed_everything(0)
    model = load_classifier(base["profile"].model_id, label_names=long_test.attrs["label_names"])

    def result(split_cell: str, pool_cell: str) -> tuple:
        namespace = run_cells([split_cell, pool_cell, *helpers], dict(base))
        namespace.update(data=data, seeds=(0,), head_models={0: model}, long_test=long_test,
                         train_frame=long_test.iloc[:0], correct={"head": [[1] * len(long_test)]})
        run_cells([reading], namespace)
        return namespace["windows_read"], namespace["correct"]["windows, mean"]

    windows, mean = result(split, pool)
    assert windows > len(long_test)  # long reviews: more than one window each
    # a reader's edits: windows that no longer overlap; pooled logits with their sign turned
    apart = edited(split, "window_starts(len(tokens), size, stride)", "window_starts(len(tokens), size, size)")
    fewer, _ = result(apart, pool)
    _, flipped = result(split, edited(pool, "return rows.scatter_reduce(", "return -rows.scatter_reduce("))
    assert fewer < windows
    assert flipped == [[1 - c for c in mean[0]]]


def test_chapter_8_runs_lora_with_the_pages_rank_and_targets(tiny_settings):
    cells, setup = chapter_cells("08_below_the_floor.ipynb")
    lora = cell_with(cells, "def apply_lora(")
    others = cell_with(cells, "levers = Levers(apply_lora, freeze_lower_layers, make_optimizer)")
    sweep = cell_with(cells, "rows = run_levers(profile.run_config(), data, recipes, seeds, levers=levers)")

    def lora_row(lora_cell: str) -> tuple[str, float]:
        namespace = run_cells([setup, lora_cell, others], {})
        every = namespace["lever_recipes"]
        data, recipe, seeds = tiny_settings("08", namespace["profile"])
        namespace.update(data=data, recipe=dataclasses.replace(recipe, epochs=1), seeds=seeds,
                         # full fine-tuning and LoRA only: the two rows these edits are about
                         lever_recipes=lambda *args: {k: v for k, v in every(*args).items()
                                                      if k == FULL or k.startswith("LoRA")})
        table = run_cells([sweep], namespace)["table"]
        (name,) = [n for n in table.index if n.startswith("LoRA")]
        return name, table.loc[name, "trainable share"]

    page = lora_row(lora)
    rank_2 = lora_row(edited(lora, "lora_rank = 8  #", "lora_rank = 2  #"))
    all_three = lora_row(edited(lora, "target_modules or lora_target_modules(model)",
                                'target_modules or ["query", "key", "value"]'))
    assert page[0] == "LoRA r=8" and rank_2[0] == "LoRA r=2"
    assert rank_2[1] < page[1] < all_three[1]  # fewer adapter weights; adapters on the keys too


def test_chapter_3_fine_tunes_with_the_pages_step(tiny_settings, bf16_cpu):
    cells, setup = chapter_cells("03_mixed_precision.ipynb")
    step = cell_with(cells, "def mixed_precision_step(")
    runs_cell = cell_with(cells, "runs[p] = train_with_step(")

    def table(step_cell: str) -> dict[str, tuple]:
        namespace = run_cells([setup, step_cell], {})
        profile = namespace["profile"]
        namespace.update(chapter_settings=tiny_settings, tokenizer=load_tokenizer(profile.model_id), low="bf16")
        runs = run_cells([runs_cell], quiet(namespace))["runs"]
        return {p: round(r.final_metrics["eval_loss"], 6) for p, r in runs.items()}

    page = table(step)
    # a reader's edit: the step computes gradients but never applies them
    frozen = table(edited(step, "    scaler.step(optimizer)  #", "    pass  # scaler.step(optimizer)  #"))
    assert set(page) == set(frozen) == {"fp32", "bf16"}
    assert all(page[p] != frozen[p] for p in page), (page, frozen)


def test_chapter_5_memory_column_follows_the_pages_optimizer(tiny_settings):
    cells, setup = chapter_cells("05_optimized_loop.ipynb")
    optimizer = cell_with(cells, "def make_optimizer_and_scheduler(")
    step = cell_with(cells, "def optimizer_step(")
    loop = cell_with(cells, "def train(")
    bench = cell_with(cells, "results = run_bench(bench, loop=train)")

    def column(optimizer_cell: str) -> dict[str, float]:
        namespace = run_cells([setup, optimizer_cell, step, loop], {})
        namespace.update(chapter_settings=tiny_settings)
        table = run_cells([bench], quiet(namespace))["table"]
        return table["weights+grads+optimizer (MiB)"].to_dict()

    page = column(optimizer)
    # a reader's edit: plain SGD, which keeps no state, in place of AdamW's two moments per weight
    adamw = ("optimizer = levers.make_optimizer(\n        params, config.optimizer, config.learning_rate, "
             "config.weight_decay, fused=fused\n    )")
    sgd = column(edited(optimizer, adamw, "optimizer = torch.optim.SGD(params, lr=config.learning_rate)"))
    assert set(page) == set(sgd) and len(page) == 7  # every variant, the planned micro-batch too
    assert all(sgd[v] < page[v] for v in page), (page, sgd)


def test_chapter_5_the_schedule_moves_with_the_pages_optimizer_step(tiny_batches):
    from bertmem.loop import RunConfig, TrainConfig
    from bertmem.model import tiny_classifier

    cells, setup = chapter_cells("05_optimized_loop.ipynb")
    optimizer = cell_with(cells, "def make_optimizer_and_scheduler(")
    step = cell_with(cells, "def optimizer_step(")
    loop = cell_with(cells, "def train(")

    def rates(step_cell: str) -> list[float]:
        train = run_cells([setup, optimizer, step_cell, loop], {})["train"]
        result = train(tiny_classifier(seed=0), tiny_batches, TrainConfig(learning_rate=1e-3),
                       run=RunConfig(progress=False))  # four steps: warmup one, then decay to 0
        return [record["lr"] for record in result.history]

    page = rates(step)
    # a reader's edit: the schedule never moves, so the warmup never ends
    stuck = rates(edited(step, "        scheduler.step()\n", "        pass  # scheduler.step()\n"))
    assert len(page) == len(stuck) == 4 and len(set(page)) == 4 and set(stuck) == {0.0}, (page, stuck)


def test_chapter_0_fine_tunes_with_the_pages_loop(tiny_settings):
    cells, setup = chapter_cells("00_baseline.ipynb")
    loop = cell_with(cells, "def train_baseline(")
    data_cell = cell_with(cells, 'data = dataclasses.replace(chapter_settings("00", profile).data')
    model_cell = cell_with(cells, "before = evaluate(model, eval_loader)")
    run_cell = cell_with(cells, "result = train_baseline(")

    def losses(loop_cell: str) -> list[float]:
        namespace = run_cells([setup], {})
        namespace.update(chapter_settings=tiny_settings)
        namespace["profile"] = dataclasses.replace(namespace["profile"], epochs=1)
        namespace = run_cells([loop_cell, data_cell, model_cell, run_cell], quiet(namespace))
        result = namespace["result"]
        return [round(x, 6) for x in result.losses] + [round(result.final_metrics["eval_loss"], 6)]

    page = losses(loop)
    # a reader's edit: ten times the learning rate
    faster = losses(edited(loop, "AdamW(params, learning_rate,", "AdamW(params, 10 * learning_rate,"))
    assert len(page) == len(faster) and page[-1] != faster[-1], (page, faster)


def test_chapter_1_counts_with_the_pages_hook():
    cells, setup = chapter_cells("01_pain_points.ipynb")
    hook = cell_with(cells, "def saved_activation_bytes(")
    measured = cell_with(cells, "shown = saved_activation_bytes(model, batch)")

    def shown(hook_cell: str) -> int:
        namespace = run_cells([setup], {})
        namespace["profile"] = dataclasses.replace(namespace["profile"], micro_batch=2, max_length=32)
        return run_cells([hook_cell, measured], quiet(namespace))["shown"]

    page = shown(hook)
    # a reader's edit: count the weights as well
    with_weights = shown(edited(hook, "            if address not in weights:", "            if True:"))
    assert with_weights > page > 0


def test_chapter_2_checks_the_pages_loss_weights():
    cells, setup = chapter_cells("02_gradient_accumulation.ipynb")
    accumulation = cell_with(cells, "def loss_weights(")
    gradient = cell_with(cells, "def accumulated_gradient(")
    check = cell_with(cells, 'for label, sizes, naive in (')
    page = run_cells([setup, accumulation, gradient, check], {})
    assert page["verdict"] == "DIFFERENT"  # the last case, the post's rule
    # a reader's edit: every micro-batch weighs the same, as in the post; the check names the case that now fails
    equal = edited(accumulation, "return [c / total for c in counts]", "return [1 / len(counts) for c in counts]")
    with pytest.raises(AssertionError, match=r"6 \+ 5 \+ 5, weighted: relative"):
        run_cells([setup, equal, gradient, check], {})


def test_chapter_6_diagnoses_with_the_pages_functions():
    cells, setup = chapter_cells("06_pitfalls.ipynb")
    diagnose = cell_with(cells, "def diagnose_scale_trace(")
    run = cell_with(cells, "def scaled_run(")
    demo = cell_with(cells, 'healthy, _ = scaled_run("fp16", ffn_scale=1.0, **run)')

    def traces(diagnose_cell: str, run_cell: str) -> tuple:
        namespace = run_cells([setup, diagnose_cell, run_cell, demo], {})
        return (tuple(namespace["healthy"]), tuple(namespace["broken"]),
                namespace["diagnose_scale_trace"](namespace["broken"], 2.0**16))

    healthy, broken, verdict = traces(diagnose, run)
    assert "forward* pass overflows" in verdict
    # reader's edits: a scaler that never grows its scale; a diagnosis with a looser idea of "frequent"
    never_grows = edited(run, "growth_interval=growth_interval,", "growth_interval=10**6,")
    assert traces(diagnose, never_grows)[0] != healthy
    lenient = edited(diagnose, "if all(now < before for now, before in recent):", "if False:")
    assert traces(lenient, run)[2] != verdict


def test_chapter_7_plots_the_pages_accounting():
    cells, setup = chapter_cells("07_scaling_out.ipynb")
    accounting = cell_with(cells, "def per_device_bytes(")
    sizes = cell_with(cells, 'for name in ("bert-base-uncased", "bert-large-uncased"):')
    table = cell_with(cells, '"one GPU, AdamW (GiB)": plain["total"] / GIB,')

    def rows(accounting_cell: str) -> list[dict]:
        return run_cells([setup, accounting_cell, sizes, table], quiet({}))["rows"]

    page = rows(accounting)
    # a reader's edit: activations counted twice (say, for a second copy kept by the backward)
    doubled = rows(edited(accounting, '"activations": float(activation_bytes)', '"activations": 2.0 * activation_bytes'
                          ))
    assert [r["model"] for r in page] == [r["model"] for r in doubled]
    assert all(b["one GPU, AdamW (GiB)"] > a["one GPU, AdamW (GiB)"] for a, b in zip(page, doubled))


def test_chapter_4_groups_follow_the_pages_layer_assignment(chapter_4_sweep):
    groups, assignment, runs = chapter_4_sweep

    def losses(assignment_cell: str) -> dict[float, float]:
        return {r["alpha"]: round(r["eval_loss"], 6) for r in runs(groups, assignment_cell)}

    page = losses(assignment)
    # a reader's edit: every encoder layer counted as the top one, so decay reaches only the embeddings
    top = 'assignment[name] = f"layer.{len(layers)}"'
    flat = losses(edited(assignment, 'assignment[name] = f"layer.{index + 1}"', top))
    assert page[1.0] == flat[1.0]  # α = 1: one rate for all, whatever the grouping
    assert page[0.95] != flat[0.95] and page[0.9] != flat[0.9], (page, flat)


def test_chapter_9_memory_table_reads_with_the_pages_chunked_classifier():
    from bertmem.data import long_subset

    cells, setup = chapter_cells("09_beyond_512.ipynb")
    windows = [cell_with(cells, "def split_windows("), cell_with(cells, "def pool_windows(")]
    chunked = cell_with(cells, "class ChunkedClassifier(")
    # the chapter's 1,024-token review, shortened to 256 so the test stays quick
    memory = edited(cell_with(cells, 'readings = {\n    "one sequence, eager"'), "n = 1024\n", "n = 256\n")
    base = run_cells([setup], {})
    tokenizer, window = base["tokenizer"], base["window"]
    long_test = long_subset(load_text_classification(base["data"].dataset, "test", size=400, seed=1), tokenizer,
                            window, 8)

    def table(chunked_cell: str) -> dict[str, float]:
        namespace = run_cells([*windows, chunked_cell], quiet(base))
        namespace.update(long_test=long_test, cls_id=tokenizer.cls_token_id, sep_id=tokenizer.sep_token_id)
        return {r["reading"]: r["saved activations (MiB)"] for r in run_cells([memory], namespace)["measured"]}

    page = table(chunked)
    # a reader's edit: each window read only up to its middle
    halves = table(edited(chunked, "input_ids=input_ids,\n            attention_mask=attention_mask,",
                          "input_ids=input_ids[:, :32],\n            attention_mask=attention_mask[:, :32],"))
    pooled = next(name for name in page if "pooled" in name)
    assert halves[pooled] < page[pooled]
    assert all(halves[name] == page[name] for name in page if name != pooled)


def test_appendix_1_reads_the_file_with_the_pages_prepare_frame(tmp_path, monkeypatch, tiny_model_id):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the page's run folders, saved model included
    cells, setup = chapter_cells("A1_your_own_data.ipynb")
    settings_cell = cell_with(cells, "MY_FILE = None")
    demo_file = cell_with(cells, "raw = read_table(csv_path)")
    prepare = cell_with(cells, "def prepare_frame(")
    reading = cell_with(cells, "lengths = token_lengths(frame, tokenizer)")
    fine_tune = cell_with(cells, "summary = run_experiment(run, data, recipe, prepare=prepare_frame, fit=fit)")
    # a shrunken profile, as BERTMEM_TRAIN_SIZE and BERTMEM_EVAL_SIZE make one
    small = get_profile("cpu", env={"BERTMEM_TRAIN_SIZE": "32", "BERTMEM_EVAL_SIZE": "16",
                                    "BERTMEM_MODEL_ID": tiny_model_id})

    def result(prepare_cell: str) -> tuple:
        namespace = run_cells([setup, settings_cell, demo_file, prepare_cell, reading], quiet({}))
        namespace.update(profile=small, max_length=32)
        summary = run_cells([fine_tune], namespace)["summary"]
        return int(namespace["lengths"].sum()), round(summary["final"]["eval_loss"], 6)

    page = result(prepare)
    # a reader's edit: the body only, the subject left out
    body_only = result(edited(prepare, "for c in columns]", "for c in columns[:1]]"))
    assert body_only[0] < page[0]  # fewer tokens per example
    assert body_only[1] != page[1], (page, body_only)  # another fine-tune


def test_chapter_5b_backs_off_with_the_pages_function():
    cells, setup = chapter_cells("05b_runs_that_last.ipynb")
    examples = cell_with(cells, "examples = [")
    backoff = cell_with(cells, "def backward_with_backoff(")
    demo = cell_with(cells, "loss, splits = backward_with_backoff(")

    def result(backoff_cell: str) -> tuple[int, float]:
        first_paragraph = examples.split("\n\n")[0]  # the examples, before the resume demonstration
        namespace = run_cells([setup, first_paragraph, backoff_cell, demo], quiet({}))
        return namespace["splits"], namespace["oom_gap"]

    splits, gap = result(backoff)
    assert splits == 4 and gap < 1e-6  # four pieces of 4: the gradient of 4 × 4 accumulation
    # a reader's edit, the usual advice: on out-of-memory keep only the first piece of each micro-batch
    smaller = edited(backoff, "pieces = [p for micro in window for p in split_evenly(micro, splits)]",
                     "pieces = [split_evenly(micro, splits)[0] for micro in window]")
    splits, gap = result(smaller)
    assert splits == 4 and gap > 1e-4  # a batch of 4: another gradient


def test_chapter_2_steps_with_the_pages_adamw_probe():
    cells, setup = chapter_cells("02_gradient_accumulation.ipynb")
    accumulation = cell_with(cells, "def loss_weights(")
    probe = cell_with(cells, "def adamw_step_change(")
    steps = cell_with(cells, "big = adamw_step_change([32], 1e-3)")

    def step_sizes(probe_cell: str) -> tuple[float, float]:
        namespace = run_cells([setup, accumulation, probe_cell, steps], {})
        return round(float(namespace["big"].norm()), 6), round(float(namespace["times4"].norm()), 6)

    page = step_sizes(probe)
    # a reader's edit: plain SGD, whose step follows the gradient's size instead of AdamW's normalised one
    sgd = step_sizes(edited(probe, "torch.optim.AdamW(tiny.parameters(), lr=lr, weight_decay=0.0)",
                            "torch.optim.SGD(tiny.parameters(), lr=lr)"))
    assert sgd[0] != page[0] and sgd[1] != page[1], (page, sgd)


def reader_file_cells(settings: dict[str, str | None]) -> list[str]:
    """Appendix A1's code cells after its install cell, the settings cell edited as a reader sets it: their file,
    their columns, and a short read (these tests are about the page working for any file, not about learning)."""
    cells, setup = chapter_cells("A1_your_own_data.ipynb")
    edits = {'MY_FILE = None  # e.g. "/content/my_tickets.csv"': f"MY_FILE = {settings['file']!r}",
             'TEXT_COLUMN = "body"': f"TEXT_COLUMN = {settings['text']!r}",
             'SECOND_TEXT_COLUMN = "subject"  # None: one text column': f"SECOND_TEXT_COLUMN = {settings['second']!r}",
             'LABEL_COLUMN = "category"': f"LABEL_COLUMN = {settings['label']!r}",
             "NEW_ROWS_FILE = None  # rows to label, same text column(s); None: the held-out rows":
                 f"NEW_ROWS_FILE = {settings.get('new_rows')!r}",
             "MAX_LENGTH = profile.max_length if on_gpu else 128  # tokens per example": "MAX_LENGTH = 32"}
    settings_cell = cell_with(cells, "MY_FILE = None")
    mine = settings_cell
    for old, new in edits.items():
        mine = edited(mine, old, new)
    return [mine if cell == settings_cell else cell for cell in cells[1:]]  # after the install cell


def test_appendix_1_runs_on_a_readers_file_with_one_text_column_and_labels_its_held_out_rows(
        tmp_path, monkeypatch, capsys):
    import hashlib
    import tempfile

    from bertmem.book.tickets import ticket_frame

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the page's run folder
    tickets = ticket_frame(rows=60, classes=3, seed=1)
    mine = tmp_path / "mine.csv"  # the file: labels in 'topic', one text column
    codes = {name: 10 * (i + 1) for i, name in enumerate(sorted(set(tickets["category"])))}  # numeric labels
    pd.DataFrame({"id": tickets["ticket_id"], "message": tickets["body"],
                  "topic": tickets["category"].map(codes)}).to_csv(mine, index=False)
    before = hashlib.sha256(mine.read_bytes()).hexdigest()
    cells = reader_file_cells({"file": str(mine), "text": "message", "second": None, "label": "topic"})
    namespace = run_cells(cells, quiet({}))
    said = capsys.readouterr().out
    predicted = pd.read_csv(tmp_path / "bertmem-runs" / "A1" / "predictions.csv", keep_default_na=False, dtype=str)
    assert len(predicted) == namespace["summary"]["eval_examples"] and "held-out row" in predicted
    assert set(predicted["predicted"]) <= {str(code) for code in codes.values()} and "with the label they had" in said
    # the page's count of hits, against one made here from the file as written (labels as text)
    expected = int((predicted["predicted"] == namespace["truth"].astype(str)).sum())
    assert expected >= 1 and namespace["hits"] == expected, (namespace["hits"], expected)
    right = namespace["summary"]["final"]["accuracy"] * len(predicted)  # the run's own count, in its precision
    assert abs(expected - right) <= max(1, len(predicted) // 10), (expected, right)
    assert "--second-text-column" not in " ".join(sum(namespace["commands"].values(), []))  # one column
    assert (tmp_path / "bertmem-runs" / "A1" / "cli" / "model").is_dir()  # the command line's run kept its model
    assert hashlib.sha256(mine.read_bytes()).hexdigest() == before  # the reader's file is never written to


def test_appendix_1_runs_on_a_readers_two_text_columns_and_labels_their_new_rows(tmp_path, monkeypatch, capsys):
    import tempfile

    from bertmem.book.tickets import ticket_frame

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    tickets = ticket_frame(rows=60, classes=3, seed=2)
    mine, new_rows = tmp_path / "mine.csv", tmp_path / "new.csv"
    pd.DataFrame({"title": tickets["subject"], "description": tickets["body"], "team": tickets["category"]}).to_csv(
        mine, index=False)
    pd.DataFrame({"ref": ["N1", "N2"], "title": ["Card charged twice", ""],
                  "description": ["my bill shows two payments", ""]}).to_csv(new_rows, index=False)
    cells = reader_file_cells({"file": str(mine), "text": "description", "second": "title",
                                         "label": "team", "new_rows": str(new_rows)})
    predicting = cell_with(cells, "done = predict_file(")
    run_cells(cells[:cells.index(predicting) + 1], quiet({}))  # the command line: the test above
    predicted = pd.read_csv(tmp_path / "bertmem-runs" / "A1" / "predictions.csv", keep_default_na=False)
    assert list(predicted["ref"]) == ["N1", "N2"]  # the file's other columns, beside each prediction
    assert predicted["predicted"].iloc[0] in set(tickets["category"]) and predicted["predicted"].iloc[1] == ""
    assert "1 of 2 rows labelled; 1 without text" in capsys.readouterr().out  # no answers to count: none claimed
    assert (tmp_path / "new.csv").read_text().count("\n") == 3  # the reader's new rows, untouched
