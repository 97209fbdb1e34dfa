"""Checkpoints that resume safely, and exactly where the kernels are deterministic (a CPU; a GPU with
`TrainConfig.deterministic`): state, RNGs, data position and the run's settings (chapter 5b)."""

from __future__ import annotations

import hashlib
import os
import random
import tempfile
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from bertmem.core.devices import cuda_rng_state, set_cuda_rng_state
from bertmem.core.interrupts import signals_deferred
from bertmem.data.frames import EncodedDataset

CHECKPOINT_NAME = "checkpoint.pt"
FORMAT = 2  # 2: loads with weights_only=True and records the run's settings
# Settings a resumed run may change: they alter neither the data, the step positions nor the schedule (the kernels'
# arithmetic may change with some: device, fused_optimizer, deterministic). A checkpoint written before one of them
# existed resumes too.
SAFE_TO_CHANGE = frozenset({"progress", "checkpoint_every", "checkpoint_minutes", "checkpoint_dir", "resume",
                            "device", "oom_backoff", "gradient_checkpointing", "fused_optimizer", "guard_non_finite",
                            "output_dir", "save_model", "backend", "eval_dataset", "eval_size", "eval_batch_size",
                            "overwrite", "deterministic"})
# Settings added after a checkpoint format, with the value every run before them had: an older checkpoint resumes.
ADDED_SETTINGS = {"truncation": "head", "class_weights": "none"}
# Settings renamed since (one name per idea): an older checkpoint's keys are read under their new names.
RENAMED_SETTINGS = {"model": "model_id", "batch_size": "micro_batch", "micro_batch_size": "micro_batch"}


class CheckpointError(ValueError):
    """A checkpoint that cannot be used: damaged, foreign, or written by a run with other settings."""


def capture_rng() -> dict[str, Any]:
    """Every random generator a training step draws from, as plain lists and tensors (chapter 5b).

    Plain types let `torch.load(weights_only=True)` read the checkpoint: no pickled numpy objects.
    """
    name, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss = random.getstate()
    state = {"python": [version, list(internal), gauss],
             "numpy": {"name": name, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                       "has_gauss": int(has_gauss), "cached_gaussian": float(cached)},
             "torch": torch.get_rng_state()}
    cuda = cuda_rng_state()
    if cuda is not None:
        state["cuda"] = cuda
    return state


def restore_rng(state: dict[str, Any]) -> None:
    """Put back the generator states saved by `capture_rng` (chapter 5b)."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    n = state["numpy"]
    np.random.set_state((n["name"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    torch.set_rng_state(state["torch"])
    set_cuda_rng_state(state.get("cuda"))


def atomic_save(obj: Any, path: str | os.PathLike) -> Path:
    """`torch.save` to a temporary file in the same folder, then rename: a crash never leaves half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Ctrl-C or SIGTERM wait from before the temporary file exists until it is renamed or removed: one arriving
    # between `mkstemp` and the cleanup below would otherwise leave a *.tmp behind.
    with signals_deferred():
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                torch.save(obj, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:  # a failed write: never leave a *.tmp behind
            Path(tmp).unlink(missing_ok=True)
            raise
    return path


def save_checkpoint(folder: str | os.PathLike, *, model, optimizer, scheduler, scaler, rng: dict[str, Any],
                    position: dict[str, Any], history: list, epochs: list,
                    settings: Mapping[str, Any] | None = None) -> Path:
    """Write everything a resumed run needs to `folder/checkpoint.pt`, atomically (chapter 5b)."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
             "scaler": scaler.state_dict() if scaler is not None else None, "rng": rng, "position": dict(position),
             "history": list(history), "epochs": list(epochs), "settings": dict(settings or {}),
             "format": FORMAT}
    return atomic_save(state, Path(folder) / CHECKPOINT_NAME)


def load_checkpoint(folder: str | os.PathLike) -> dict[str, Any]:
    """Read `folder/checkpoint.pt` as data only (no code runs), with one-line errors naming the file."""
    path = Path(folder) / CHECKPOINT_NAME
    if not path.is_file():
        raise FileNotFoundError(f"no checkpoint at {path}: run without resume first, or point output_dir "
                                "(--output-dir) at the folder of the interrupted run")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - a damaged file fails in many ways (Unpickling, EOF, Key, zip errors)
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise CheckpointError(f"cannot read checkpoint {path} ({first[:160]}): it is damaged, truncated, written "
                              f"by a bertmem older than format {FORMAT}, or not a bertmem checkpoint; start a new "
                              "run in another output folder") from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        found = state.get("format") if isinstance(state, dict) else type(state).__name__
        raise CheckpointError(f"{path} is not a bertmem checkpoint of format {FORMAT} (found {found!r}): start a "
                              "new run in another output folder")
    return state


def settings_differences(saved: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Each setting that differs between a checkpoint and this run and is not safe to change (chapter 5b)."""
    saved = {RENAMED_SETTINGS.get(k, k): v for k, v in saved.items()}
    saved = {**{k: v for k, v in ADDED_SETTINGS.items() if k in current}, **saved}
    keys = sorted((set(saved) | set(current)) - SAFE_TO_CHANGE)
    return [f"{key}: checkpoint {saved.get(key)!r}, now {current.get(key)!r}"
            for key in keys if saved.get(key) != current.get(key)]


def check_resume_settings(saved: Mapping[str, Any], current: Mapping[str, Any], path: str | os.PathLike) -> None:
    """Refuse to resume when a setting that moves the data, step positions or schedule has changed (chapter 5b)."""
    differences = settings_differences(saved, current)
    if differences:
        raise CheckpointError(f"cannot resume from {Path(path) / CHECKPOINT_NAME}: the run's settings changed ("
                              + "; ".join(differences) + "). Rerun with the checkpoint's settings, or start a "
                              "new run in another output folder")


def load_model_state(model: torch.nn.Module, state: Mapping[str, Any], path: str | os.PathLike) -> None:
    """Load a checkpoint's weights, naming the file when they belong to another model (chapter 5b)."""
    try:
        model.load_state_dict(state)
    except RuntimeError as err:
        first = str(err).strip().splitlines()[0]
        raise CheckpointError(f"checkpoint {Path(path) / CHECKPOINT_NAME} holds weights of another model "
                              f"({first[:160]}): resume with the model that wrote it") from None


def dataset_fingerprint(examples) -> str:
    """A short hash of every example's token ids and label, in order: checkpoints compare it on resume (chapter 5b).

    Works for an `EncodedDataset`, any map-style dataset of dicts, or a list of batches.
    """
    digest = hashlib.sha256()
    if isinstance(examples, EncodedDataset):
        for ids in examples.encodings["input_ids"]:
            digest.update(len(ids).to_bytes(4, "little") + np.asarray(ids, dtype=np.int64).tobytes())
        digest.update(np.asarray(examples.labels, dtype=np.int64).tobytes())
        return digest.hexdigest()[:16]
    for index in range(len(examples)):
        item = examples[index]
        for key in sorted(item):
            value = item[key]
            array = value.detach().cpu().numpy() if isinstance(value, torch.Tensor) else np.asarray(value)
            digest.update(key.encode() + str(array.shape).encode() + array.tobytes())
    return digest.hexdigest()[:16]
