import pytest
import torch

from bertmem.core.runtime import seed_everything
from bertmem.model.loading import MINILM_ID
from bertmem.profiles import Profile, get_profile


def test_cpu_profile_defaults():
    p = get_profile("cpu", env={})
    assert p.model_id == MINILM_ID and p.max_length == 256 and p.device == "cpu"
    assert p.train_size is not None and p.eval_size is not None


def test_gpu_profile_is_t4_sized_and_full_profile_is_the_whole_dataset():
    gpu, full = get_profile("gpu", env={}), get_profile("full", env={})
    assert (gpu.model_id, gpu.dataset, gpu.max_length, gpu.effective_batch) == ("bert-base-uncased", "imdb", 512, 32)
    assert gpu.train_size is not None and gpu.train_size <= 5000 and gpu.epochs == 1
    assert (full.model_id, full.max_length, full.train_size, full.eval_size, full.epochs) == (
        "bert-base-uncased", 512, None, None, 2)
    assert "effective_batch=32" in full.defaults_line() and "dataset" not in full.describe()


def test_environment_overrides_each_field():
    env = {"BERTMEM_MODEL_ID": "my/model", "BERTMEM_DATASET": "sst2", "BERTMEM_MAX_LENGTH": "64",
           "BERTMEM_TRAIN_SIZE": "all", "BERTMEM_EVAL_SIZE": "100", "BERTMEM_LEARNING_RATE": "3e-5"}
    p = get_profile("cpu", env=env)
    assert (p.model_id, p.dataset, p.max_length, p.train_size, p.eval_size, p.learning_rate) == (
        "my/model", "sst2", 64, None, 100, 3e-5)


def test_profile_chosen_by_environment_variable():
    assert get_profile(env={"BERTMEM_PROFILE": "gpu"}).name == "gpu"
    assert get_profile(env={"BERTMEM_PROFILE": "FULL"}).name == "full"
    assert get_profile(env={"BERTMEM_PROFILE": "gpu", "BERTMEM_EFFECTIVE_BATCH": "64"}).effective_batch == 64


@pytest.mark.parametrize("env, message", [({"BERTMEM_MAX_LENGTH": "abc"}, "BERTMEM_MAX_LENGTH"),
                                          ({"BERTMEM_MICRO_BATCH": "0"}, "micro_batch"),
                                          ({"BERTMEM_PROFILE": "tpu"}, "unknown profile")])
def test_bad_overrides_are_clear_errors(env, message):
    with pytest.raises(ValueError, match=message):
        get_profile(env=env)


def test_profile_validation():
    with pytest.raises(ValueError, match="learning_rate"):
        Profile("cpu", "m", "imdb", 8, 1, 10, 10, 1, 0.0, "cpu")


def test_seed_everything_repeats_random_draws():
    seed_everything(3)
    a = torch.rand(3)
    seed_everything(3)
    assert torch.equal(a, torch.rand(3))
    with pytest.raises(ValueError):
        seed_everything(-1)


@pytest.mark.slow
def test_get_profile_imports_tqdm_auto_without_the_ipywidgets_warning():
    """In a Jupyter kernel without ipywidgets, tqdm.auto warns with the site-packages path on first import."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("from bertmem.profiles import get_profile\nprofile = get_profile('cpu', env={})"),
        nbformat.v4.new_code_cell("import tqdm.auto\nimport transformers.utils.logging")])
    NotebookClient(notebook, timeout=120, kernel_name="python3").execute()
    printed = "".join(o.get("text", "") for cell in notebook.cells for o in cell.outputs)
    assert "IProgress" not in printed and "site-packages" not in printed


@pytest.mark.slow
def test_progress_leaves_one_final_line_in_an_executed_notebook():
    """Without ipywidgets every redraw of a text bar stays in the saved output; only the last one may."""
    import nbformat
    from nbclient import NotebookClient

    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "import time\nfrom bertmem.core.runtime import progress\n"
        "for _ in progress(range(30), 'loop', mininterval=0.0):\n    time.sleep(0.01)")])
    NotebookClient(notebook, timeout=120, kernel_name="python3").execute()
    printed = "".join(o.get("text", "") for o in notebook.cells[0].outputs)
    states = [s for s in printed.replace("\r", "\n").split("\n") if s.strip()]
    assert len(states) == 1 and "30/30" in states[0], printed


def test_runs_go_where_colabs_file_browser_shows_them(tmp_path, monkeypatch):
    """On Colab a chapter's run lands under /content (visible, kept while the session lives), not in /tmp; elsewhere
    in one folder under the temporary folder, the same on every run."""
    import sys
    import tempfile
    import types

    from bertmem.core.runtime import output_folder, where_runs_live

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    elsewhere = output_folder("a1")
    assert elsewhere == tmp_path / "tmp" / "bertmem-runs" / "a1" and elsewhere.is_dir()
    assert output_folder("a1") == elsewhere  # a rerun writes where the last run did (and replaces it)
    assert "reset" not in where_runs_live(elsewhere)  # not on Colab: nothing to warn about
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    content = tmp_path / "content"
    on_colab = output_folder("a1", content=content)
    assert on_colab == content / "bertmem-runs" / "a1" and on_colab.is_dir()
    assert "wipes" in where_runs_live(on_colab, content) and "drive.mount" in where_runs_live(on_colab, content)


def test_with_drive_mounted_runs_go_where_a_reset_cannot_reach_them(tmp_path, monkeypatch):
    """A faked Colab: /content/drive/MyDrive present -> runs go to Drive, and the sentence says a reset cannot
    reach them; a folder elsewhere on the runtime is still called wiped."""
    import sys
    import types

    from bertmem.core.runtime import output_folder, where_runs_live

    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    content = tmp_path / "content"
    (content / "drive" / "MyDrive").mkdir(parents=True)
    folder = output_folder("bench", content=content)
    assert folder == content / "drive" / "MyDrive" / "bertmem-runs" / "bench" and folder.is_dir()
    assert "cannot wipe" in where_runs_live(folder, content) and "flush_and_unmount" in where_runs_live(folder, content)
    assert "wipes" in where_runs_live(content / "runs", content)


def test_the_setup_line_names_what_the_environment_set_and_nothing_the_chapter_does_not_read():
    chosen = get_profile("cpu", env={"BERTMEM_DATASET": "sst2", "BERTMEM_MAX_LENGTH": "64"})
    assert chosen.overridden == {"dataset", "max_length"}
    assert chosen.describe().endswith("(set by the environment: dataset, max_length)")
    plain = get_profile("cpu", env={})
    assert plain.overridden == frozenset() and "set by the environment" not in plain.describe()
    assert "dataset=" not in plain.describe() and "dataset=imdb" in plain.defaults_line()
