"""Execute notebooks in place, one after another, as they are committed (outputs saved, streams coalesced).

Streams are coalesced (stdout chunks merged, carriage returns applied) so a saved output holds what a reader of a
live notebook saw, not every redraw. Run with the data mirror and offline Hub settings of `.ci/run`:

    python scripts/execute_notebooks.py [book/00_baseline.ipynb ...]     (default: every notebook in book/)
"""

import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]


def main(paths: list[str]) -> None:
    for path in [Path(p) for p in paths] or sorted((ROOT / "book").glob("*.ipynb")):
        notebook = nbformat.read(path, as_version=4)
        start = time.perf_counter()
        NotebookClient(notebook, timeout=1800, kernel_name="python3", coalesce_streams=True,
                       resources={"metadata": {"path": str(path.resolve().parent)}}).execute()
        nbformat.write(notebook, path)
        print(f"{path.name}: {time.perf_counter() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
