"""A step profile you can read (chapter 5, A3): for a few steady micro-steps, how busy the device was, how many
kernels each micro-step launched, how many shapes the steps met, and how much time fell outside the forward and
backward passes. On a CPU "kernels" are the aten operators PyTorch ran; on CUDA, the kernels the GPU ran."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerActivity, profile

from bertmem.core.devices import model_device, move_to, synchronize
from bertmem.loop.precision import autocast_context


@dataclass(frozen=True)
class StepProfile:
    """What `profile_steps` measured over its micro-steps (chapter 5, A3)."""

    micro_steps: int
    wall_s: float
    forward_s: float
    backward_s: float
    device_busy_s: float | None  # CUDA kernels' own time; None on a CPU (no device apart from the host)
    kernels: int
    shapes: int

    def lines(self) -> list[str]:
        """What the tool prints."""
        outside = self.wall_s - self.forward_s - self.backward_s
        busy = ("device busy: n/a on a CPU" if self.device_busy_s is None
                else f"GPU busy {self.device_busy_s / self.wall_s:.0%} of the wall time")
        return [f"{self.micro_steps} micro-steps in {self.wall_s:.3f} s ({1000 * self.wall_s / self.micro_steps:.1f} "
                f"ms each), {self.shapes} distinct shapes", busy,
                f"kernels per micro-step: {self.kernels / self.micro_steps:.0f}",
                f"outside forward and backward (optimizer, data, waits): {outside / self.wall_s:.0%} of the time"]


def timed(device: torch.device, work) -> float:
    """Seconds `work()` takes, the device drained before and after."""
    synchronize(device)
    start = time.perf_counter()
    work()
    synchronize(device)
    return time.perf_counter() - start


def profile_steps(model: torch.nn.Module, batches: list[dict], optimizer: torch.optim.Optimizer,
                  precision: str = "fp32", warmup: int = 2) -> StepProfile:
    """Train `model` on `batches` (each one micro-step and one optimizer step): `warmup` of them first, then the
    rest twice — timed without the profiler (wall, forward, backward; the device drained around each pass, a
    small cost the real loop does not pay), then profiled for the kernels and the device's busy time
    (chapter 5, A3)."""
    if len(batches) <= warmup:
        raise ValueError(f"need more than {warmup} batches (the warm-up), got {len(batches)}")
    device = model_device(model)
    model.train()

    def step(batch: dict) -> tuple[float, float]:
        out = {}

        def run_forward() -> None:
            with autocast_context(precision, device.type):
                out["loss"] = model(**move_to(batch, device)).loss

        forward = timed(device, run_forward)
        backward = timed(device, lambda: out["loss"].backward())
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return forward, backward

    for batch in batches[:warmup]:
        step(batch)
    measured = batches[warmup:]
    times: list[tuple[float, float]] = []
    wall = timed(device, lambda: times.extend(step(batch) for batch in measured))
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        profiled_wall = timed(device, lambda: [step(batch) for batch in measured])
    events = prof.key_averages()
    if device.type == "cuda":
        gpu = [e for e in events if e.device_type == torch.autograd.DeviceType.CUDA
               and not e.key.startswith(("Memcpy", "Memset"))]  # kernels, not copies
        if not gpu:
            raise RuntimeError("the profiler recorded no CUDA kernel (CUPTI unavailable?): no busy share to give")
        kernels = sum(e.count for e in gpu)
        busy = sum(e.self_device_time_total for e in gpu) / 1e6 * wall / profiled_wall  # as a share of the wall
    else:
        kernels, busy = sum(e.count for e in events if e.key.startswith("aten::")), None
    return StepProfile(micro_steps=len(measured), wall_s=wall, forward_s=sum(f for f, _ in times),
                       backward_s=sum(b for _, b in times), device_busy_s=busy, kernels=kernels,
                       shapes=len({tuple(b["input_ids"].shape) for b in measured}))
