"""Each chapter's "Try it" list: an edit to one of its cells and what the reader sees after running it again. Every
item names the test that backs it (here or in tests/test_edit_the_cell.py): the test makes the item's edit on the
cell as the notebook has it, runs it at tiny sizes (a tiny random BERT, a few rows) and asserts what the item says,
and, where that is cheap, that the unedited cell does not show it."""

import dataclasses
import json
import re
import sys

import pandas as pd
import pytest

import test_edit_the_cell
from notebook_cells import BOOK, cell_with, edited, run_cells
from test_edit_the_cell import chapter_cells, quiet

# each chapter's items, in order: a piece of the item's text, and the test that makes its edit
TRY_IT = {
    "00_baseline.ipynb": [
        ("put `#` before `optimizer.step()`", "test_chapter_0_a_loop_that_never_steps_keeps_the_untrained_accuracy"),
        ('add `dataset="/content/my_texts.csv", train_size=None', "test_chapter_0_data_cell_reads_a_readers_file"),
        ("replace `profile.dataset` (both times)", "test_chapter_0_token_lengths_count_a_readers_texts"),
    ],
    "01_pain_points.ipynb": [
        ("replace `if address not in weights:` with `if True:`", "test_chapter_1_counts_with_the_pages_hook"),
        ("measurement's cell, replace `profile.dataset`", "test_chapter_1_measures_a_step_on_a_readers_texts"),
        ('add `optimizer="sgd"`', "test_chapter_1_sgd_halves_the_optimizer_state"),
    ],
    "02_gradient_accumulation.ipynb": [
        ("`return [1 / len(counts) for c in counts]`", "test_chapter_2_checks_the_pages_loss_weights"),
        ("to `SGD(tiny.parameters(), lr=lr)`", "test_chapter_2_steps_with_the_pages_adamw_probe"),
        ("`for card in (8, 16, 24):`", "test_chapter_2_prints_the_largest_micro_batch_for_a_readers_card"),
    ],
    "03_mixed_precision.ipynb": [
        ("replace `scaler.step(optimizer)` with `pass`", "test_chapter_3_fine_tunes_with_the_pages_step"),
        ('add `"my card": ("cuda", (8, 6), None),`', "test_chapter_3_adds_a_row_for_a_readers_card"),
        ('`"bert-base-uncased", 8, 512`', "test_chapter_3_a_smaller_batch_shrinks_only_the_activations"),
    ],
    "04_layerwise_lr_decay.ipynb": [
        ("change `decay=0.95` to `decay=1.0`", "test_chapter_4_no_decay_gives_every_group_the_heads_rate"),
        ("`no_weight_decay(name, param)` with", "test_chapter_4_weight_decay_everywhere_drops_the_no_decay_rows"),
        ('`return [{"params": list(model.classifier', "test_chapter_4_the_posts_groups_fixed_move_the_classifier"),
        ('add `dataset="/content/my_texts.csv", train_size=None', "test_chapter_4_sweep_reads_a_readers_file"),
    ],
    "05_optimized_loop.ipynb": [
        ("`torch.optim.SGD(params, lr=config.learning_rate)`",
         "test_chapter_5_memory_column_follows_the_pages_optimizer"),
        ('`profile.dataset, "train", size=1000, seed=0`', "test_chapter_5_padding_table_counts_a_readers_texts"),
    ],
    "05b_runs_that_last.ipynb": [
        ("`train(resumed, loader(), recipe,`", "test_chapter_5b_a_resume_refuses_another_recipe"),
        ("`max_examples=2`", "test_chapter_5b_a_card_of_two_examples_backs_off_twice_to_the_same_gradient"),
        ("replace `profile.dataset,` with your CSV", "test_chapter_5b_the_command_line_trains_on_a_readers_file"),
    ],
    "06_pitfalls.ipynb": [
        ("`if all(now < before", "test_chapter_6_without_the_every_step_check_overflow_reads_as_frequent"),
        ("change `learning_rate=1e4` to", "test_chapter_6_the_guard_stays_silent_while_the_loss_stays_finite"),
        ('`profile.long_dataset, "train", size=1000', "test_chapter_6_truncation_table_counts_a_readers_texts"),
    ],
    "07_scaling_out.ipynb": [
        ("`gradient_buckets=True` to", "test_chapter_7_buckets_as_views_keep_the_ddp_curve_flat"),
        ("`state=StateBytes(2, 2, 12),`", "test_chapter_7_the_zero_papers_bytes_lower_every_curve_past_one_device"),
        ("change `config, 8, 512`", "test_chapter_7_a_larger_micro_batch_adds_the_same_to_every_entry"),
    ],
    "08_below_the_floor.ipynb": [
        ("change `lora_rank = 8` to `lora_rank = 2`", "test_chapter_8_runs_lora_with_the_pages_rank_and_targets"),
        ('`target_modules or ["query", "key", "value"]`', "test_chapter_8_runs_lora_with_the_pages_rank_and_targets"),
        ("add `(3072, 768)`", "test_chapter_8_a_feed_forward_matrix_keeps_fewer_state_bytes_per_value"),
        ("add `cards_gb=(8, 16, 24)`", "test_chapter_8_estimates_add_a_column_for_a_readers_card"),
    ],
    "09_beyond_512.ipynb": [
        ("`window_starts(len(tokens), size, size)`", "test_chapter_9_reads_and_pools_with_the_pages_windows"),
        ('`[open("/content/my_text.txt").read()]`', "test_chapter_9_cuts_a_readers_text_into_windows"),
        ("`input_ids=input_ids[:, :32],`", "test_chapter_9_memory_table_reads_with_the_pages_chunked_classifier"),
    ],
    "09b_what_long_inputs_cost.ipynb": [
        ("`PlanRequest(memory_bytes=24 * 2**30)`", "test_chapter_9b_a_readers_card_moves_the_room_and_what_fits"),
        ("add `gradient_checkpointing=True`", "test_chapter_9b_windows_with_checkpointing_need_less_memory"),
    ],
}
# what a reader's page does not talk about: how the book is checked or run
INTERNAL = re.compile(r"\btests?\b|\bissues?\b|\bCI\b|pytest")


