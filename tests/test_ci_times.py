"""scripts/ci_times.py: every test's time under two workers, the slowest per file, and the over-budget warning."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import ci_times  # noqa: E402


@pytest.mark.slow
def test_two_workers_report_every_tests_time_to_the_json(tmp_path):
    (tmp_path / "test_a.py").write_text("import time\n\ndef test_slow():\n    time.sleep(0.6)\n\n"
                                        "def test_fast():\n    pass\n")
    (tmp_path / "test_b.py").write_text("import time\n\ndef test_middling():\n    time.sleep(0.3)\n")
    out = tmp_path / "times" / "unit.json"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "scripts")}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "ci_times", "--times-json", str(out), "-n", "2",
                           "-p", "no:cacheprovider", "-q", "test_a.py", "test_b.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:]
    assert "time per file (2 files" in done.stdout
    times = json.loads(out.read_text())
    assert set(times["tests"]) == {"test_a.py::test_slow", "test_a.py::test_fast", "test_b.py::test_middling"}
    assert times["tests"]["test_a.py::test_slow"] >= 0.6 > times["tests"]["test_a.py::test_fast"]
    assert times["files"]["test_a.py"] == pytest.approx(sum(v for k, v in times["tests"].items()
                                                            if k.startswith("test_a.py")))


def test_a_stage_over_its_budget_names_its_slowest_items(tmp_path):
    tests = {f"tests/test_{i}.py::test_x": float(i) for i in range(30)}
    (tmp_path / "unit.json").write_text(json.dumps({"tests": tests, "files": ci_times.per_file(tests)}))
    assert ci_times.over_budget("unit", 480, 480, tmp_path) == ""
    warning = ci_times.over_budget("unit", 481, 480, tmp_path).splitlines()
    assert warning[0] == "WARNING: stage unit took 481 s, over its budget of 480 s; its slowest tests:"
    assert warning[1].endswith("tests/test_29.py::test_x") and len(warning) == 11
    report = ci_times.report(tmp_path)
    assert "--- unit: 30 tests, 435 s of test time (the 25 slowest)" in report
    assert "--- notebooks: not timed yet" in report


def test_every_notebook_has_recorded_minutes_to_be_ordered_by():
    from bertmem.book.chapters import cpu_profile_minutes

    minutes = cpu_profile_minutes()
    chapters = {path.stem.split("_")[0] for path in (ROOT / "book").glob("*.ipynb")}
    assert chapters <= set(minutes), chapters - set(minutes)
