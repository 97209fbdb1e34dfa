"""Mixed precision with torch.amp: choose by hardware, autocast + GradScaler in a step, non-finite guard (ch. 3)."""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch

from bertmem.core.devices import (
    CPU_BF16_ENV,
    CUDA_CAPABILITY_ENV,
    cpu_supports_bf16,
    cuda_available,
    device_capability,
    forced_note,
    model_device,
    move_to,
)

PRECISIONS = ("fp32", "bf16", "fp16")
REQUESTS = ("auto",) + PRECISIONS
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def autocast_context(precision: str, device_type: str):
    """torch.autocast for bf16/fp16, a null context for fp32 (chapters 1 and 3)."""
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}: use one of {PRECISIONS}")
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device_type, dtype=DTYPES[precision])


@dataclass(frozen=True)
class PrecisionChoice:
    """The precision a run uses, on which device type, why, and whether it needs loss scaling (chapter 3)."""

    precision: str
    device_type: str
    reason: str

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {self.precision!r}")
        if self.precision != "fp32" and self.device_type not in ("cpu", "cuda"):
            raise ValueError(f"{self.precision} autocast is only set up for 'cpu' and 'cuda' here, not "
                             f"{self.device_type!r}: use precision 'fp32'")

    @property
    def use_scaler(self) -> bool:
        """fp16 needs dynamic loss scaling; bf16 has fp32's exponent range and does not."""
        return self.precision == "fp16"

    @property
    def dtype(self) -> torch.dtype:
        """The autocast dtype (fp32 means autocast off)."""
        return DTYPES[self.precision]


def choose_precision(requested: str = "auto", device_type: str | None = None,
                     capability: tuple[int, int] | None = None, cpu_bf16: bool | None = None,
                     verbose: bool = True) -> PrecisionChoice:
    """auto: bf16 on Ampere+ GPUs and bf16 CPUs, fp16 + GradScaler on older GPUs, else fp32 (chapter 3)."""
    if requested not in REQUESTS:
        raise ValueError(f"unknown precision {requested!r}: use one of {REQUESTS}")
    device_type = device_type or ("cuda" if cuda_available() else "cpu")
    if device_type == "cuda":
        found = capability or device_capability()
        if found is None:
            raise ValueError("device_type 'cuda' needs a CUDA GPU (none here) or an explicit capability=(major, minor)")
        major, minor = found
        forced = forced_note(CUDA_CAPABILITY_ENV) if capability is None else ""
        bf16_ok, where = major >= 8, f"GPU with compute capability {major}.{minor}{forced}"
    elif device_type == "cpu":
        bf16_ok = cpu_supports_bf16() if cpu_bf16 is None else cpu_bf16
        forced = forced_note(CPU_BF16_ENV) if cpu_bf16 is None else ""
        where = f"CPU {'with' if bf16_ok else 'without'} native bf16{forced}"
    else:  # another accelerator: no mixed-precision policy here, fp32 unless a test asks otherwise
        bf16_ok, where = False, f"{device_type} device"
    if requested == "fp16" and device_type == "cpu":
        raise ValueError("fp16 is refused on a CPU: it needs loss scaling, and most CPUs have no fast fp16 "
                         "kernels (chapter 3 times it on yours): use precision='bf16' or 'fp32'")
    if requested == "bf16" and not bf16_ok and device_type == "cpu":
        # PyTorch would run it, emulated; how fast that is depends on the CPU, so the reader decides (chapter 3)
        raise ValueError(f"bf16 is refused on this {where}, where PyTorch would emulate it (chapter 3 times that "
                         f"against fp32): use precision 'fp32' (--precision fp32), or set {CPU_BF16_ENV}=1 to run "
                         "it emulated anyway")
    if requested == "bf16" and not bf16_ok:
        raise ValueError(f"bf16 is not supported on this {where}: use 'fp16' (GPU) or 'fp32'")
    if requested != "auto":
        choice = PrecisionChoice(requested, device_type, f"requested explicitly on a {where}")
    elif bf16_ok:
        choice = PrecisionChoice("bf16", device_type, f"{where}: bf16 keeps fp32's range, no loss scaling needed")
    elif device_type == "cuda":
        choice = PrecisionChoice("fp16", device_type, f"{where} (pre-Ampere, e.g. a T4): fp16 with GradScaler")
    else:
        # fp16 would need loss scaling, and whether it is faster depends on the CPU's kernels (chapter 3 times it)
        why = "fp16 would need loss scaling, and auto does not time it" if device_type == "cpu" \
            else "no mixed-precision policy for it"
        choice = PrecisionChoice("fp32", device_type, f"{where}: fp32 ({why})")
    if verbose:
        print(f"precision: {choice.precision} — {choice.reason}")
    return choice


class NonFiniteError(RuntimeError):
    """Training produced a non-finite loss or gradient that no loss scaler will handle."""


