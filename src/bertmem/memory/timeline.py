"""Memory over one training step: live tensor bytes op by op, the peak and what holds it then (chapter 1).

The peak of a step is a moment, not a sum: gradients appear while activations are freed during backward,
and the optimizer step holds no activations. `StepTimeline` watches every tensor storage an operation
creates (a `TorchDispatchMode`) and every storage freed (a weak reference to it), for real tensors and for
FakeTensors alike, so the same code measures a step on the CPU and estimates one for a GPU."""

from __future__ import annotations

import contextlib
import weakref
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

PHASES = ("forward", "backward", "optimizer")
CATEGORIES = ("weights", "gradients", "optimizer state", "saved activations", "temporaries")


def _storage_key(tensor: torch.Tensor) -> int:
    """Identity of the storage behind a tensor (views share it)."""
    return tensor.untyped_storage()._cdata


@dataclass
class StepTimeline:
    """Live bytes after every operation of one step, with the storage behind each change (chapter 1).

    Each allocation gets its own serial number (a freed storage's address can be reused later); the
    baseline holds what was alive before the step (weights, the batch, optimizer state of earlier steps).
    """

    baseline: dict[int, int] = field(default_factory=dict)  # serial -> bytes, alive before the step
    events: list[tuple[int, int]] = field(default_factory=list)  # (serial, +bytes allocated / -bytes freed)
    phase_starts: dict[str, int] = field(default_factory=dict)  # phase -> index of its first event
    categories: dict[int, str] = field(default_factory=dict)  # serial -> category
    live_serials: dict[int, int] = field(default_factory=dict)  # storage address -> serial, while alive

    def serial(self, tensor: torch.Tensor) -> int | None:
        """The serial of the allocation behind a live tensor (None if the timeline never saw it)."""
        return self.live_serials.get(_storage_key(tensor))

    def mark(self, tensors: Iterable[Any], category: str) -> None:
        """Name the category of the storages behind these tensors, as they are now (chapter 1)."""
        if category not in CATEGORIES:
            raise ValueError(f"category must be one of {CATEGORIES}, got {category!r}")
        for tensor in tensors:
            if isinstance(tensor, torch.Tensor) and tensor.layout == torch.strided:
                serial = self.serial(tensor)
                if serial is not None:
                    self.categories[serial] = category

    def as_steady_state(self) -> None:
        """Count optimizer state created by this step as alive from its start, as in every later step."""
        created = {serial for serial, name in self.categories.items()
                   if name == "optimizer state" and serial not in self.baseline}
        kept, index_map = [], []
        for serial, delta in self.events:
            index_map.append(len(kept))
            if serial in created:
                self.baseline[serial] = max(self.baseline.get(serial, 0), delta)
            else:
                kept.append((serial, delta))
        index_map.append(len(kept))
        self.phase_starts = {phase: index_map[min(start, len(index_map) - 1)]
                             for phase, start in self.phase_starts.items()}
        self.events = kept

    def start_phase(self, phase: str) -> None:
        """Mark where forward, backward or the optimizer step begins."""
        if phase not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
        self.phase_starts[phase] = len(self.events)

    def live_bytes(self) -> list[int]:
        """Bytes alive after each event (the baseline included)."""
        live, out = sum(self.baseline.values()), []
        for _, delta in self.events:
            live += delta
            out.append(live)
        return out

    @property
    def peak(self) -> int:
        """The most bytes alive at any moment of the step."""
        return max([sum(self.baseline.values()), *self.live_bytes()])

    @property
    def peak_index(self) -> int:
        """The event after which the peak is reached (-1: before the step began)."""
        live = self.live_bytes()
        return -1 if not live or max(live) <= sum(self.baseline.values()) else live.index(max(live))

    def phase_at(self, index: int) -> str:
        """The phase an event belongs to ('before' for the baseline)."""
        current = "before"
        for phase, start in sorted(self.phase_starts.items(), key=lambda item: item[1]):
            if index >= start:
                current = phase
        return current

    @property
    def peak_phase(self) -> str:
        """When the peak happens: forward, backward or optimizer."""
        return self.phase_at(self.peak_index)

    def by_category(self) -> dict[str, list[int]]:
        """Live bytes after each event, split by category (for a stacked plot)."""
        live = dict.fromkeys(CATEGORIES, 0)
        for key, size in self.baseline.items():
            live[self.categories.get(key, "temporaries")] += size
        series: dict[str, list[int]] = {name: [] for name in CATEGORIES}
        for key, delta in self.events:
            live[self.categories.get(key, "temporaries")] += delta
            for name in CATEGORIES:
                series[name].append(live[name])
        return series

    def breakdown_at(self, index: int) -> dict[str, int]:
        """Bytes per category alive after event `index` (-1: before the step)."""
        if index < 0:
            live = dict.fromkeys(CATEGORIES, 0)
            for key, size in self.baseline.items():
                live[self.categories.get(key, "temporaries")] += size
            return live
        return {name: values[index] for name, values in self.by_category().items()}

    @property
    def peak_breakdown(self) -> dict[str, int]:
        """Bytes per category at the moment of the peak."""
        return self.breakdown_at(self.peak_index)

    def phase_peaks(self) -> dict[str, int]:
        """The highest live bytes within each phase."""
        live, out = self.live_bytes(), {}
        for index, value in enumerate(live):
            phase = self.phase_at(index)
            out[phase] = max(out.get(phase, 0), value)
        return out


class _Watcher(TorchDispatchMode):
    """Records every new output storage of an operation and its release."""

    def __init__(self, timeline: StepTimeline):
        super().__init__()
        self.timeline = timeline
        self.refs: dict[int, weakref.ref] = {}
        self.next_serial = len(timeline.baseline)

    def track(self, tensor: Any) -> None:
        """Start following a storage the step created (once)."""
        if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.strided:
            return
        key = _storage_key(tensor)
        if key in self.timeline.live_serials:
            return
        storage = tensor.untyped_storage()
        size, serial = storage.nbytes(), self.next_serial
        self.next_serial += 1
        timeline = self.timeline

        def freed(_ref, key=key, size=size, serial=serial) -> None:
            timeline.events.append((serial, -size))
            timeline.live_serials.pop(key, None)
            self.refs.pop(key, None)

        self.refs[key] = weakref.ref(storage, freed)
        timeline.live_serials[key] = serial
        timeline.events.append((serial, size))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for tensor in tree_flatten(out)[0]:
            self.track(tensor)
        return out


@contextlib.contextmanager
def record_timeline(alive: Iterable[torch.Tensor]) -> Iterator[StepTimeline]:
    """Record a step's memory; `alive` are the tensors that exist before it (weights, batch, state)."""
    timeline = StepTimeline()
    for tensor in alive:
        if isinstance(tensor, torch.Tensor) and tensor.layout == torch.strided:
            key = _storage_key(tensor)
            if key not in timeline.live_serials:
                timeline.live_serials[key] = len(timeline.baseline)
                timeline.baseline[len(timeline.baseline)] = tensor.untyped_storage().nbytes()
    watcher = _Watcher(timeline)
    try:
        with watcher:
            yield timeline
    finally:
        watcher.refs.clear()  # storages still alive stay counted; stop listening for their release
