"""The package's version moves with its source; a release is a tag the Colab install cell can install.

`release.json` records the version in `pyproject.toml` and a hash of everything that decides what that version
installs: the package's files under `src/bertmem` and `pyproject.toml` without its version line. A test fails when
the source changes and the record does not, so a changed package cannot keep an old version number.

    python scripts/release.py check          # what the release workflow runs: record current, install cells agree
    python scripts/release.py bump [minor]   # after changing src/: new version (patch by default), new record,
                                             # every notebook's install cell names the new tag

The release workflow (.github/workflows/release.yml) runs `check` on every push to main and, when the tag
`v<version>` does not exist yet, builds the wheel and creates the tag and a GitHub release with it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import tomllib
from pathlib import Path

import sync_install_cell  # a sibling script: scripts/ is on the path when this one runs or is imported

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "release.json"
PYPROJECT = ROOT / "pyproject.toml"
SOURCE = ROOT / "src" / "bertmem"
VERSION_LINE = re.compile(r'^version = "([^"]+)"\n', flags=re.MULTILINE)


def pyproject_version(text: str | None = None) -> str:
    """The version in pyproject.toml."""
    match = VERSION_LINE.search(PYPROJECT.read_text(encoding="utf-8") if text is None else text)
    if not match:
        raise SystemExit("pyproject.toml has no version line")
    return match.group(1)


def dependencies_hash(text: str | None = None) -> str:
    """What `make colab-stack` certifies (16 hex digits): pyproject.toml's [build-system] and [project] tables
    without the version and the extras, i.e. what the install cell's pip resolves (it installs no extra; the
    stack's test tools are colab_stack.py's own list). A new version or a new test tool changes nothing there."""
    data = tomllib.loads(PYPROJECT.read_text(encoding="utf-8") if text is None else text)
    project = {k: v for k, v in data["project"].items() if k not in ("version", "optional-dependencies")}
    resolved = json.dumps({"build-system": data.get("build-system"), "project": project}, sort_keys=True)
    return hashlib.sha256(resolved.encode()).hexdigest()[:16]


def source_files(root: Path | None = None) -> list[Path]:
    """The package's files as a wheel ships them: no caches, no hidden files, no build leftovers."""
    root = root or SOURCE
    return sorted(p for p in root.rglob("*") if p.is_file() and p.suffix not in (".pyc", ".pyo")
                  and not any(part == "__pycache__" or part.startswith(".") for part in p.relative_to(root).parts))


def source_hash(root: Path | None = None, pyproject: Path | None = None) -> str:
    """A hash of the package's files (path and bytes) and of pyproject.toml without its version (16 hex digits)."""
    root, pyproject = root or SOURCE, pyproject or PYPROJECT
    digest = hashlib.sha256(dependencies_hash(pyproject.read_text(encoding="utf-8")).encode())
    for path in source_files(root):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def read_record(record: Path | None = None) -> dict:
    """The recorded version and source hash."""
    record = record or RECORD
    if not record.is_file():
        raise SystemExit(f"{record.name} is missing: run python scripts/release.py bump")
    return json.loads(record.read_text(encoding="utf-8"))


def problems(record: Path | None = None, root: Path | None = None, pyproject: Path | None = None,
             book: Path | None = None) -> list[str]:
    """What stops this checkout from being released as its version (empty: releasable)."""
    record, pyproject = record or RECORD, pyproject or PYPROJECT
    recorded, found = read_record(record), []
    version = pyproject_version(pyproject.read_text(encoding="utf-8"))
    if recorded["version"] != version:
        found.append(f"pyproject.toml says {version}, {record.name} {recorded['version']}: run "
                     "python scripts/release.py bump")
    elif recorded["source_sha256"] != source_hash(root, pyproject):
        found.append(f"the package changed since version {version} was recorded: run python scripts/release.py "
                     "bump (a new version, so the install cell of a notebook never installs another source)")
    if book is not None or record == RECORD:  # the repository's notebooks must install this version
        cell = sync_install_cell.install_cell()
        for path in sorted((book or ROOT / "book").glob("*.ipynb")):
            sources = ["".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]]
            if not any(source == cell for source in sources):
                found.append(f"{path.name}: its install cell does not install v{version}: run "
                             "python scripts/sync_install_cell.py")
    return found


def next_version(version: str, part: str = "patch") -> str:
    """0.3.1 -> 0.3.2 (patch) or 0.4.0 (minor)."""
    try:
        major, minor, patch = (int(x) for x in version.split("."))
    except ValueError:
        raise SystemExit(f"version {version!r} is not MAJOR.MINOR.PATCH: set one in pyproject.toml") from None
    return f"{major}.{minor + 1}.0" if part == "minor" else f"{major}.{minor}.{patch + 1}"


def bump(part: str = "patch") -> str:
    """The next version after the recorded one in pyproject.toml, its record, every install cell naming its tag."""
    text = PYPROJECT.read_text(encoding="utf-8")
    if RECORD.is_file():
        recorded = read_record()
        if recorded["source_sha256"] == source_hash() and recorded["version"] == pyproject_version(text):
            raise SystemExit(f"nothing changed since version {recorded['version']} was recorded: no new version")
        version = next_version(recorded["version"], part)  # a recorded version is never reused
    else:
        version = next_version(pyproject_version(text), part)
    PYPROJECT.write_text(VERSION_LINE.sub(f'version = "{version}"\n', text, count=1), encoding="utf-8")
    RECORD.write_text(json.dumps({"version": version, "source_sha256": source_hash()}, indent=1) + "\n",
                      encoding="utf-8")
    sync_install_cell.main()
    return version


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="is this checkout releasable as its version?")
    bumping = sub.add_parser("bump", help="a new version after the source changed")
    bumping.add_argument("part", nargs="?", choices=("patch", "minor"), default="patch")
    args = parser.parse_args(argv)
    if args.command == "bump":
        print(f"version {bump(args.part)} recorded; commit pyproject.toml, release.json and book/")
        return 0
    found = problems()
    for problem in found:
        print(problem, file=sys.stderr)
    if not found:
        print(f"v{pyproject_version()}")  # the tag the release workflow creates when it does not exist yet
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
