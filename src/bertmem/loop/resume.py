"""Where a run stands and how it continues: position, RNG, checkpoints, Ctrl-C and SIGTERM (chapter 5b).

`train` tells a `RunState` what happened (`batches` at an epoch's start, `on_step`, `on_epoch`) and runs its epoch
inside `saved_on_interrupt()`; everything an exact resume needs — the micro-batches already trained, the data
order's generator, the RNG state at the last optimizer step, the skipped fp16 steps — is kept here."""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict
from typing import Any, Iterator

from bertmem.core.interrupts import TrainingInterrupted, interruption
from bertmem.data.batching import dataset_size, epoch_batches
from bertmem.loop.checkpoint import (
    capture_rng,
    check_resume_settings,
    dataset_fingerprint,
    load_checkpoint,
    load_model_state,
    restore_rng,
    save_checkpoint,
)


def run_settings(config, train_loader, micro_size: int, extra: dict | None = None) -> dict[str, Any]:
    """What a checkpoint must match to resume: the recipe, the batch and the data's identity (chapter 5b)."""
    dataset = getattr(train_loader, "dataset", None)
    settings = dict(asdict(config), micro_batch=micro_size, train_examples=dataset_size(train_loader),
                    data_fingerprint=dataset_fingerprint(dataset if dataset is not None else train_loader))
    settings.update(extra or {})
    return settings