def try_it_cell(cells: list[dict]) -> tuple[int, str]:
    """The one markdown cell that starts with "## Try it": its index and text."""
    found = [
        (i, "".join(c["source"]))
        for i, c in enumerate(cells)
        if c["cell_type"] == "markdown" and "".join(c["source"]).startswith("## Try it")
    ]
    assert len(found) == 1, f"{len(found)} cells start with '## Try it'"
    return found[0]


def list_items(text: str) -> list[str]:
    """The numbered items of a Markdown list, each with its indented continuation lines."""
    items: list[list[str]] = []
    for line in text.splitlines():
        if re.match(r"\d+\. ", line):
            items.append([line])
        elif items and line.startswith("   ") and line.strip():
            items[-1].append(line)
        elif items and line.strip():
            raise AssertionError(f"a line outside the list after its first item: {line!r}")
    return ["\n".join(lines) for lines in items]


def try_it_problems(cells: list[dict], table: list[tuple[str, str]]) -> list[str]:
    """What is wrong with a chapter's "Try it" cell against its table: items without a test (or the reverse),
    pieces in the wrong item, a test that does not exist, text a reader should not see, long items or lines, no
    item on the reader's own data or card, a place other than with the takeaway after the chapter's code."""
    index, text = try_it_cell(cells)
    items, problems = list_items(text), []
    if not 2 <= len(items) <= 4 or len(items) != len(table):
        problems.append(f"{len(items)} items, {len(table)} in the table (2 to 4)")
    numbers = [int(item.split(".", 1)[0]) for item in items]
    if numbers != list(range(1, len(items) + 1)):
        problems.append(f"items numbered {numbers}")
    for k, (item, (piece, test)) in enumerate(zip(items, table), 1):
        elsewhere = [j for j, other in enumerate(items, 1) if j != k and piece in other]
        if piece not in item or elsewhere:
            problems.append(f"item {k} should hold {piece!r} (found in items {elsewhere})")
        if not any(callable(getattr(module, test, None)) for module in (TESTS, test_edit_the_cell)):
            problems.append(f"item {k}: no test {test}")
        if len(item.splitlines()) > 3:
            problems.append(f"item {k} takes {len(item.splitlines())} lines")
    problems += [f"line of {len(line)} characters" for line in text.splitlines() if len(line) > 120]
    problems += [f"says {m.group(0)!r}" for m in INTERNAL.finditer(text)]
    if not any(re.match(r"\d+\. \*\*Your (?:file|card)\.\*\*", item) for item in items):
        problems.append("no item on the reader's own file or card")
    last_code = max(i for i, c in enumerate(cells) if c["cell_type"] == "code")
    takeaway = [i for i, c in enumerate(cells) if "**Takeaway.**" in "".join(c["source"])]
    if index < last_code or len(takeaway) != 1 or abs(takeaway[0] - index) != 1:
        problems.append(f"cell {index}: not next to the takeaway (cells {takeaway}) after the last code cell")
    return problems


TESTS = sys.modules[__name__]


@pytest.mark.parametrize("notebook", sorted(TRY_IT))
def test_each_try_it_item_names_the_test_that_makes_its_edit(notebook):
    cells = json.loads((BOOK / notebook).read_text(encoding="utf-8"))["cells"]
    assert try_it_problems(cells, TRY_IT[notebook]) == []


def test_the_try_it_check_finds_an_item_without_its_test():
    cells = json.loads((BOOK / "02_gradient_accumulation.ipynb").read_text(encoding="utf-8"))["cells"]
    index, text = try_it_cell(cells)
    extra = "\n4. **Your card.** In the first cell, add a line: the tests see it."
    changed = [dict(c, source=[text + extra]) if i == index else c for i, c in enumerate(cells)]
    problems = try_it_problems(changed, TRY_IT["02_gradient_accumulation.ipynb"])
    assert problems == ["4 items, 3 in the table (2 to 4)", "says 'tests'"]
    missing = TRY_IT["02_gradient_accumulation.ipynb"][:2] + [("`for card in", "test_a_card_nobody_wrote")]
    assert try_it_problems(cells, missing) == ["item 3: no test test_a_card_nobody_wrote"]


@pytest.fixture
def readers_file(tmp_path):
    """A reader's file of 45 texts (or `rows`) in three classes, its columns named as given (text and label by
    default)."""

    def write(text: str = "text", label: str = "label", rows: int = 45):
        moods = {"pos": "loved it", "neg": "hated it", "mixed": "not sure"}
        rows = [
            (f"text {i}: " + "very " * (i % 7) + words, label)
            for i, (label, words) in zip(range(rows), list(moods.items()) * rows)
        ]
        path = tmp_path / "my_texts.csv"
        pd.DataFrame(rows, columns=[text, label]).to_csv(path, index=False)
        return path

    return write


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before")
def test_chapter_0_a_loop_that_never_steps_keeps_the_untrained_accuracy(tiny_bert, tiny_settings):
    cells, setup = chapter_cells("00_baseline.ipynb")
    loop = cell_with(cells, "def train_baseline(")
    run = [
        cell_with(cells, 'data = dataclasses.replace(chapter_settings("00", profile).data'),
        cell_with(cells, "before = evaluate(model, eval_loader)"),
        cell_with(cells, "result = train_baseline("),
        cell_with(cells, "display(as_table(rows))\nfinal = result.final_metrics"),
    ]

    def before_and_after(loop_cell: str) -> tuple[dict, dict, float]:
        namespace = run_cells([setup], {})
        namespace.update(chapter_settings=tiny_settings)
        namespace = run_cells([loop_cell, *run], quiet(namespace))
        return namespace["before"], namespace["rows"][-1], namespace["result"].final_metrics["eval_loss"]

    before, row, loss = before_and_after(
        edited(loop, "            optimizer.step()\n", "            # optimizer.step()\n")
    )
    assert row["accuracy"] == before["accuracy"] and loss == before["eval_loss"]  # the untrained model, unchanged
    before, _, loss = before_and_after(loop)
    assert loss != before["eval_loss"]  # the page's loop steps


