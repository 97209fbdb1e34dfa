"""Checkpoints that resume exactly: model, optimizer, scheduler, scaler, RNG states, data position (chapter 5)."""

from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

CHECKPOINT_NAME = "checkpoint.pt"


def capture_rng() -> dict[str, Any]:
    """The state of every random number generator a training step draws from (chapter 5)."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Put back the generator states saved by `capture_rng` (chapter 5)."""
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def atomic_save(obj: Any, path: str | os.PathLike) -> Path:
    """`torch.save` to a temporary file in the same folder, then rename: a crash never leaves half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            torch.save(obj, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def save_checkpoint(folder: str | os.PathLike, *, model, optimizer, scheduler, scaler, rng: dict[str, Any],
                    position: dict[str, int], history: list, epochs: list) -> Path:
    """Write everything a resumed run needs to `folder/checkpoint.pt`, atomically (chapter 5)."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
             "scaler": scaler.state_dict() if scaler is not None else None, "rng": rng, "position": dict(position),
             "history": list(history), "epochs": list(epochs), "format": 1}
    return atomic_save(state, Path(folder) / CHECKPOINT_NAME)


def load_checkpoint(folder: str | os.PathLike) -> dict[str, Any]:
    """Read `folder/checkpoint.pt` (CPU tensors), with a clear error when there is none."""
    path = Path(folder) / CHECKPOINT_NAME
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}: run without resume first, or point checkpoint_dir "
                                "at the folder of the interrupted run")
    state = torch.load(path, map_location="cpu", weights_only=False)
    if state.get("format") != 1:
        raise ValueError(f"{path} is not a bertmem checkpoint (format {state.get('format')!r})")
    return state
