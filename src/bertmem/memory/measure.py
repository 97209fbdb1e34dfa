"""Where fine-tuning memory goes: one real training step measured, tensor by tensor (chapter 1).

Saved-tensor hooks count what autograd keeps for backward; CUDA's allocator gives the peak on a GPU."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch
from torch import nn

from bertmem.core.devices import move_to, peak_memory_bytes, reset_peak_memory, synchronize
from bertmem.core.units import GIB
from bertmem.loop.precision import PRECISIONS, autocast_context
from bertmem.memory.timeline import StepTimeline, record_timeline
from bertmem.model.loading import checkpointing_enabled, find_encoder_layers


@dataclass
class MemoryReport:
    """Bytes of one training step by category; `exact` names the figures that are measurements (chapter 1)."""

    parameters: int
    gradients: int
    optimizer_state: int
    activations: int  # tensors saved for backward, deduplicated by storage, weights excluded
    peak: int | None = None  # torch.cuda.max_memory_allocated over the step (CUDA only)
    device: str = "cpu"
    estimated: bool = False
    notes: list[str] = field(default_factory=list)
    timeline: StepTimeline | None = None  # live bytes op by op (chapter 1): the step's real peak and its moment

    @property
    def total(self) -> int:
        """Parameters + gradients + optimizer state + saved activations: a sum, not a moment of the step."""
        return self.parameters + self.gradients + self.optimizer_state + self.activations

    @property
    def step_peak(self) -> int:
        """The most tensor bytes alive at one moment of the step (from the timeline; else the sum) (chapter 1)."""
        return self.timeline.peak if self.timeline is not None else self.total

    @property
    def peak_phase(self) -> str | None:
        """When the step's peak happens: 'forward', 'backward' or 'optimizer' (chapter 1)."""
        return self.timeline.peak_phase if self.timeline is not None else None

    @property
    def peak_breakdown(self) -> dict[str, int]:
        """Bytes per category alive at the moment of the peak (chapter 1)."""
        return self.timeline.peak_breakdown if self.timeline is not None else {}

    def as_dict(self, unit: int = GIB) -> dict[str, Any]:
        """The figures in `unit` bytes (GiB by default), ready for a table."""
        out = {k: getattr(self, k) / unit for k in ("parameters", "gradients", "optimizer_state", "activations")}
        out["total"] = self.total / unit
        out["step peak"] = self.step_peak / unit
        out["peak"] = None if self.peak is None else self.peak / unit
        return out


def storage_key(tensor: torch.Tensor) -> int:
    """Identity of a tensor's storage, so views of one buffer count once (works for fake tensors too)."""
    return tensor.untyped_storage()._cdata


def storage_bytes(tensor: torch.Tensor) -> int:
    """Bytes of the whole storage behind a tensor (a view keeps all of it alive)."""
    return tensor.untyped_storage().nbytes()


class SavedTensorTally:
    """Counts bytes saved for backward, each storage once, skipping storages in `exclude` (chapter 1).

    Storages are told apart by address, unless `allocation_id` names the allocation behind a tensor:
    a freed storage's address can be reused by a later one (checkpointing frees saved tensors, autocast
    casts are temporaries), and keyed by address the second would wrongly count as already seen.
    """

    def __init__(self, exclude: set[int] | None = None,
                 allocation_id: Callable[[torch.Tensor], int | None] | None = None):
        self.exclude = set(exclude or ())
        self.seen: dict[Any, int] = {}
        self.allocation_id = allocation_id
        self.on_save: Callable[[torch.Tensor], None] | None = None  # also told of every saved tensor

    def add(self, tensor: torch.Tensor) -> None:
        """Record one tensor (no-op for excluded or already seen storages)."""
        if not isinstance(tensor, torch.Tensor) or tensor.layout != torch.strided:
            return
        address = storage_key(tensor)
        if address in self.exclude:
            return
        serial = self.allocation_id(tensor) if self.allocation_id is not None else None
        key = ("address", address) if serial is None else ("allocation", serial)
        if key not in self.seen:
            self.seen[key] = storage_bytes(tensor)

    @property
    def total(self) -> int:
        """Bytes of all distinct storages recorded."""
        return sum(self.seen.values())

    @contextlib.contextmanager
    def hooks(self) -> Iterator["SavedTensorTally"]:
        """Record every tensor autograd saves inside the block."""
        def pack(tensor):
            self.add(tensor)
            if self.on_save is not None:
                self.on_save(tensor)
            return tensor

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
            yield self


def _unique_tensors(tensors) -> dict[int, torch.Tensor]:
    """Distinct storages among tensors, keyed by storage."""
    return {storage_key(t): t for t in tensors if isinstance(t, torch.Tensor)}


def _optimizer_tensors(optimizer: torch.optim.Optimizer | None) -> list[torch.Tensor]:
    """Every tensor in an optimizer's state."""
    if optimizer is None:
        return []
    return [v for state in optimizer.state.values() for v in state.values() if isinstance(v, torch.Tensor)]