@pytest.mark.slow
def test_chapter_0_data_cell_reads_a_readers_file(tiny_bert, readers_file, capsys):
    path = readers_file("review", "sentiment")  # columns of their own names: the item's text_column=, label_column=
    cells, setup = chapter_cells("00_baseline.ipynb")
    data_cell = cell_with(cells, 'data = dataclasses.replace(chapter_settings("00", profile).data')
    model_cell = cell_with(cells, "before = evaluate(model, eval_loader)")
    mine = edited(
        data_cell,
        "group_by_length=False)",
        f'group_by_length=False, dataset="{path}", train_size=None, eval_size=None, '
        'text_column="review", label_column="sentiment")',
    )
    namespace = run_cells([setup], {})
    capsys.readouterr()
    namespace = run_cells([mine, model_cell], quiet(namespace))
    said = capsys.readouterr().out
    assert "held out 9 of 45 rows" in said  # a fifth of the file, for evaluation
    assert "(3 classes;" in said  # the line before fine-tuning: the file's classes, not IMDb's two
    assert len(namespace["train_frame"]) == 36


@pytest.mark.slow
def test_chapter_0_token_lengths_count_a_readers_texts(tiny_bert, readers_file, capsys):
    import matplotlib.pyplot as plt

    path = readers_file("review", "sentiment")
    cells, setup = chapter_cells("00_baseline.ipynb")
    lengths = cell_with(cells, 'split = load_text_classification(profile.dataset, "train")')
    mine = edited(
        lengths,
        'load_text_classification(profile.dataset, "train")',
        f'load_text_classification("{path}", "train", text_column="review", label_column="sentiment")',
    )
    mine = edited(mine, 'ax.set_title(f"{profile.dataset} review length', f'ax.set_title(f"{path} review length')
    namespace = run_cells([setup], {})
    capsys.readouterr()
    namespace = run_cells([mine], quiet(namespace))
    said = capsys.readouterr().out
    texts = pd.read_csv(path)["review"]
    tokens = [len(namespace["tokenizer"](text)["input_ids"]) for text in texts]
    assert len(namespace["stats"]["lengths"]) == len(texts)  # every text (fewer than 2,000), not an IMDb sample
    assert f"max {max(tokens)}" in said and "longer than 512 tokens: 0.0%" in said
    assert namespace["ax"].get_title().startswith(str(path))
    plt.close("all")


@pytest.mark.slow
def test_chapter_1_measures_a_step_on_a_readers_texts(tiny_bert, readers_file, capsys):
    path = readers_file()
    cells, setup = chapter_cells("01_pain_points.ipynb")
    hook = cell_with(cells, "def saved_activation_bytes(")
    measured = cell_with(cells, "shown = saved_activation_bytes(model, batch)")
    mine = edited(measured, "    profile.dataset, ", f'    "{path}", ')  # the reader's edit
    namespace = run_cells([setup], {})
    namespace["profile"] = dataclasses.replace(namespace["profile"], micro_batch=6, max_length=12)  # a tiny step
    capsys.readouterr()
    namespace = run_cells([hook, mine], quiet(namespace))
    (line,) = [line for line in capsys.readouterr().out.splitlines() if "tokens, eager attention, fp32" in line]
    texts = list(namespace["frame"]["text"])
    tokens = [len(namespace["tokenizer"](text)["input_ids"]) for text in texts]
    assert len(texts) == 6 and set(texts) <= set(pd.read_csv(path)["text"])  # a batch of the file's texts
    assert f", batch 6 × {min(max(tokens), 12)} tokens, " in line  # padded to the longest, cut at the limit


@pytest.mark.slow
def test_chapter_1_sgd_halves_the_optimizer_state():
    """At tiny sizes: a 2-layer BERT 32 wide (512 positions) for bert-base; bytes per parameter do not depend on
    the model's size. The page's rows, AdamW's, print 16 bytes per parameter and 8 of Adam state."""
    from bertmem.model import tiny_bert_config

    cells, setup = chapter_cells("01_pain_points.ipynb")
    state = cell_with(cells, 'n = count_bert_parameters(model_config("bert-base-uncased"))')
    mine = edited(state, "precision=precision\n", 'precision=precision, optimizer="sgd"\n')  # the reader's edit
    mine = edited(mine, 'model_config("bert-base-uncased")', "model_config(TINY)")
    mine = edited(mine, '"bert-base-uncased", b_, s_', "TINY, b_, s_")
    namespace = run_cells([setup], {"TINY": tiny_bert_config(max_position_embeddings=512), "GB": 1e9})
    namespace = run_cells([mine], quiet(namespace))
    rows, n = namespace["rows"], namespace["n"]
    assert len(rows) == 4  # two precisions, two sizes
    assert [round(r["weights+grads+Adam, bytes/param"], 2) for r in rows] == [12.0] * 4  # as the table prints it
    assert [round(r["Adam state (GB)"] * 1e9 / n, 2) for r in rows] == [4.0] * 4  # half of AdamW's 8