def check_finite(step: int, loss: float, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    """Stop with a diagnosis (step, loss, largest gradient, LR) instead of writing NaN into the weights."""
    named = [(n, p.grad.detach()) for n, p in model.named_parameters() if p.grad is not None]
    norms = torch._foreach_norm([g for _, g in named]) if named else []
    if math.isfinite(loss) and all(bool(torch.isfinite(n)) for n in norms):
        return  # the common case: one fused norm pass, no copies
    bad = [name for (name, g), n in zip(named, norms) if not torch.isfinite(n)]
    worst_name, worst = None, 0.0
    for name, g in named:
        finite = g[torch.isfinite(g)]
        value = float(finite.abs().max()) if finite.numel() else 0.0
        if value >= worst:
            worst_name, worst = name, value
    lr = optimizer.param_groups[0]["lr"]
    # a zero "largest" would point the reader at a parameter that is not the problem
    largest = (f"largest finite |grad| {worst:.3g} in {worst_name}" if worst > 0
               else "no parameter has a non-zero finite gradient")
    raise NonFiniteError(f"non-finite training state at optimizer step {step}: loss={loss}, "
                         f"{len(bad)} parameter(s) with inf/NaN gradients (first: {bad[:1]}), {largest}, "
                         f"lr={lr:.3g}. Lower the peak LR, clip gradients, or prefer bf16 over fp16")


def mixed_precision_step(model: torch.nn.Module, micro_batches: list[dict],
                         optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler,
                         dtype: torch.dtype = torch.float16,
                         max_grad_norm: float | None = 1.0) -> float:
    """One step: autocast, scaled backward per micro-batch, unscale_, clip (ch. 3)."""
    device = model_device(model)
    total = sum(len(micro["labels"]) for micro in micro_batches)
    window_loss = 0.0
    for micro in micro_batches:
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            loss = model(**move_to(micro, device)).loss  # mean over the micro-batch
        weighted = loss * len(micro["labels"]) / total  # its share of the examples
        scaler.scale(weighted).backward()  # every micro-batch: small grads stay > 0
        window_loss += weighted.item()
    scaler.unscale_(optimizer)  # true gradients: once per step, before clipping
    if max_grad_norm is not None:
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    scaler.step(optimizer)  # skipped when a gradient is inf or NaN
    scaler.update()  # halve the scale after an overflow, grow it after good steps
    optimizer.zero_grad(set_to_none=True)
    return window_loss


def half_dtype(device_type: str, capability: tuple[int, int] | None = None) -> torch.dtype:
    """bf16, or fp16 on a GPU without fast bf16 (pre-Ampere, a T4) (chapter 3)."""
    if device_type == "cuda" and choose_precision("auto", "cuda", capability, verbose=False).precision == "fp16":
        return torch.float16
    return torch.bfloat16


def pure_half(model: torch.nn.Module, dtype: torch.dtype | None = None) -> torch.nn.Module:
    """Cast every weight to half precision (Apex O2/O3's idea): no fp32 master weights (chapter 3).

    `dtype` None: what the model's device runs fast (`half_dtype`: fp16 on a T4, bf16 elsewhere).
    """
    dtype = dtype or half_dtype(model_device(model).type)
    if dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"dtype must be torch.bfloat16 or torch.float16, got {dtype}")
    return model.to(dtype)


def trace_op_dtypes(model: torch.nn.Module, batch: dict, autocast=None) -> dict[str, dict[str, int]]:
    """Which aten ops ran in which output dtype during one forward pass, e.g. under autocast (chapter 3)."""
    from collections import Counter, defaultdict

    from torch.utils._python_dispatch import TorchDispatchMode

    seen: defaultdict[str, Counter] = defaultdict(Counter)

    class Trace(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            first = out[0] if isinstance(out, (tuple, list)) and out else out
            if isinstance(first, torch.Tensor) and first.is_floating_point():
                seen[func.overloadpacket.__name__][str(first.dtype).removeprefix("torch.")] += 1
            return out

    batch = move_to(batch, model_device(model))  # the batch follows the model
    with torch.no_grad(), (autocast() if autocast is not None else contextlib.nullcontext()), Trace():
        model(**batch)
    return {op: dict(counts) for op, counts in sorted(seen.items())}


def skipped_steps(scales: list[float], init_scale: float) -> int:
    """Optimizer steps a GradScaler skipped: those after which the scale shrank (ch. 3, 6)."""
    return sum(now < before for now, before in zip(scales, [init_scale, *scales]))


def diagnose_scale_trace(scale_history: list[float], init_scale: float) -> str:
    """Read a GradScaler's scale trace: healthy, overflowing, or stuck (chapter 6)."""
    if not scale_history:
        raise ValueError(
            "empty scale history: record scaler.get_scale() after each fp16 step first"
        )
    steps = len(scale_history)
    previous = [init_scale] + list(scale_history[:-1])
    skipped = skipped_steps(scale_history, init_scale)
    final = scale_history[-1]
    summary = f"{skipped} of {steps} steps skipped; scale {init_scale:g} -> {final:g}"
    tail = min(10, steps)
    recent = zip(scale_history[-tail:], previous[-tail:])
    if all(now < before for now, before in recent):  # the scale halves every step
        return (
            f"{summary}. Every recent step overflowed, even at a scale of {final:g}: "
            "the fp16 *forward* pass overflows (values > 65504), so no loss scale can "
            "help. Use bf16, or lower the peak learning rate and clip gradients so "
            "the weights stop growing."
        )
    if skipped > steps // 4:
        return (
            f"{summary}. Frequent overflows: the scale keeps hitting fp16's range. "
            "Lower the initial scale or the peak learning rate; check for inf/NaN in "
            "the inputs."
        )
    return (
        f"{summary}. Healthy: occasional skipped steps are how dynamic loss scaling "
        "finds its scale."
    )
