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

import release  # noqa: E402
from release import dependencies_hash  # noqa: E402
from sync_install_cell import INSTALL, add_colab_metadata, configured_url, install_cell, release_tag  # noqa: E402


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
    for name in ("pyproject.toml", "README.md"):
        (tmp_path / name).write_text((ROOT / name).read_text())
    (tmp_path / "_config.yml").write_text((ROOT / "_config.yml").read_text().replace(
        configured_url(), "https://github.com/someone/fork"))
    done = subprocess.run([sys.executable, str(tmp_path / "scripts" / "sync_install_cell.py")],
                          capture_output=True, text=True, check=True)
    assert "someone/fork" in done.stdout
    owner, name = configured_url().split("/")[-2:]
    for path in (tmp_path / "book").glob("*.ipynb"):
        text = path.read_text()
        assert f"git+https://github.com/someone/fork@{release_tag()}" in text and configured_url() not in text
        assert f"colab.research.google.com/github/someone/fork/blob/main/book/{path.name}" in text
        assert f"github/{owner}/{name}/" not in text
    readme = (tmp_path / "README.md").read_text()
    assert f"git+https://github.com/someone/fork@{release_tag()}" in readme
    assert "git clone https://github.com/someone/fork && cd fork" in readme
    assert "https://someone.github.io/fork/book/00_baseline.html" in readme
    assert "colab.research.google.com/github/someone/fork/blob/main/book/00_baseline.ipynb" in readme
    assert configured_url() not in readme and f"{owner}.github.io" not in readme


def run_cell(monkeypatch, pip_result: subprocess.CompletedProcess, imported: tuple[str, ...] = (),
             calls: list | None = None, then: subprocess.CompletedProcess | None = None) -> str:
    """Execute the install cell as Colab would, with pip replaced by `pip_result` (and `then` for a second call);
    what it printed."""
    calls = [] if calls is None else calls
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    for name in ("bertmem", "bitsandbytes", "peft"):  # a fresh Colab session has imported none of them
        monkeypatch.delitem(sys.modules, name, raising=False)
    for name in imported:
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    real_find_spec = __import__("importlib.util").util.find_spec
    monkeypatch.setattr("importlib.util.find_spec",
                        lambda name, *a: None if name == "bertmem" else real_find_spec(name))
    monkeypatch.setattr(subprocess, "run",
                        lambda command, **kwargs: calls.append(command) or (then if then and calls[1:] else pip_result))
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
    """`make colab-stack` records what happened on Colab's image; changed dependencies need a new record (a new
    version number alone does not: it changes nothing pip resolves)."""
    result = ROOT / "results" / "colab-stack.md"
    assert result.is_file(), "run make colab-stack and commit results/colab-stack.md"
    text = result.read_text(encoding="utf-8")
    recorded = re.search(r"pyproject\.toml sha256 \(what the install cell resolves: [^)]*\): `(\w+)`", text)
    assert recorded and recorded.group(1) == dependencies_hash(), "pyproject.toml changed since make colab-stack"
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


# The version moves with the source; a release is a tag the install cell can install

def test_the_recorded_version_is_this_source_and_this_pyproject():
    assert release.problems() == [], "run python scripts/release.py bump"
    assert release_tag() == "v" + release.read_record()["version"]


def fake_project(tmp_path: Path, version: str = "1.2.3") -> tuple[Path, Path, Path]:
    """A package folder, a pyproject.toml and a record of both, as release.py keeps them."""
    source = tmp_path / "src" / "bertmem"
    source.mkdir(parents=True)
    (source / "loop.py").write_text("def train():\n    return 1\n")
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text(f'[project]\nname = "bertmem"\nversion = "{version}"\ndependencies = ["torch"]\n')
    record = tmp_path / "release.json"
    record.write_text(json.dumps({"version": version, "source_sha256": release.source_hash(source, pyproject)}))
    return source, pyproject, record


def test_a_changed_source_needs_a_new_version(tmp_path):
    source, pyproject, record = fake_project(tmp_path)
    assert release.problems(record, source, pyproject) == []
    (source / "loop.py").write_text("def train():\n    return 2\n")
    assert "run python scripts/release.py bump" in release.problems(record, source, pyproject)[0]
    (source / "__pycache__").mkdir()  # caches are not source
    (source / "__pycache__" / "loop.cpython-313.pyc").write_bytes(b"\0")
    assert release.source_files(source) == [source / "loop.py"]


def test_a_new_version_alone_changes_no_dependency_and_a_new_dependency_does(tmp_path):
    _, pyproject, _ = fake_project(tmp_path)
    text = pyproject.read_text()
    assert dependencies_hash(text) == dependencies_hash(text.replace('"1.2.3"', '"1.3.0"'))
    assert dependencies_hash(text) != dependencies_hash(text.replace('["torch"]', '["torch", "numpy"]'))
    # an extra the install cell never installs (a test tool) changes nothing it resolves
    assert dependencies_hash(text) == dependencies_hash(text + '[project.optional-dependencies]\ntest = ["pytest"]\n')
    assert release.next_version("1.2.3") == "1.2.4" and release.next_version("1.2.3", "minor") == "1.3.0"