@pytest.mark.slow
def test_chapter_2_prints_the_largest_micro_batch_for_a_readers_card(capsys):
    import matplotlib.pyplot as plt

    from bertmem.model import tiny_bert_config

    cells, setup = chapter_cells("02_gradient_accumulation.ipynb")
    estimate = cell_with(cells, "for card in (16, 24):")
    mine = edited(estimate, "for card in (16, 24):", "for card in (8, 16, 24):")  # the reader's edit
    for attention in ("sdpa", "eager"):  # at tiny sizes: a 2-layer BERT, 64 tokens
        mine = edited(
            mine,
            f'estimate_step_memory("bert-base-uncased", m, 512, attention="{attention}")',
            f'estimate_step_memory(TINY, m, 64, attention="{attention}")',
        )
    namespace = run_cells([setup], {"TINY": tiny_bert_config()})
    capsys.readouterr()
    namespace = run_cells([mine], quiet(namespace))
    lines = [line for line in capsys.readouterr().out.splitlines() if " GB card (1 GB kept free)" in line]
    run_cells(["for card in (16, 24):" + estimate.split("for card in (16, 24):")[1]], namespace)  # the page's
    page = [line for line in capsys.readouterr().out.splitlines() if " GB card (1 GB kept free)" in line]
    plt.close("all")
    assert [line.split()[0] for line in page] == ["16", "24"] and lines[1:] == page  # a T4 is the 16 GB line
    found = re.fullmatch(
        r"8 GB card \(1 GB kept free\): largest micro-batch (\d+) with eager attention "
        r"\(accumulate (\d+)\), (\d+) with SDPA \(accumulate (\d+)\)",
        lines[0],
    )
    eager, eager_steps, sdpa, sdpa_steps = map(int, found.groups())
    assert eager * eager_steps == sdpa * sdpa_steps == 32 and eager <= sdpa
    # a card too small for even the smallest micro-batch: a sentence, not an error from max() of nothing
    run_cells(["for card in (1,):" + mine.split("for card in (8, 16, 24):")[1]], namespace)
    small = capsys.readouterr().out.strip()
    assert small == ("1 GB card (1 GB kept free): largest micro-batch none with eager attention (even 2 needs more: "
                     "chapter 8), none with SDPA (even 2 needs more: chapter 8)"), small


@pytest.mark.slow
def test_chapter_3_adds_a_row_for_a_readers_card():
    cells, setup = chapter_cells("03_mixed_precision.ipynb")
    hardware = cell_with(cells, "hardware = {")
    namespace = run_cells([setup], {})
    last = '    "CPU without bf16": ("cpu", None, False),\n'

    def rows(capability: str | None) -> list[dict]:
        cell = (
            hardware
            if capability is None
            else edited(hardware, last, f'{last}    "my card": ("cuda", {capability}, None),\n')
        )
        return run_cells([cell], quiet(dict(namespace)))["rows"]

    page, ampere, t4 = rows(None), rows("(8, 6)"), rows("(7, 5)")
    assert "my card" not in [row["hardware"] for row in page]
    assert ampere[:-1] == page == t4[:-1]
    assert (ampere[-1]["hardware"], ampere[-1]["choice"], ampere[-1]["GradScaler"]) == ("my card", "bf16", "no")
    assert (t4[-1]["choice"], t4[-1]["GradScaler"]) == ("fp16", "yes")


@pytest.mark.slow
def test_chapter_3_a_smaller_batch_shrinks_only_the_activations():
    from bertmem.model import tiny_bert_config

    cells, setup = chapter_cells("03_mixed_precision.ipynb")
    estimate = cell_with(cells, 'estimate_step_memory("bert-base-uncased", 32, 512, precision=p')
    smaller = edited(estimate, '"bert-base-uncased", 32, 512', '"bert-base-uncased", 8, 512')  # the reader's edit
    namespace = run_cells([setup], {"TINY": tiny_bert_config()})

    def table(cell: str, batch: int) -> dict[str, tuple[float, float]]:
        tiny = edited(cell, f'"bert-base-uncased", {batch}, 512', f"TINY, {batch}, 64")  # a 2-layer BERT, 64 tokens
        est = run_cells([tiny], quiet(namespace))["est"]
        return {p: (r.activations / 2**30, r.total / 2**30) for p, r in est.items()}

    page, eight = table(estimate, 32), table(smaller, 8)
    assert set(page) == set(eight) == {"fp32", "bf16", "fp16"}
    for p, (activations, total) in page.items():
        drop = activations - eight[p][0]
        assert drop > 0 and total - eight[p][1] == pytest.approx(drop), (p, page[p], eight[p])


@pytest.fixture(scope="module")
def chapter_4_groups(tiny_model_dir):
    """Chapter 4's cells up to its group table, run once with a tiny random BERT: the cells and the namespace (each
    test runs its cells in a copy)."""
    cells, setup = chapter_cells("04_layerwise_lr_decay.ipynb")
    definitions = [cell_with(cells, "def layer_assignment("), cell_with(cells, "def layerwise_param_groups("),
                   cell_with(cells, "def post_param_groups(")]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BERTMEM_MODEL_ID", str(tiny_model_dir))
        namespace = run_cells([setup, *definitions, cell_with(cells, "post_groups = post_param_groups(model")], {})
    return cells, namespace


def group_table(cells: list[str], namespace: dict, groups_cell: str | None = None, table_cell: str | None = None):
    """The rows of chapter 4's group table, with the page's cells or edited ones."""
    table_cell = table_cell or cell_with(cells, "groups = layerwise_param_groups(model, base_lr=2e-5")
    namespace = quiet(dict(namespace))
    groups = run_cells([groups_cell, table_cell] if groups_cell else [table_cell], namespace)["groups"]
    return [(g["name"], f"{g['lr']:.3g}", g["weight_decay"]) for g in groups]


@pytest.mark.slow
def test_chapter_4_no_decay_gives_every_group_the_heads_rate(chapter_4_groups):
    cells, namespace = chapter_4_groups
    table = cell_with(cells, "groups = layerwise_param_groups(model, base_lr=2e-5")
    page = group_table(cells, namespace)
    flat = group_table(cells, namespace, table_cell=edited(table, "decay=0.95", "decay=1.0"))
    assert [name for name, _, _ in flat] == [name for name, _, _ in page]  # the same groups
    assert {lr for _, lr, _ in flat} == {"2e-05"} and len({lr for _, lr, _ in page}) > 1
    assert ("head", "2e-05") in [(name, lr) for name, lr, _ in page]