class RunState:
    """A run's position (epoch, step, micro-batches, examples, splits) and its checkpoints (chapter 5b)."""

    def __init__(self, folder, checkpoint_every: int | None, loader, result, settings: dict[str, Any],
                 parts: dict[str, Any], checkpoint_minutes: float | None = None):
        self.folder, self.checkpoint_every, self.checkpoint_minutes = folder, checkpoint_every, checkpoint_minutes
        self.loader, self.result, self.settings, self.parts = loader, result, settings, parts
        self.generator = getattr(loader, "generator", None)  # a shuffled DataLoader's order comes from it
        self.position = self.epoch_start(1, step=0, splits=1)
        self.step, self.splits = 0, 1
        self.done = self.seen = 0  # micro-batches and examples trained in this epoch
        self.before = self.start = 0.0  # this epoch's training time before an interruption; when it (re)started
        self.rng: dict | None = None  # restored once the resumed epoch's loader has drawn its seeds
        self.boundary, self.boundary_rng = self.position, None  # the last finished optimizer step
        self.last_saved: dict | None = None  # the position most recently written
        self.saved_at = time.perf_counter()  # when the last save ended: the minutes count from there

    @classmethod
    def begin(cls, run, config, train_loader, micro_size: int, result, parts: dict[str, Any],
              extra_settings: dict | None = None) -> "RunState":
        """A fresh run, or (`run.resume`) the one in `run.output_dir`, checked against this run's settings.

        `parts`: the model, optimizer, scheduler and GradScaler a checkpoint holds.
        """
        folder, settings = run.checkpoint_dir, {}
        if folder:
            settings = run_settings(config, train_loader, micro_size, extra_settings)
            settings["precision_used"] = result.precision  # 'auto' can resolve differently on another card
        state = cls(folder, run.checkpoint_every, train_loader, result, settings, parts, run.checkpoint_minutes)
        if run.resume:
            state.load()
        return state

    def epoch_start(self, epoch: int, step: int, splits: int) -> dict[str, Any]:
        """The position at the start of `epoch`, with the data order's generator as it is now."""
        generator = self.generator.get_state() if self.generator is not None else None
        return {"epoch": epoch, "micro_batches": 0, "step": step, "seen": 0, "splits": splits, "elapsed_s": 0.0,
                "generator": generator}

    def load(self) -> None:
        """Model, optimizer, scheduler, scaler, history and position from the checkpoint (chapter 5b)."""
        ckpt = load_checkpoint(self.folder)
        check_resume_settings(ckpt["settings"], self.settings, self.folder)
        load_model_state(self.parts["model"], ckpt["model"], self.folder)
        self.parts["optimizer"].load_state_dict(ckpt["optimizer"])
        self.parts["scheduler"].load_state_dict(ckpt["scheduler"])
        if ckpt["scaler"] is not None:
            self.parts["scaler"].load_state_dict(ckpt["scaler"])
        self.position, self.rng = ckpt["position"], ckpt["rng"]
        self.result.history, self.result.epochs = ckpt["history"], ckpt["epochs"]
        self.result.skipped_steps = self.position["skipped"]
        saves, seconds, after_epochs = self.position.get("saves", (0, 0.0, 0.0))  # before this one (its time is lost)
        self.result.checkpoint_saves, self.result.checkpoint_time_s = saves + 1, seconds
        self.result.checkpoint_after_epochs_s = after_epochs
        self.step, self.splits = self.position["step"], self.position["splits"]

    def epochs(self, count: int, total_steps: int) -> Iterator[int]:
        """The epochs still to train: from the resumed one to `count`, until `total_steps` are done."""
        for epoch in range(self.position["epoch"], count + 1):
            if self.step >= total_steps:
                return
            yield epoch

    def batches(self, epoch: int):
        """This epoch's batches from where the run stands, in the order the epoch had when it first ran."""
        if self.generator is not None and self.position["generator"] is not None:
            self.generator.set_state(self.position["generator"])
        self.start, self.done, self.seen = time.perf_counter(), self.position["micro_batches"], self.position["seen"]
        self.before = self.position.get("elapsed_s", 0.0)
        batches = epoch_batches(self.loader, epoch, skip=self.done)
        if self.rng is not None:
            restore_rng(self.rng)  # after the loader drew its seeds: the run continues exactly
            self.rng = None
        self.boundary = dict(self.position, epoch=epoch, micro_batches=self.done, step=self.step, seen=self.seen,
                             splits=self.splits)
        self.boundary_rng = capture_rng() if self.folder else None
        return batches

    def on_step(self, window: list, splits: int) -> None:
        """One optimizer step done over `window` (cut into `splits` pieces): move on; a checkpoint every N steps."""
        if splits != self.splits:  # the out-of-memory back-off cut the micro-batches
            self.result.backoffs.append({"step": self.step + 1, "splits": splits})
            self.splits = splits
        self.step, self.done = self.step + 1, self.done + len(window)
        self.seen += sum(len(micro["labels"]) for micro in window)
        if self.folder:
            self.boundary = dict(self.boundary, micro_batches=self.done, step=self.step, seen=self.seen,
                                 splits=self.splits, elapsed_s=self.before + time.perf_counter() - self.start)
            self.boundary_rng = capture_rng()
            if self.checkpoint_due():
                self.save(self.boundary, self.boundary_rng)

    def checkpoint_due(self) -> bool:
        """Every `checkpoint_every` steps, or once `checkpoint_minutes` have passed since the last save ended (so
        a save, however slow, takes at most its own share of each interval) (chapter 5b)."""
        by_steps = bool(self.checkpoint_every) and self.step % self.checkpoint_every == 0
        minutes = self.checkpoint_minutes
        return by_steps or (minutes is not None and time.perf_counter() - self.saved_at >= 60 * minutes)

    def epoch_record(self, epoch: int) -> dict[str, float]:
        """The epoch's training time and throughput (evaluation excluded)."""
        elapsed = self.before + time.perf_counter() - self.start
        return {"epoch": epoch, "train_time_s": elapsed, "examples": self.seen, "examples_per_s": self.seen / elapsed}

    def on_epoch(self, epoch: int) -> None:
        """`epoch` finished and evaluated: the next one starts from zero; a checkpoint when a folder is set."""
        self.position = self.epoch_start(epoch + 1, step=self.step, splits=self.splits)
        if self.folder:
            self.boundary, self.boundary_rng = self.position, capture_rng()
            self.save(self.position, self.boundary_rng, in_epoch=False)

    def save(self, position: dict, rng_state: dict, in_epoch: bool = True) -> None:
        """Write checkpoint.pt for `position` (atomic; a SIGTERM waits until the file is complete).

        `in_epoch`: the save falls inside an epoch's training time (False at an epoch's end, after evaluation)."""
        scaler, started = self.parts["scaler"], time.perf_counter()
        try:
            save_checkpoint(self.folder, model=self.parts["model"], optimizer=self.parts["optimizer"],
                            scheduler=self.parts["scheduler"], scaler=scaler if scaler.is_enabled() else None,
                            rng=rng_state, position=dict(position, skipped=self.result.skipped_steps,
                                                         saves=[self.result.checkpoint_saves,
                                                                self.result.checkpoint_time_s,
                                                                self.result.checkpoint_after_epochs_s]),
                            history=self.result.history, epochs=self.result.epochs, settings=self.settings)
        except TrainingInterrupted:  # a SIGTERM that waited for the save: the file is complete
            self.last_saved = position
            raise
        self.last_saved, self.saved_at = position, time.perf_counter()
        self.result.checkpoint_saves += 1
        self.result.checkpoint_time_s += self.saved_at - started
        if not in_epoch:
            self.result.checkpoint_after_epochs_s += self.saved_at - started

    @contextlib.contextmanager
    def saved_on_interrupt(self) -> Iterator[None]:
        """Ctrl-C or SIGTERM inside the block: save the last finished step (once) and say where it is."""
        try:
            yield
        except KeyboardInterrupt as stop:
            written = self.last_saved is self.boundary
            raise interruption(stop, self.boundary, self.boundary_rng, self.save, self.folder, written) from None
