"""`make gpu-check`'s script, run on the CPU against small notebooks (the real run needs a GPU)."""

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.py"


def notebook(path: Path, *sources: str) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in sources]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nbformat.write(nb, path)
    return path


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the refusal is not shown")
def test_gpu_check_refuses_to_run_without_a_gpu(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), "--output", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 2 and "needs a CUDA GPU" in done.stderr and not list(tmp_path.iterdir())


@pytest.mark.slow
def test_gpu_check_records_each_chapter_and_its_errors(tmp_path):
    good = notebook(tmp_path / "good.ipynb", "x = sum(range(10))", "print(x)")
    bad = notebook(tmp_path / "bad.ipynb", "raise ValueError('broken chapter')")
    one_thread = notebook(tmp_path / "threads.ipynb", "import torch\nassert torch.get_num_threads() == 1")
    # two at a time (CI's dry run): each kernel with one torch thread, the records in the order asked
    done = subprocess.run([sys.executable, str(SCRIPT), "--allow-cpu", "--jobs", "2", "--output",
                           str(tmp_path / "out"), str(good), str(bad), str(one_thread)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr[-2000:]  # one chapter failed
    result = json.loads((tmp_path / "out" / "cpu.json").read_text())
    assert [c["notebook"] for c in result["chapters"]] == ["good.ipynb", "bad.ipynb", "threads.ipynb"]
    assert result["jobs"] == 2 and result["chapters"][2]["error"] is None, result["chapters"][2]
    chapters = {c["notebook"]: c for c in result["chapters"]}
    assert chapters["good.ipynb"]["error"] is None and chapters["good.ipynb"]["wall_time_s"] > 0
    assert chapters["good.ipynb"]["torch"] == torch.__version__ and chapters["good.ipynb"]["gpu"] == "cpu"
    assert "broken chapter" in chapters["bad.ipynb"]["error"]
    assert result["planner"]["estimate_step_peak_bytes"] > 0
    assert "| good.ipynb |" in (tmp_path / "out" / "cpu.md").read_text()


@pytest.mark.slow
def test_dry_run_executes_under_the_shrunken_gpu_profile_on_the_cpu(tmp_path):
    probe = notebook(tmp_path / "probe.ipynb",
                     "from bertmem.profiles import get_profile\np = get_profile()\n"
                     "assert (p.name, p.device, p.train_size, p.max_length) == ('gpu', 'cpu', 16, 64), p",
                     "from IPython.display import display\nraise RuntimeError('\\x1b[31mcoloured\\x1b[0m failure')")
    done = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--output", str(tmp_path / "out"), str(probe)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr[-2000:]
    record = json.loads((tmp_path / "out" / "dry-run.json").read_text())["chapters"][0]
    # the first cell passed (the profile is the GPU one, shrunk, on the CPU); the second failed, without colours
    assert record["error"] == "CellExecutionError: RuntimeError: coloured failure", record["error"]
    assert "probe.ipynb: " in done.stdout


@pytest.mark.slow
def test_the_dry_run_can_run_as_the_other_kind_of_cpu(tmp_path):
    """`--cpu-bf16 other`: a machine with native bf16 runs the chapters as one without, and the reverse."""
    from bertmem.core.devices import native_cpu_bf16

    probe = notebook(tmp_path / "probe.ipynb", "from bertmem.loop import choose_precision\n"
                     "print(choose_precision('auto', 'cpu', verbose=False).precision)")
    done = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--cpu-bf16", "other", "--output",
                           str(tmp_path / "out"), str(probe)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"BERTMEM_CPU_BF16={0 if native_cpu_bf16() else 1}" in done.stdout
    record = json.loads((tmp_path / "out" / "dry-run.json").read_text())["chapters"][0]
    assert record["cpu_bf16"] is (not native_cpu_bf16())


@pytest.mark.slow
def test_the_dry_run_can_give_every_chapter_a_multi_class_file(tmp_path):
    """`--classes 5`: every chapter's dataset is a generated skewed 5-class file (no chapter may assume two)."""
    probe = notebook(tmp_path / "probe.ipynb",
                     "from bertmem.data import load_text_classification\nfrom bertmem.profiles import get_profile\n"
                     "p = get_profile()\nframe = load_text_classification(p.dataset, 'train')\n"
                     "counts = frame['label'].value_counts()\n"
                     "assert p.dataset.endswith('tickets-5-classes.csv') and len(counts) == 5, p.dataset\n"
                     "assert counts.max() > 3 * counts.min(), counts  # skewed")
    done = subprocess.run([sys.executable, str(SCRIPT), "--dry-run", "--classes", "5", "--output",
                           str(tmp_path / "out"), str(probe)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "every chapter reads tickets-5-classes.csv (5 skewed classes)" in done.stdout


@pytest.mark.slow
def test_as_a_t4_the_chapters_see_a_t4s_capability_and_the_cap_is_recorded(tmp_path):
    probe = notebook(tmp_path / "probe.ipynb",
                     "import os\nassert os.environ['BERTMEM_CUDA_CAPABILITY'] == '7.5'\n"
                     "from bertmem.loop.precision import choose_precision\n"
                     "assert choose_precision('auto', 'cuda', capability=(7, 5), verbose=False).precision == 'fp16'")
    done = subprocess.run([sys.executable, str(SCRIPT), "--allow-cpu", "--as-t4", "--output", str(tmp_path / "out"),
                           str(probe)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads((tmp_path / "out" / "cpu-as-a-T4.json").read_text())
    assert result["gpu"] == "cpu as a T4" and result["chapters"][0]["error"] is None
    assert "reserved peak (GiB)" in (tmp_path / "out" / "cpu-as-a-T4.md").read_text()


def test_a_t4_cap_is_a_t4s_memory_less_the_context_and_refuses_a_context_not_measured():
    from bertmem.core.units import MIB
    from bertmem.experiments.gpu_calibration import T4_USABLE_MIB, cap_for

    assert cap_for(T4_USABLE_MIB, 769 * MIB) == (15360 - 769) * MIB  # A3's median context
    for context in (0, 50 * MIB, 5000 * MIB, -10 * MIB):  # NVML unread, or memory still being released
        with pytest.raises(ValueError, match="run again in a fresh process"):
            cap_for(T4_USABLE_MIB, context)


def test_free_memory_is_answered_within_a_process_cap(monkeypatch):
    """Under --as-t4 the allocator is capped, which mem_get_info does not see: the planner must."""
    from bertmem.core import devices
    from bertmem.core.units import GIB

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (70 * GIB, 80 * GIB))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 2 * GIB)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 1 * GIB)
    monkeypatch.delenv(devices.MEMORY_CAP_ENV, raising=False)
    assert devices.cuda_free_bytes("cuda") == 71 * GIB  # free + what the allocator caches unused
    monkeypatch.setenv(devices.MEMORY_CAP_ENV, str(14 * GIB))
    assert devices.cuda_free_bytes("cuda") == (14 - 2) * GIB + 1 * GIB  # the cap less what is reserved, + cached