@pytest.mark.slow
def test_chapter_4_weight_decay_everywhere_drops_the_no_decay_rows(chapter_4_groups):
    cells, namespace = chapter_4_groups
    groups_cell = cell_with(cells, "def layerwise_param_groups(")
    page = group_table(cells, namespace)
    everywhere = group_table(cells, namespace, edited(groups_cell, "no_weight_decay(name, param)", "False"))
    assert any("(no decay)" in name for name, _, _ in page) and 0.0 in [wd for _, _, wd in page]
    assert not any("(no decay)" in name for name, _, _ in everywhere)
    assert {wd for _, _, wd in everywhere} == {0.01}


@pytest.mark.slow
def test_chapter_4_the_posts_groups_fixed_move_the_classifier(chapter_4_groups, capsys):
    cells, namespace = chapter_4_groups
    post = cell_with(cells, "def post_param_groups(")
    counted = cell_with(cells, "post_groups = post_param_groups(model")
    batch = "make_loader(tokenize_frame(frame, tokenizer, 128), tokenizer, 16)"
    one_step = edited(
        cell_with(cells, "changes = {}\nfor name, groups in ("), batch, batch.replace("128", "16")
    )  # at tiny sizes: 16 tokens

    def result(post_cell: str) -> tuple[list[str], float]:
        capsys.readouterr()
        changes = run_cells([post_cell, counted, one_step], quiet(dict(namespace)))["changes"]
        lines = capsys.readouterr().out.splitlines()
        return [line for line in lines if "classifier" in line and "left out" in line], changes["blog post's groups "]

    left_out = r"\s*classifier\s+0 parameters left out"
    fixed = 'return [{"params": list(model.classifier.parameters()), "lr": base_lr}] + ['
    (fixed_line,), fixed_change = result(edited(post, "return [", fixed))
    assert fixed_change > 0 and re.fullmatch(left_out, fixed_line)
    (page_line,), page_change = result(post)
    assert page_change == 0 and not re.fullmatch(left_out, page_line)  # the post's groups leave the classifier out


@pytest.mark.slow
def test_chapter_4_sweep_reads_a_readers_file(readers_file, capsys):
    path = readers_file()
    cells, setup = chapter_cells("04_layerwise_lr_decay.ipynb")
    sweep = cell_with(cells, "for alpha in (1.0, 0.95, 0.9):\n    for seed in seeds:")
    data_part = sweep.split("\nruns = []")[0]  # the data it reads, before the nine fine-tunes
    line = "    group_by_length=False,  # chapter 5's idea; here the batches stay random\n"
    mine = edited(data_part, line, f'{line}    dataset="{path}", train_size=None, eval_size=None,\n')
    namespace = run_cells([setup], {})
    capsys.readouterr()
    run_cells([mine], namespace)
    said = capsys.readouterr().out.splitlines()
    assert said[0].startswith("read my_texts.csv: 45 rows") and said[-2].startswith("held out 9 of 45 rows")
    assert said[-1].startswith(f"{path}: 36 training and 9 evaluation texts, ")
    run_cells([data_part], namespace)  # the page's: the chapter's own data set, no rows held out
    assert not capsys.readouterr().out.startswith(("read", "held out", str(path)))


def test_chapter_5_padding_table_counts_a_readers_texts(tmp_path):
    path = tmp_path / "my_texts.csv"  # 45 texts of 5 to 400 tokens: some longer than each limit but the last
    rows = [(f"text {i}: " + "very " * (9 * i) + ("good" if i % 2 else "bad"), i % 2) for i in range(45)]
    pd.DataFrame(rows, columns=["text", "label"]).to_csv(path, index=False)
    cells, setup = chapter_cells("05_optimized_loop.ipynb")
    padding = cell_with(cells, "grouped = LengthGroupedBatchSampler(")
    mine = edited(padding, 'profile.dataset, "train", size=1000, seed=0', f'"{path}", "train"')  # the reader's edit
    namespace = run_cells([mine], quiet(run_cells([setup], {})))
    tokens = [len(namespace["tokenizer"](text)["input_ids"]) for text, _ in rows]
    table = {row["max_length"]: row for row in namespace["rows"]}
    assert len(namespace["frame"]) == len(rows) and list(table) == [128, 256, 512]  # every text, not 1,000 reviews
    for limit, row in table.items():
        cut = [min(t, limit) for t in tokens]
        assert row["mean tokens"] == pytest.approx(sum(cut) / len(cut))
        assert row["padding, pad to max_length"] == pytest.approx(1 - sum(cut) / (limit * len(cut)))
    assert table[128]["mean tokens"] < table[256]["mean tokens"] < table[512]["mean tokens"]


@pytest.fixture
def chapter_5b():
    """Chapter 5b's cells, and a namespace after its setup and checkpoint cells (its tiny examples, `train`)."""
    cells, setup = chapter_cells("05b_runs_that_last.ipynb")
    checkpoint = cell_with(cells, "interrupt_after(")
    return cells, checkpoint, quiet(run_cells([setup], {}))


@pytest.mark.slow
def test_chapter_5b_a_resume_refuses_another_recipe(chapter_5b, capsys):
    from bertmem.loop.checkpoint import CheckpointError

    cells, checkpoint, namespace = chapter_5b
    run_cells([checkpoint], dict(namespace))  # as the page has it: resumed to the same weights
    assert "identical to the uninterrupted run: True" in capsys.readouterr().out
    mine = edited(checkpoint, "train(resumed, loader(), recipe,",
                  "train(resumed, loader(), dataclasses.replace(recipe, learning_rate=2e-3),")
    with pytest.raises(CheckpointError, match="the run's settings changed.*learning_rate"):
        run_cells([mine], dict(namespace))


