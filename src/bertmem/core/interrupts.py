"""Stopping a run cleanly: Ctrl-C and SIGTERM both end in a checkpoint and a one-line message (chapter 5b)."""

from __future__ import annotations

import contextlib
import functools
import signal
import threading
from typing import Callable, Iterator

EXIT_CODES = {"SIGINT": 130, "SIGTERM": 143}  # 128 + the signal number, as shells report it


class TrainingInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C or SIGTERM; the message says where its checkpoint is (chapter 5b)."""

    def __init__(self, message: str, signal_name: str = "SIGINT"):
        super().__init__(message)
        self.signal_name = signal_name

    @property
    def exit_code(self) -> int:
        """The status a command-line run exits with: 130 after Ctrl-C, 143 after SIGTERM."""
        return EXIT_CODES.get(self.signal_name, 130)


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Inside the block SIGTERM (schedulers, `docker stop`) raises like Ctrl-C, once (chapter 5b).

    A second SIGTERM is ignored until the block ends, so it cannot break the final checkpoint's save.
    Signal handlers can only be set from the main thread; elsewhere the block changes nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)

    def stop(signum, frame) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise TrainingInterrupted("SIGTERM received", "SIGTERM")

    signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Ctrl-C and SIGTERM wait until the block ends, then reach their usual handler: a save is never cut in half.

    The signal is raised again after the block, so whatever handler was in place (the training loop's, Python's
    Ctrl-C handler, `SIG_IGN`) decides what happens (chapter 5b). Outside the main thread the block changes nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[str] = []
    previous = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for signum in previous:
        signal.signal(signum, lambda number, frame: received.append(signal.Signals(number).name))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
    for name in dict.fromkeys(received):  # now through the handler that was in place (ours, the default, …)
        signal.raise_signal(signal.Signals[name])


def stops_on_sigterm(function: Callable) -> Callable:
    """Decorator: run `function` inside `sigterm_interrupts()` (the training loop of chapter 5)."""
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        with sigterm_interrupts():
            return function(*args, **kwargs)
    return wrapper


def interruption(stop: KeyboardInterrupt, boundary: dict, rng_state, checkpoint: Callable[[dict, dict], None],
                 checkpoint_dir: str | None, written: bool = False) -> TrainingInterrupted:
    """Save the last finished optimizer step (unless `written`) and say where it is (Ctrl-C or SIGTERM) (ch. 5b)."""
    name = getattr(stop, "signal_name", "SIGINT")
    label = "Ctrl-C" if name == "SIGINT" else name
    if not checkpoint_dir:
        return TrainingInterrupted(f"interrupted by {label} after optimizer step {boundary['step']}; no checkpoint "
                                   "was kept (set output_dir and checkpoint_every, --output-dir and "
                                   "--checkpoint-every, to keep progress)", name)
    if not written:
        checkpoint(boundary, rng_state)
    return TrainingInterrupted(f"interrupted by {label}: saved a checkpoint at optimizer step {boundary['step']} "
                               f"in {checkpoint_dir}; run again with resume=True (--resume) to continue", name)
