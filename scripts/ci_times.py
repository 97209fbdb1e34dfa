"""Where CI's time goes: a pytest plugin that keeps every test's and every file's time, and the tables built from it.

As a plugin (`pytest -p ci_times --times-json FILE`, scripts/ on the path; `make unit`, `make notebooks` and
`make unit-other-cpu` load it): at the end of a run it prints the slowest files (for the nbval stage, each
notebook's time) and writes every test's time, setup and teardown included, to FILE. It works under pytest-xdist:
the times are the workers' own, collected by the controller.

As a script:
    python scripts/ci_times.py report [FOLDER]             the tables of every stage timed in FOLDER (`make ci-times`)
    python scripts/ci_times.py over-budget STAGE TOOK BUDGET [FOLDER]
                                                           a warning with the stage's slowest items when TOOK > BUDGET
FOLDER defaults to _build/ci-times; the GPU-profile dry run's times come from its own dry-run.json beside it.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDER = ROOT / "_build" / "ci-times"
SLOWEST_TESTS = 25  # what .ci/run prints for the unit stage
SLOWEST_FILES = 15


# --- the plugin -------------------------------------------------------------------------------------------------

def pytest_addoption(parser) -> None:
    parser.addoption("--times-json", default=None, help="write every test's time (s) to this JSON file")
    parser.addoption("--notebooks-longest-first", action="store_true",
                     help="hand out notebooks longest first (their recorded CPU-profile minutes)")


def pytest_collection_modifyitems(session, config, items) -> None:
    # two workers finish together when the longest notebooks start first (chapter 5 alone is a quarter of the stage)
    if not config.getoption("--notebooks-longest-first"):
        return
    from bertmem.book.chapters import cpu_profile_minutes  # here: only this option pays for importing bertmem

    minutes = cpu_profile_minutes()
    # stable: cells keep their order within a notebook; one not recorded goes first, being unknown
    items.sort(key=lambda item: -minutes.get(Path(str(item.fspath)).stem.split("_")[0], float("inf")))


_TIMES: dict[str, float] = defaultdict(float)  # nodeid -> seconds, setup + call + teardown


def pytest_runtest_logreport(report) -> None:
    # under xdist this runs in the controller for every report a worker sends back, with the worker's duration
    _TIMES[report.nodeid] += report.duration


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if hasattr(config, "workerinput"):  # a worker: the controller writes the table
        return
    times = dict(_TIMES)
    if not times:
        return
    files = per_file(times)
    terminalreporter.write_sep("=", f"time per file ({len(files)} files, {sum(files.values()):.0f} s of test time)")
    for line in table(files, SLOWEST_FILES, "file"):
        terminalreporter.write_line(line)
    path = config.getoption("--times-json")
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps({"tests": times, "files": files}, indent=0))


# --- the tables -------------------------------------------------------------------------------------------------

def per_file(times: dict[str, float]) -> dict[str, float]:
    """Seconds per file (a notebook under nbval: all its cells and its kernel's start)."""
    files: dict[str, float] = defaultdict(float)
    for nodeid, seconds in times.items():
        files[nodeid.split("::")[0]] += seconds
    return dict(files)


def table(seconds: dict[str, float], top: int, what: str) -> list[str]:
    """The `top` largest entries as aligned lines, largest first."""
    rows = sorted(seconds.items(), key=lambda item: -item[1])[:top]
    return [f"{value:8.1f} s  {name}" for name, value in rows] or [f"(no {what})"]


def stage_items(stage: str, folder: Path = FOLDER) -> tuple[dict[str, float], str]:
    """A stage's timed items and what they are: tests for the unit stages, notebooks for the others."""
    if stage == "gpu-profile-dry-run":  # gpu_check.py's own record, beside this folder
        dry_run = folder.parent / "gpu-profile-dry-run" / "dry-run.json"
        if not dry_run.exists():
            return {}, "notebook"
        chapters = json.loads(dry_run.read_text())["chapters"]
        return {c["notebook"]: c["wall_time_s"] for c in chapters}, "notebook"
    path = folder / f"{stage}.json"
    if not path.exists():
        return {}, "test"
    data = json.loads(path.read_text())
    return (data["files"], "notebook") if stage == "notebooks" else (data["tests"], "test")


def report(folder: Path = FOLDER) -> str:
    """Every stage's slowest items: the 25 slowest tests, each notebook under nbval and under the dry run."""
    lines = []
    for stage in ("unit", "unit-other-cpu", "notebooks", "gpu-profile-dry-run"):
        items, what = stage_items(stage, folder)
        if not items:
            lines.append(f"--- {stage}: not timed yet")
            continue
        top = SLOWEST_TESTS if what == "test" else len(items)
        lines.append(f"--- {stage}: {len(items)} {what}s, {sum(items.values()):.0f} s of {what} time "
                     f"(the {min(top, len(items))} slowest)")
        lines += table(items, top, what)
    return "\n".join(lines)


def over_budget(stage: str, took: float, budget: float, folder: Path = FOLDER) -> str:
    """'' when the stage kept its budget, else a warning naming its slowest items."""
    if took <= budget:
        return ""
    items, what = stage_items(stage, folder)
    lines = [f"WARNING: stage {stage} took {took:.0f} s, over its budget of {budget:.0f} s; its slowest {what}s:"]
    return "\n".join(lines + table(items, 10, what))


def main(argv: list[str]) -> int:
    if argv[:1] == ["report"]:
        print(report(Path(argv[1]) if len(argv) > 1 else FOLDER))
        return 0
    if argv[:1] == ["over-budget"] and len(argv) >= 4:
        warning = over_budget(argv[1], float(argv[2]), float(argv[3]), Path(argv[4]) if len(argv) > 4 else FOLDER)
        if warning:
            print(warning)
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