@pytest.mark.slow
def test_chapter_5b_a_card_of_two_examples_backs_off_twice_to_the_same_gradient(chapter_5b, capsys):
    cells, checkpoint, namespace = chapter_5b
    backoff = cell_with(cells, "def backward_with_backoff(")
    oom = cell_with(cells, "max_examples=4")
    namespace = run_cells([checkpoint, backoff], namespace)

    def printed(cell: str) -> list[str]:
        capsys.readouterr()
        run_cells([cell], dict(namespace))
        return capsys.readouterr().out.splitlines()

    page, mine = printed(oom), printed(edited(oom, "max_examples=4", "max_examples=2"))
    warned = [[line.split(":")[0] for line in out if line.startswith("out of memory")] for out in (page, mine)]
    assert warned[1] == [*warned[0], "out of memory with micro-batches of 4 examples"], warned  # one more halving
    assert page[-1].startswith("4 pieces of 4 examples") and mine[-1].startswith("8 pieces of 2 examples")
    assert mine[-1].endswith("equal (fp32 round-off)"), mine[-1]


@pytest.mark.slow
def test_chapter_5b_the_command_line_trains_on_a_readers_file(chapter_5b, readers_file, capsys):
    cells, _, namespace = chapter_5b
    path = readers_file("review", "stars", rows=120)  # enough for 64 + 32 rows, columns named as a reader's
    command = cell_with(cells, '"--model",\n    "tiny-bert",')
    mine = edited(command, "    profile.dataset,\n",
                  f'    "{path}",\n    "--text-column",\n    "review",\n    "--label-column",\n    "stars",\n')
    namespace = run_cells([mine], namespace)
    metrics = json.loads((namespace["out"] / "metrics.json").read_text())["final"]
    saved = json.loads((namespace["out"] / "model" / "config.json").read_text())
    assert metrics["examples"] == 64 and sorted(saved["id2label"].values()) == ["mixed", "neg", "pos"]


@pytest.mark.slow
def test_chapter_6_without_the_every_step_check_overflow_reads_as_frequent(capsys):
    cells, setup = chapter_cells("06_pitfalls.ipynb")
    diagnose = cell_with(cells, "def diagnose_scale_trace(")
    demo = cell_with(cells, 'broken, _ = scaled_run("fp16", ffn_scale=1e6')
    short = edited(edited(demo, "steps=30,", "steps=4,"), "micro_sizes=(4, 4)", "micro_sizes=(2, 2)")  # tiny sizes
    traces = [cell_with(cells, "def scaled_run("), short]
    mine = edited(diagnose, "if all(now < before for now, before in recent):", "if False:")  # the reader's edit
    namespace = run_cells([setup], {})
    capsys.readouterr()
    namespace = run_cells([mine, *traces], namespace)
    healthy, broken = capsys.readouterr().out.splitlines()
    page = run_cells([diagnose], {})["diagnose_scale_trace"]  # the page's reading of the same two traces
    assert broken.startswith("broken: ") and "Frequent overflows" in broken and "forward" not in broken
    assert "forward* pass overflows" in page(namespace["broken"], 2.0**16)
    assert healthy == "healthy: " + page(namespace["healthy"], 2.0**16)  # unchanged


@pytest.mark.slow
def test_chapter_6_the_guard_stays_silent_while_the_loss_stays_finite(capsys):
    cells, setup = chapter_cells("06_pitfalls.ipynb")
    batches = cell_with(cells, "batches = synthetic_batches(8, 8)").splitlines()[0]  # the plot cell's batches
    batches = edited(batches, "synthetic_batches(8, 8)", "synthetic_batches(2, 8)")  # tiny sizes: 12 steps
    guard = cell_with(cells, "tiny_training_run(batches, learning_rate=1e4)")
    namespace = run_cells([setup, batches], {})
    capsys.readouterr()
    run_cells([edited(guard, "learning_rate=1e4", "learning_rate=1e2")], namespace)  # the reader's edit
    assert capsys.readouterr().out == ""  # six epochs at 100, every loss finite: nothing to print
    run_cells([guard], namespace)  # the page's: stopped within a few steps
    assert capsys.readouterr().out.startswith("non-finite training state at optimizer step")


@pytest.mark.slow
def test_chapter_6_truncation_table_counts_a_readers_texts(tiny_bert, tmp_path, capsys):
    path = tmp_path / "my_texts.csv"  # 40 texts of 10 to 600 tokens: some longer than each limit
    rows = [(f"text {i}: " + "very " * (15 * i) + ("good" if i % 2 else "bad"), i % 2) for i in range(40)]
    pd.DataFrame(rows, columns=["text", "label"]).to_csv(path, index=False)
    cells, setup = chapter_cells("06_pitfalls.ipynb")
    lengths = cell_with(cells, "reviews = load_text_classification(profile.long_dataset")
    mine = edited(lengths, 'profile.long_dataset, "train", size=1000, seed=0', f'"{path}", "train"')
    namespace = run_cells([setup], {})
    capsys.readouterr()
    namespace = run_cells([mine], quiet(namespace))
    said = capsys.readouterr().out
    tokens = pd.Series([len(namespace["tokenizer"](text, verbose=False)["input_ids"]) for text, _ in rows])
    assert len(namespace["lengths"]) == len(rows)  # every text of the file, not 1,000 IMDb reviews
    assert said.startswith("read my_texts.csv: 40 rows")
    assert f"median review: {tokens.median():.0f} tokens" in said and f"longest {tokens.max()}\n" in said
    shares = [row["reviews truncated"] for row in namespace["rows"]]
    assert shares == [float((tokens > m).mean()) for m in (128, 256, 512)] and 0 < shares[-1] < shares[0] < 1


