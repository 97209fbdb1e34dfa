"""Edit the cell, change the result: each chapter's result is computed by the definitions its page shows. Each test
runs the chapter's own result cell at tiny sizes, once with the page's definition and once with an edited copy (a
reader's edit), and asserts that the result changes. Pointed back at the package's copy, the run would not see the
edit, and the test fails."""

import dataclasses

import pytest

from bertmem.book import chapter_settings
from bertmem.core import seed_everything
from bertmem.experiments import FULL
from bertmem.model import load_tokenizer
from bertmem.profiles import get_profile
from notebook_cells import cell_with, code_cells, definitions_only, edited, run_cells

pytestmark = pytest.mark.slow  # real MiniLM runs, seconds each


@pytest.fixture
def tiny_settings(tmp_path, synthetic_frame):
    """chapter_settings with the chapter's recipe on 16 rows of a small file, one seed."""
    path = tmp_path / "reviews.csv"
    synthetic_frame.to_csv(path, index=False)

    def settings(chapter, profile):
        data, recipe, _ = chapter_settings(chapter, profile)
        data = dataclasses.replace(data, dataset=str(path), train_size=16, eval_size=8, max_length=16,
                                   micro_batch=8)
        return data, recipe, (0,)
    return settings


def chapter_cells(notebook: str) -> tuple[list[str], str]:
    """A chapter's code cells and its setup cell (imports, profile, setup line)."""
    cells = code_cells(notebook)
    return cells, cell_with(cells, f'print(setup_line("{notebook[:2]}", profile))')


def test_chapter_4_sweep_runs_the_pages_groups(tiny_settings):
    cells, setup = chapter_cells("04_layerwise_lr_decay.ipynb")
    groups = cell_with(cells, "def layerwise_param_groups(")
    sweep = cell_with(cells, "for alpha in (1.0, 0.95, 0.9):\n    for seed in seeds:")

    def table(definitions: str) -> list[tuple]:
        namespace = run_cells([setup, definitions], {})
        profile = dataclasses.replace(get_profile("cpu", env={}), epochs=1)
        namespace.update(profile=profile, chapter_settings=tiny_settings,
                         tokenizer=load_tokenizer(profile.model_id))
        runs = run_cells([sweep], namespace)["runs"]
        return [(r["alpha"], r["seed"], round(r["eval_loss"], 6)) for r in runs]

    page = table(groups)
    # a reader's edit: every group's rate ten times higher
    faster = table(edited(groups, '"lr": base_lr * group_lr_scale(', '"lr": 10 * base_lr * group_lr_scale('))
    assert len(page) == 3 and [r[:2] for r in page] == [r[:2] for r in faster]
    assert all(a[2] != b[2] for a, b in zip(page, faster)), (page, faster)


def test_chapter_9_reads_and_pools_with_the_pages_windows():
    from bertmem.data import load_text_classification, long_subset
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
