"""Seeds, progress bars, third-party notices and where a run writes (all chapters).

On Colab a run writes to Google Drive when it is mounted, else to a folder the file browser shows; elsewhere to a
fresh temporary folder."""

from __future__ import annotations

import logging
import random
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Iterable

import numpy as np
import torch


def seed_everything(seed: int) -> torch.Generator:
    """Seed Python, NumPy and torch; return a torch Generator for data loaders (all chapters)."""
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def quiet_progress_import() -> None:
    """Import tqdm.auto once with its "IProgress not found" warning silenced: text bars are what we want (all)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import tqdm.auto  # noqa: F401  (cached: later imports, e.g. by transformers, do not warn again)


def _no_kernel_notice(record: logging.LogRecord) -> bool:
    """False for the notices about bitsandbytes' optional 4-bit CPU kernels (which the book never uses): missing,
    or not checked offline."""
    return "kernels-community" not in record.getMessage()


# Who says it: bitsandbytes when the kernel cannot load, and the `kernels` package (a dependency of transformers
# since 5.25) when it looks the kernel up offline.
KERNEL_NOTICE_LOGGERS = ("bitsandbytes.backends.cpu.ops", "kernels._internals.hf_hub")


COLAB_CONTENT = Path("/content")  # Colab's working folder: shown in its file browser, wiped by a runtime reset
RUNS_FOLDER = "bertmem-runs"
MOUNT_LINES = 'from google.colab import drive\ndrive.mount("/content/drive")'  # what chapter 5b shows


def on_colab() -> bool:
    """Whether this Python runs in a Colab runtime (chapters 5b, A1)."""
    return "google.colab" in sys.modules


def colab_drive(content: Path | None = None) -> Path:
    """Where Google Drive appears once mounted with `drive.mount("/content/drive")` (chapter 5b)."""
    return (COLAB_CONTENT if content is None else content) / "drive" / "MyDrive"


def on_drive(folder: str | Path, content: Path | None = None) -> bool:
    """Whether `folder` lies on Colab's mounted Google Drive: My Drive, a shared drive, or a link into them (ch. 5b)."""
    mount, absolute = colab_drive(content).parent.resolve(), Path(folder).expanduser().resolve()
    return absolute == mount or mount in absolute.parents


def colab_runs_root(content: Path | None = None) -> Path:
    """On Colab, where runs go: Drive's bertmem-runs when Drive is mounted (a reset cannot wipe it; Colab syncs it
    late), else /content/bertmem-runs (in the file browser, gone with the runtime) (chapter 5b)."""
    drive = colab_drive(content)
    return (drive if drive.is_dir() else drive.parent.parent) / RUNS_FOLDER


def output_folder(name: str, content: Path | None = None) -> Path:
    """Where a chapter writes a run, the same folder on every run so a rerun replaces the last: on Colab under
    `colab_runs_root` (Drive when mounted), elsewhere `bertmem-runs/<name>` in the temporary folder (A1)."""
    root = colab_runs_root(content) if on_colab() else Path(tempfile.gettempdir()) / RUNS_FOLDER
    folder = root / name
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except PermissionError:  # a shared machine where another user made the folder: a fresh one of this user's
        return Path(tempfile.mkdtemp(prefix=f"{RUNS_FOLDER}-{name}-"))
    return folder


def shown_folder(folder: str | Path) -> str:
    """A run folder as a page prints it: one under the temporary folder as `<temporary folder>/…`, so the page
    holds no machine path (`tempfile.gettempdir()` says where that is) (A1)."""
    folder, temporary = Path(folder), Path(tempfile.gettempdir())
    if folder == temporary or temporary in folder.parents:
        return str(Path("<temporary folder>") / folder.relative_to(temporary))
    return str(folder)


def where_runs_live(folder: str | Path, content: Path | None = None) -> str:
    """One sentence for a long run: where its checkpoints and results live, and whether a Colab runtime reset can
    reach them (chapter 5b; `bertmem train` and `bench` print it)."""
    folder = Path(folder).expanduser()  # shown as given; compared as an absolute path
    if not on_colab():
        return f"checkpoints and results go to {folder}"
    drive = colab_drive(content)
    if on_drive(folder, content):
        # Colab writes to Drive through a local cache and syncs later (googlecolab/colabtools#659, #2869)
        return (f"checkpoints and results go to {folder}, on Google Drive: a runtime reset cannot wipe them, but "
                "Colab copies them to Drive some time after they are written, so the newest may be missing after "
                "a reset (drive.flush_and_unmount() before you stop the runtime asks Drive to copy what is pending)")
    return (f"checkpoints and results go to {folder}, which a Colab runtime reset wipes: mount Google Drive "
            f"(drive.mount(\"/content/drive\")) and choose a folder under {drive} to keep them")


def quiet_bitsandbytes_notice() -> None:
    """Drop those notices, whoever imports bitsandbytes (transformers, peft, chapter 8) (all chapters).

    They come at import or at the first CPU operation, so a filter stays on their loggers; other messages pass.
    """
    for name in KERNEL_NOTICE_LOGGERS:
        logger = logging.getLogger(name)
        if _no_kernel_notice not in logger.filters:
            logger.addFilter(_no_kernel_notice)


def text_bar_in_notebook(bar_class) -> bool:
    """True in a Jupyter kernel where tqdm.auto fell back to a text bar (no ipywidgets): an executed notebook."""
    return "ipykernel" in sys.modules and not bar_class.__module__.startswith("tqdm.notebook")


def progress(iterable: Iterable, desc: str, enabled: bool = True, **kwargs):
    """A `tqdm.auto` bar: a live widget in Jupyter with ipywidgets, a text bar in a terminal (all chapters).

    In a kernel without ipywidgets (how the book's notebooks are executed) every redraw would stay in the saved
    output as one more line, so the bar there shows only its final line. Given an iterable it returns a
    generator over it (see `counted`); given None, the bar itself, to update by hand.
    """
    quiet_progress_import()
    from tqdm.auto import tqdm

    kwargs.setdefault("mininterval", 5.0)  # a terminal redraws at most every 5 s
    if iterable is not None:
        kwargs.setdefault("total", len(iterable) if hasattr(iterable, "__len__") else None)
    if not text_bar_in_notebook(tqdm):
        bar = tqdm(None, desc=desc, disable=not enabled, **kwargs)
    else:
        class FinalLineBar(tqdm):  # never drawn while running (delay), drawn once when the loop ends
            def close(self):
                stays = self.leave or (self.leave is None and self.pos == 0)
                if not self.disable and stays:
                    self.last_print_t = self.start_t + self.delay  # as if shown: close() prints the final line
                super().close()

        bar = FinalLineBar(None, desc=desc, disable=not enabled, delay=float("inf"), **kwargs)
    return bar if iterable is None else counted(iterable, bar)


def counted(iterable: Iterable, bar):
    """Yield the items, counting each on the bar; close it at the end (all chapters).

    The bar never touches the iterable itself: tqdm.auto's bar (tqdm_asyncio) calls iter() on it when made,
    so a DataLoader would start one iterator more, thrown away, that draws a seed from its generator or
    torch's global one (and starts its workers): a run with a bar would see another shuffle order or other
    dropout masks than one without. Call `close()` after a `break` to print the final line at once.
    """
    try:
        for item in iterable:
            yield item
            bar.update(1)
    finally:
        bar.close()