def test_bump_writes_a_new_version_its_record_and_the_install_cells(tmp_path, monkeypatch):
    source, pyproject, record = fake_project(tmp_path)
    (source / "loop.py").write_text("def train():\n    return 2\n")
    synced = []
    monkeypatch.setattr(release, "SOURCE", source)
    monkeypatch.setattr(release, "PYPROJECT", pyproject)
    monkeypatch.setattr(release, "RECORD", record)
    monkeypatch.setattr(release.sync_install_cell, "main", lambda: synced.append(True))
    assert release.bump("minor") == "1.3.0" and synced == [True]
    assert 'version = "1.3.0"' in pyproject.read_text()
    assert release.problems(record, source, pyproject, book=tmp_path) == []
    with pytest.raises(SystemExit, match="nothing changed since version 1.3.0"):
        release.bump()  # a version is a change of the source, not of the record
    record.unlink()  # no record yet: the next version after pyproject's
    assert release.bump() == "1.3.1" and release.read_record(record)["version"] == "1.3.1"
    with pytest.raises(SystemExit, match="not MAJOR.MINOR.PATCH"):
        release.next_version("1.0.0rc1")


def test_any_other_failure_mentioning_the_tag_still_stops_the_cell(monkeypatch):
    conflict = subprocess.CompletedProcess([], 1, stdout="", stderr=f"ERROR: Cannot install bertmem @ git+"
                                           f"{configured_url()}@{release_tag()} because of conflicting dependencies\n")
    calls = []
    with pytest.raises(SystemExit, match="pip could not install bertmem"):
        run_cell(monkeypatch, conflict, calls=calls)
    assert len(calls) == 1  # no silent install of another source


def test_a_version_not_yet_tagged_installs_the_default_branch_and_says_so(monkeypatch):
    missing = subprocess.CompletedProcess([], 1, stdout="", stderr=f"error: pathspec '{release_tag()}' did not match "
                                          "any file(s) known to git\nERROR: git checkout did not run successfully\n")
    ok = subprocess.CompletedProcess([], 0, stdout="Successfully installed bertmem-0.3.0\n", stderr="")
    calls = []
    printed = run_cell(monkeypatch, missing, calls=calls, then=ok)
    assert f"{release_tag()} is not tagged yet: installing the default branch" in printed
    assert len(calls) == 2 and calls[1][-1] == f"bertmem @ git+{configured_url()}" and "installed: bertmem" in printed


@pytest.mark.slow
def test_the_release_workflow_steps_give_the_tag_and_a_wheel_of_this_version(tmp_path):
    """What .github/workflows/release.yml runs, here (offline: the build backend already installed)."""
    workflow = (ROOT / ".github" / "workflows" / "release.yml").read_text(encoding="utf-8")
    assert "python scripts/release.py check" in workflow
    assert "python -m pip wheel --no-deps --wheel-dir dist ." in workflow
    tag = subprocess.run([sys.executable, "scripts/release.py", "check"], cwd=ROOT, capture_output=True, text=True)
    assert tag.returncode == 0 and tag.stdout.strip() == release_tag(), tag.stderr
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--wheel-dir",
                    str(tmp_path), str(ROOT)], check=True, capture_output=True)
    wheels = list(tmp_path.glob("bertmem-*.whl"))
    assert [w.name.split("-")[1] for w in wheels] == [release_tag()[1:]]


def test_a_failed_git_clone_shows_gits_own_line_not_pips_last(monkeypatch):
    """pip's last words after a failed clone only say that a subprocess failed; git's `fatal:` line says why."""
    failed = subprocess.CompletedProcess([], 1, stdout="  Running command git clone --filter=blob:none\n",
                                         stderr="  fatal: repository 'https://github.com/x/y/' not found\n"
                                         "  error: subprocess-exited-with-error\n  × git clone did not run "
                                         "successfully.\n  │ exit code: 128\nnote: This error originates from a "
                                         "subprocess, and is likely not a problem with pip.\nERROR: git clone failed\n")
    with pytest.raises(SystemExit) as stopped:
        run_cell(monkeypatch, failed)
    assert "(fatal: repository 'https://github.com/x/y/' not found)" in str(stopped.value)
    assert "originates from a subprocess" not in str(stopped.value)


@pytest.mark.parametrize("installed", [True, False])
def test_off_colab_the_cell_installs_nothing_and_without_bertmem_says_how(monkeypatch, installed):
    monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    real_find_spec = __import__("importlib.util").util.find_spec
    monkeypatch.setattr("importlib.util.find_spec",
                        lambda name, *a: (real_find_spec(name) if installed or name != "bertmem" else None))
    calls = []
    monkeypatch.setattr(subprocess, "run", lambda command, **kwargs: calls.append(command))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        if installed:
            exec(install_cell(), {})
        else:
            with pytest.raises(SystemExit, match=rf'run pip install "bertmem @ git\+{configured_url()}@'
                                                 rf'{release_tag()}" in its environment.*then restart it'):
                exec(install_cell(), {})
    assert calls == [] and out.getvalue() == ""


def test_every_notebook_asks_colab_for_a_t4_runtime():
    for path in sorted((ROOT / "book").glob("*.ipynb")):
        metadata = json.loads(path.read_text(encoding="utf-8"))["metadata"]
        assert metadata.get("accelerator") == "GPU" and metadata.get("colab", {}).get("gpuType") == "T4", (
            f"{path.name}: run python scripts/sync_install_cell.py")
        assert "kernelspec" in metadata  # added to, not replaced
    notebook = {"metadata": {"kernelspec": {"name": "python3"}, "colab": {"name": "mine.ipynb"}}}
    assert add_colab_metadata(notebook)
    assert notebook["metadata"] == {"kernelspec": {"name": "python3"}, "accelerator": "GPU",
                                    "colab": {"name": "mine.ipynb", "gpuType": "T4", "provenance": []}}
    assert not add_colab_metadata(notebook)  # once is enough