@pytest.fixture(scope="module")
def chapter_7_sizes():
    """Chapter 7's cells up to its sizes cell, that cell at tiny sizes: 2- and 4-layer BERTs 32 wide, 64 tokens, named
    as the page's two models (the cells below look them up by name). The cells, the namespace and the tiny cell."""
    from bertmem.model import tiny_bert_config

    cells, setup = chapter_cells("07_scaling_out.ipynb")
    tiny = {"bert-base-uncased": tiny_bert_config(), "bert-large-uncased": tiny_bert_config(num_hidden_layers=4)}

    def at_tiny_sizes(sizes_cell: str) -> str:
        return edited(edited(sizes_cell, "config = model_config(name)", "config = TINY[name]"), ", 512, ", ", 64, ")

    namespace = run_cells([setup, cell_with(cells, "def per_device_bytes(")], {"TINY": tiny})
    sizes = cell_with(cells, 'for name in ("bert-base-uncased", "bert-large-uncased"):')
    return cells, run_cells([at_tiny_sizes(sizes)], namespace), at_tiny_sizes


def chapter_7_curves(plot_cell: str, namespace: dict) -> dict[tuple[int, str], list[float]]:
    """The plotted memory per device, GiB by number of devices: (panel, curve's label) -> values."""
    import matplotlib.pyplot as plt

    axes = run_cells([plot_cell], quiet(dict(namespace)))["axes"]
    curves = {(panel, line.get_label()): [float(y) for y in line.get_ydata()]
              for panel, ax in enumerate(axes) for line in ax.get_lines() if line.get_label() != "activations alone"}
    plt.close("all")
    return curves


@pytest.mark.slow
def test_chapter_7_buckets_as_views_keep_the_ddp_curve_flat(chapter_7_sizes):
    cells, namespace, _ = chapter_7_sizes
    plot = cell_with(cells, "gradient_buckets=True,")
    page = chapter_7_curves(plot, namespace)
    views = chapter_7_curves(edited(plot, "gradient_buckets=True", "gradient_buckets=False"), namespace)
    ddp = "DDP (default buckets)"
    assert len(page) == len(views) == 8
    for panel in (0, 1):
        assert page[panel, ddp][1] > page[panel, ddp][0]  # the page's: a second gradient copy from two devices
        assert views[panel, ddp] == [page[panel, ddp][0]] * 5  # flat at the one-device value
    assert all(views[key] == values for key, values in page.items() if key[1] != ddp)


@pytest.mark.slow
def test_chapter_7_the_zero_papers_bytes_lower_every_curve_past_one_device(chapter_7_sizes):
    cells, namespace, _ = chapter_7_sizes
    plot = cell_with(cells, "gradient_buckets=True,")
    page = chapter_7_curves(plot, namespace)
    paper = chapter_7_curves(edited(plot, "gathered_params=unit,", "gathered_params=unit,\n"
                                    "                state=StateBytes(2, 2, 12),"), namespace)
    assert paper.keys() == page.keys() and len(page) == 8
    for key, before in page.items():
        assert paper[key][0] == pytest.approx(before[0])  # one device: 16 bytes per parameter either way
        assert all(after < was for after, was in zip(paper[key][1:], before[1:])), key
    for panel in (0, 1):
        drop = {label: page[panel, label][-1] - paper[panel, label][-1] for p, label in page if p == panel}
        assert max(drop, key=drop.get) == "ZeRO-1", drop  # at 16 devices


@pytest.mark.slow
def test_chapter_7_a_larger_micro_batch_adds_the_same_to_every_entry(chapter_7_sizes):
    from bertmem.core import GIB

    cells, namespace, at_tiny_sizes = chapter_7_sizes
    sizes = cell_with(cells, 'for name in ("bert-base-uncased", "bert-large-uncased"):')
    tables_cell = cell_with(cells, "rows = sharding_table(params, activations, counts, gathered_params=unit)")

    def tables(sizes_cell: str) -> tuple[dict, list[list[dict]]]:
        shown = []
        found = run_cells([at_tiny_sizes(sizes_cell), tables_cell], dict(namespace, display=shown.append))
        return found["setups"], [table.rows for table in shown if hasattr(table, "rows")]

    page_setups, page = tables(sizes)
    mine_setups, mine = tables(edited(sizes, "config, 8, 512", "config, 16, 512"))  # the reader's edit
    assert len(page) == len(mine) == 2
    for name, before, after in zip(page_setups, page, mine):
        grown = (mine_setups[name][1] - page_setups[name][1]) / GIB  # the activations
        assert grown > 0 and [row["strategy"] for row in after] == [row["strategy"] for row in before]
        for was, now in zip(before, after):
            assert all(now[k] - was[k] == pytest.approx(grown) for k in was if k != "strategy"), (name, was, now)


@pytest.mark.slow
def test_chapter_8_a_feed_forward_matrix_keeps_fewer_state_bytes_per_value():
    cells, setup = chapter_cells("08_below_the_floor.ipynb")
    shapes = cell_with(cells, "for shape in ((768,), (4095,), (4096,), (768, 768)):")
    mine = edited(shapes, "(768, 768)):", "(768, 768), (3072, 768)):")  # the reader's edit
    namespace = run_cells([setup], {})
    rows = {row["tensor shape"]: row for row in run_cells([mine], quiet(namespace))["rows"]}
    assert list(rows) == ["768", "4095", "4096", "768 × 768", "3072 × 768"]  # the page's four, then the new one
    square, wide = rows["768 × 768"], rows["3072 × 768"]
    assert wide["adamw"] == pytest.approx(8.0, abs=1e-3)
    assert wide["adamw8bit"] <= square["adamw8bit"] and wide["adafactor"] < square["adafactor"]


