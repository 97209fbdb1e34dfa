"""The Colab install cell: one template in every notebook, the configured repository at the release tag, and a cell
that explains itself (what it installs, how long it took, a one-sentence failure, a restart only when needed)."""

import contextlib
import io
import json
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

from sync_install_cell import INSTALL, configured_url, install_cell, release_tag  # noqa: E402


def install_cells() -> dict[str, dict]:
    cells = {}
    for path in sorted((ROOT / "book").glob("*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            source = "".join(cell["source"])
            if "google.colab" in source and "pip" in source:
                cells[path.name] = cell
    return cells


def test_every_notebook_has_the_one_install_cell_for_the_configured_repository_and_release():
    cells = install_cells()
    assert len(cells) == len(list((ROOT / "book").glob("*.ipynb")))
    for name, cell in cells.items():
        source = "".join(cell["source"])
        assert source == install_cell(), f"{name}: run python scripts/sync_install_cell.py"
        found = [(m.group("url"), m.group("ref")) for m in INSTALL.finditer(source)]
        assert found == [(configured_url(), release_tag())], name
        assert "[cpu-model]" not in source, f"{name}: the GPU profile does not need the CPU model package"
        assert cell["metadata"].get("tags") == ["remove-cell"], f"{name}: not on the website"


def test_package_metadata_names_the_same_repository():
    homepage = re.search(r'^Homepage = "(.+)"', (ROOT / "pyproject.toml").read_text(), flags=re.MULTILINE)
    assert homepage and homepage.group(1) == configured_url()


def test_the_sync_script_rewrites_a_forked_url(tmp_path):
    for name in ("book", "scripts"):
        subprocess.run(["cp", "-r", str(ROOT / name), str(tmp_path)], check=True)
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    (tmp_path / "_config.yml").write_text((ROOT / "_config.yml").read_text().replace(
        configured_url(), "https://github.com/someone/fork"))
    done = subprocess.run([sys.executable, str(tmp_path / "scripts" / "sync_install_cell.py")],
                          capture_output=True, text=True, check=True)
    assert "someone/fork" in done.stdout
    for path in (tmp_path / "book").glob("*.ipynb"):
        text = path.read_text()
        assert f"git+https://github.com/someone/fork@{release_tag()}" in text and configured_url() not in text


def run_cell(monkeypatch, pip_result: subprocess.CompletedProcess, imported: tuple[str, ...] = ()) -> str:
    """Execute the install cell as Colab would, with pip replaced by `pip_result`; what it printed."""
    calls = []
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    for name in ("bertmem", "bitsandbytes", "peft"):  # a fresh Colab session has imported none of them
        monkeypatch.delitem(sys.modules, name, raising=False)
    for name in imported:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    real_find_spec = __import__("importlib.util").util.find_spec
    monkeypatch.setattr("importlib.util.find_spec",
                        lambda name, *a: None if name == "bertmem" else real_find_spec(name))
    monkeypatch.setattr(subprocess, "run", lambda command, **kwargs: calls.append(command) or pip_result)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(install_cell(), {})
    assert calls and calls[0][1:4] == ["-m", "pip", "install"] and calls[0][-1].endswith(f"@{release_tag()}")
    return out.getvalue()


def test_the_install_cell_says_what_it_added_and_asks_for_no_restart_when_nothing_imported_changed(monkeypatch):
    ok = subprocess.CompletedProcess([], 0, stdout="Successfully installed bertmem-0.2.0 bitsandbytes-0.49.1\n",
                                     stderr="")
    printed = run_cell(monkeypatch, ok)
    assert "pip install bertmem @ git+" in printed and "installed: bertmem, bitsandbytes" in printed
    assert re.search(r"done in \d+ s", printed) and "Restart" not in printed


def test_the_install_cell_asks_for_a_restart_when_pip_changed_an_imported_module(monkeypatch):
    changed = subprocess.CompletedProcess([], 0, stdout="Successfully installed bertmem-0.2.0 peft-0.20.1\n",
                                          stderr="")
    printed = run_cell(monkeypatch, changed, imported=("peft",))
    assert "Restart the session" in printed and "peft" in printed.split("Restart the session")[1]


def test_a_failed_install_ends_in_one_sentence_with_the_fix(monkeypatch):
    failed = subprocess.CompletedProcess([], 1, stdout="", stderr="...\nERROR: Could not find a version that "
                                         "satisfies the requirement bertmem\nnote: this error comes from pip\n")
    with pytest.raises(SystemExit, match=r"pip could not install bertmem \(ERROR: Could not find .*\): check the"
                                         r" runtime's connection and the release tag .*run this cell again"):
        run_cell(monkeypatch, failed)


def test_the_recorded_colab_stack_result_is_for_this_pyproject_and_passed():
    """`make colab-stack` records what happened on Colab's image; a changed pyproject.toml needs a new record."""
    import hashlib

    result = ROOT / "results" / "colab-stack.md"
    assert result.is_file(), "run make colab-stack and commit results/colab-stack.md"
    text = result.read_text(encoding="utf-8")
    recorded = re.search(r"pyproject\.toml sha256: `(\w+)`", text)
    current = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]
    assert recorded and recorded.group(1) == current, "pyproject.toml changed since make colab-stack: run it again"
    assert "**Replaced, upgraded or downgraded:** nothing" in text
    added = re.search(r"\*\*`pip install` of bertmem added:\*\* (.+)\.", text).group(1)
    assert "bertmem" in added and "torch" not in added and "transformers" not in added
    tests_line = re.search(r"\*\*Unit tests on this stack:\*\* (.+)", text).group(1)
    assert " passed" in tests_line and " failed" not in tests_line and " error" not in tests_line


def test_colab_stack_finds_what_pip_changed():
    sys.path.insert(0, str(ROOT / "scripts"))
    from colab_stack import changes, colab_pins, normalize

    added, changed = changes({"torch": "2.11.0", "peft": "0.20.0"},
                             {"torch": "2.11.0", "peft": "0.21.0", "bertmem": "0.2.0"})
    assert added == {"bertmem": "0.2.0"} and changed == {"peft": ("0.20.0", "0.21.0")}
    pins = colab_pins()
    assert pins["torch"] == "2.11.0" and pins["transformers"] == "5.15.0" and pins["peft"] == "0.20.0"
    assert not any(name.startswith("nvidia-") for name in pins)  # CUDA libraries follow PyPI's torch build
    assert normalize("Huggingface_Hub") == "huggingface-hub"