def optimizer_state_bytes(optimizer: torch.optim.Optimizer | None) -> int:
    """Bytes of every tensor in the optimizer's state (AdamW: exp_avg, exp_avg_sq, step) (chapter 1)."""
    return sum(storage_bytes(t) for t in _unique_tensors(_optimizer_tensors(optimizer)).values())


def _checkpointed_layer_inputs(model: nn.Module, tally: SavedTensorTally) -> list:
    """With gradient checkpointing, each layer keeps its input alive outside autograd's saved tensors."""

    if not checkpointing_enabled(model):
        return []

    def record_inputs(module, args):
        for arg in args:
            tally.add(arg)

    return [layer.register_forward_pre_hook(record_inputs) for layer in find_encoder_layers(model)[1]]


def measure_step_memory(model: nn.Module, batch: dict[str, torch.Tensor],
                        optimizer: torch.optim.Optimizer | None = None,
                        precision: str = "fp32",
                        loss_fn: Callable[[Any], torch.Tensor] | None = None,
                        steady_state: bool = True) -> MemoryReport:
    """One forward/backward(/optimizer) step, its memory accounted by category (ch. 1).

    Besides the per-category totals, `report.timeline` holds the live bytes op by op:
    `report.step_peak` is the most memory alive at one moment, `report.peak_phase` when.
    With `steady_state` optimizer state that this (first) step creates counts as alive
    from the start, as it is in every later step.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}: use one of {PRECISIONS}")
    params = [p for p in model.parameters()]
    if not params:
        raise ValueError("the model has no parameters")
    device = params[0].device
    batch = move_to(batch, device)  # the batch follows the model, before recording
    weights = _unique_tensors(params + list(model.buffers()))
    cuda = device.type == "cuda" and not _is_fake(params[0])
    if cuda:
        synchronize(device)
        reset_peak_memory(device)
    state = _optimizer_tensors(optimizer)
    grads_before = [p.grad for p in params if p.grad is not None]
    alive = [*weights.values(), *batch.values(), *grads_before, *state]
    with record_timeline(alive) as timeline:
        tally = SavedTensorTally(exclude=set(weights), allocation_id=timeline.serial)
        handles = _checkpointed_layer_inputs(model, tally)
        tally.on_save = lambda tensor: timeline.mark([tensor], "saved activations")
        timeline.start_phase("forward")
        try:
            with tally.hooks(), autocast_context(precision, device.type):
                out = model(**batch)
                loss = loss_fn(out) if loss_fn is not None else out.loss
        finally:
            for handle in handles:
                handle.remove()
        timeline.start_phase("backward")
        loss.backward()
        if optimizer is not None:
            timeline.start_phase("optimizer")
            optimizer.step()
    peak = peak_memory_bytes(device) if cuda else None
    grads = _unique_tensors([p.grad for p in params if p.grad is not None])
    notes = ["activations = tensors saved for backward (each storage once, "
             "weights and buffers excluded)"]
    if peak is None:
        notes.append(f"no allocator peak on {device.type}: "
                     "the total is the sum of the four categories")
    timeline.mark(weights.values(), "weights")
    timeline.mark(grads.values(), "gradients")
    timeline.mark(_optimizer_tensors(optimizer), "optimizer state")
    if steady_state:
        timeline.as_steady_state()
    report = MemoryReport(
        parameters=sum(storage_bytes(t) for t in _unique_tensors(params).values()),
        gradients=sum(storage_bytes(g) for g in grads.values()),
        optimizer_state=optimizer_state_bytes(optimizer), activations=tally.total,
        peak=peak, device=str(device), notes=notes, timeline=timeline)
    if optimizer is not None:
        optimizer.zero_grad(set_to_none=True)
    return report


def saved_activation_bytes(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> int:
    """Bytes saved for backward by one forward pass, weights aside (chapter 1)."""
    params = list(model.parameters()) + list(model.buffers())
    weights = {t.untyped_storage().data_ptr() for t in params}
    saved = {}  # storage address -> bytes: a view and its base count once

    def pack(tensor):  # called for every tensor autograd keeps for backward
        if tensor.layout == torch.strided:
            address = tensor.untyped_storage().data_ptr()
            if address not in weights:  # weights are alive anyway
                saved[address] = tensor.untyped_storage().nbytes()
        return tensor  # keep it as it is: backward is unchanged

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = model(**move_to(batch, params[0].device)).loss
    loss.backward()  # frees what was saved
    model.zero_grad(set_to_none=True)
    return sum(saved.values())


def _is_fake(tensor: torch.Tensor) -> bool:
    """True for FakeTensors (estimates), which have no real memory behind them."""
    from torch._subclasses.fake_tensor import FakeTensor

    return isinstance(tensor, FakeTensor)