@pytest.mark.slow
def test_chapter_8_estimates_add_a_column_for_a_readers_card(tiny_model_dir):
    import inspect

    cells, setup = chapter_cells("08_below_the_floor.ipynb")
    rank = cell_with(cells, "lora_rank = 8  #")
    estimates = cell_with(cells, "for row in estimated_lever_rows(").split("\ndisplay(")[0]  # before its table
    mine = edited(estimates, "lora_rank=lora_rank", "lora_rank=lora_rank, cards_gb=(8, 16, 24)")  # the reader's edit
    tiny = edited(mine, 'for model in ("bert-base-uncased", "bert-large-uncased")', "for model in (TINY,)")
    namespace = run_cells([setup, rank], {"TINY": str(tiny_model_dir)})
    # at tiny sizes: one tiny random BERT, 64 tokens
    rows = run_cells([edited(tiny, "seq_len=512", "seq_len=64")], namespace)["estimates"]
    cards = [f"largest micro-batch, {card} GB" for card in (8, 16, 24)]
    assert [k for k in rows[0] if k.startswith("largest")] == cards and len(rows) == 6  # every lever, ZeRO-Offload too
    assert all(0 < row[cards[0]] <= row[cards[1]] <= row[cards[2]] for row in rows), rows
    # the page's call gives the columns of the default cards only
    assert inspect.signature(namespace["estimated_lever_rows"]).parameters["cards_gb"].default == (16, 24)


def test_chapter_9_cuts_a_readers_text_into_windows(tmp_path, capsys):
    path = tmp_path / "my_text.txt"  # a text of some 300 tokens: several windows
    path.write_text("My long letter begins here. " + " ".join(f"Sentence {i} goes on." for i in range(60)))
    cells, setup = chapter_cells("09_beyond_512.ipynb")
    demo = cell_with(cells, 'review = content_tokens(long_test["text"].iloc[:1], tokenizer)[0]')
    mine = edited(demo, 'long_test["text"].iloc[:1]', f'[open("{path}").read()]')  # the reader's edit
    namespace = run_cells([setup, cell_with(cells, "def split_windows(")], {})
    capsys.readouterr()
    namespace = run_cells([mine], namespace)
    first, *openings = capsys.readouterr().out.splitlines()
    window, stride = namespace["window"], namespace["stride"]
    n = len(namespace["tokenizer"](path.read_text(), add_special_tokens=False)["input_ids"])
    starts = namespace["window_starts"](n, window - 2, stride)
    assert len(starts) > 2 and len(openings) == 2
    assert first == f"{n + 2} tokens; windows of {window} every {stride} tokens of text start at {starts}"
    assert openings[0].startswith("[CLS] my long letter begins here")


def test_chapter_9b_a_readers_card_moves_the_room_and_what_fits():
    """The cell's 35 estimates (minutes of Python) stand in as made-up step peaks on both sides of the two cards'
    room for tensors: the item is about the budget the peaks are held against, not about the estimates."""
    import matplotlib.pyplot as plt

    cells, setup = chapter_cells("09b_what_long_inputs_cost.ipynb")
    figure = edited(cell_with(cells, "budget = PlanRequest()"),
                    "long_input_estimates(lengths, window=512, stride=default_stride(512))", "STAND_IN")
    mine = edited(figure, "budget = PlanRequest()", "budget = PlanRequest(memory_bytes=24 * 2**30)")  # the reader's
    fits = cell_with(cells, "fits, fit_tokens = {}, {}").split("\nconfig_1024 = ")[0]  # up to its own estimates
    peaks = {"small": (1, 2, 3, 4, 5), "growing": (4, 8, 18, 40, 90), "large": (30, 40, 50, 60, 70)}  # GiB
    stand_in = [{"reading": name, **dict(zip((512, 1024, 2048, 4096, 8192), gib))} for name, gib in peaks.items()]
    namespace = run_cells([setup], {"STAND_IN": stand_in})

    def room_and_fits(cell: str) -> tuple[float, dict[str, int]]:
        found = run_cells([cell, fits], quiet(dict(namespace)))
        (dashed,) = [line for line in found["ax"].get_lines() if line.get_linestyle() == "--"]
        plt.close("all")
        return float(dashed.get_ydata()[0]), found["fit_tokens"]

    (page_room, page_fits), (room, card_fits) = room_and_fits(figure), room_and_fits(mine)
    assert page_room < room < 24
    assert page_fits == {"small": 8192, "growing": 1024, "large": 0}  # a T4's room
    assert card_fits == {"small": 8192, "growing": 2048, "large": 0}


@pytest.mark.slow
def test_chapter_9b_windows_with_checkpointing_need_less_memory():
    """The cell's windows estimate alone, at tiny sizes: a 2-layer BERT 32 wide for bert-base, at the micro-batch of
    13 that chapter 1 finds behind the post's 10 GB (the cell's own estimates of that batch, and of one sequence,
    are not what the edit changes)."""
    import textwrap

    from bertmem.model import tiny_bert_config

    cells, setup = chapter_cells("09b_what_long_inputs_cost.ipynb")
    cell = cell_with(cells, "post_batch = batch_for_peak(")
    start, end = cell.index("    per_review = window_count("), cell.index('\nat_post_batch["checkpointing"]')
    part = textwrap.dedent(cell[start:end])  # two statements of the cell's `with` block
    windows = '"bert-base-uncased", post_batch * per_review, 512, precision="fp32"'
    mine = edited(part, windows, windows + ", gradient_checkpointing=True")  # the reader's edit
    namespace = run_cells([setup], {"TINY": tiny_bert_config(max_position_embeddings=512), "post_batch": 13})

    def windows_peak(source: str) -> int:
        tiny = edited(source, '"bert-base-uncased", post_batch', "TINY, post_batch")
        found = run_cells([tiny], dict(namespace))
        assert found["per_review"] == 3  # 1,024 tokens: three windows of 512
        return found["windowed"].step_peak

    assert windows_peak(mine) < windows_peak(part)
