"""Which devices this machine has, with an answer on CPU-only machines (chapters 0 and 5)."""

from __future__ import annotations

import contextlib
import os
from typing import Any, Callable

import torch

# What a machine can do, forced from the environment so that one machine runs the other kind's branches (tests, CI,
# a reader who wants to see what another machine would do). Unset: the hardware answers.
CPU_BF16_ENV = "BERTMEM_CPU_BF16"  # 1: treat this CPU as having native bf16; 0: as having none
CUDA_CAPABILITY_ENV = "BERTMEM_CUDA_CAPABILITY"  # e.g. 7.5: treat this machine's GPU as a T4's generation
# bytes this process's allocator may hold (set with `torch.cuda.set_per_process_memory_fraction`, which
# `mem_get_info` does not see): what `cuda_free_bytes` answers within
MEMORY_CAP_ENV = "BERTMEM_CUDA_MEMORY_CAP"
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def forced_flag(name: str) -> bool | None:
    """An on/off capability forced by the environment variable `name`; None when unset (chapter 3)."""
    raw = os.environ.get(name, "").strip().lower()
    if raw == "":
        return None
    if raw in _TRUE + _FALSE:
        return raw in _TRUE
    raise ValueError(f"{name}={os.environ[name]!r} is neither on nor off: set it to 1 or 0, or unset it")


def forced_capability() -> tuple[int, int] | None:
    """A GPU compute capability forced by $BERTMEM_CUDA_CAPABILITY ("7.5"); None when unset (chapter 3)."""
    raw = os.environ.get(CUDA_CAPABILITY_ENV, "").strip()
    if raw == "":
        return None
    major, dot, minor = raw.partition(".")
    if not (dot and major.isdigit() and minor.isdigit()):
        raise ValueError(f"{CUDA_CAPABILITY_ENV}={raw!r} is not a compute capability: write it as major.minor "
                         "(7.5 for a T4, 8.0 for an A100), or unset it")
    return int(major), int(minor)


def native_cpu_bf16() -> bool:
    """True when oneDNN reports native bf16 kernels on this CPU (AVX512-BF16 or AMX), whatever is forced."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def other_cpu_bf16() -> str:
    """The $BERTMEM_CPU_BF16 value that makes this CPU answer as the other kind would: '0' where bf16 is native,
    '1' where it is not (CI's second unit stage, the GPU-profile dry run)."""
    return "0" if native_cpu_bf16() else "1"


def cpu_supports_bf16() -> bool:
    """Whether the book treats this CPU as running bf16 natively: $BERTMEM_CPU_BF16 when set, else oneDNN's
    answer (chapter 3). Without native kernels PyTorch still runs bf16, emulated (chapter 3 times it)."""
    forced = forced_flag(CPU_BF16_ENV)
    return native_cpu_bf16() if forced is None else forced


def forced_note(name: str) -> str:
    """" (forced: NAME=value)" when the environment forces a capability, else "": said wherever it decides."""
    value = os.environ.get(name, "").strip()
    return f" (forced: {name}={value})" if value else ""


def require_device(device: str | torch.device) -> torch.device:
    """The torch.device for `device`, or a one-line error when this machine cannot run on it (chapters 0, 5)."""
    try:
        resolved = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"device {device!r} is not a torch device: use 'cpu' or 'cuda'") from err
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {str(device)!r} was asked for, but torch sees no CUDA GPU here "
                         "(torch.cuda.is_available() is False): use device 'cpu' (--device cpu), or run on a "
                         "machine with a GPU and a CUDA build of torch")
    if resolved.type == "cuda" and resolved.index is not None and resolved.index >= torch.cuda.device_count():
        raise ValueError(f"device {str(device)!r} does not exist: this machine has "
                         f"{torch.cuda.device_count()} CUDA device(s)")
    if resolved.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError("device 'mps' was asked for, but Apple's MPS backend is not available: use 'cpu'")
    return resolved


def cuda_free_bytes(device: str | torch.device = "cuda") -> int | None:
    """Memory a new step could use on a CUDA device: free plus what PyTorch caches unused; None without a GPU.

    The CUDA context of this process already exists then, so it is not part of the answer (chapter 5).
    """
    if not torch.cuda.is_available():
        return None
    device = torch.device(device)
    free, _total = torch.cuda.mem_get_info(device)
    reserved = torch.cuda.memory_reserved(device)
    cached = reserved - torch.cuda.memory_allocated(device)
    cap = os.environ.get(MEMORY_CAP_ENV)  # a process capped to a smaller card's memory (a T4's, on a big card)
    if cap:
        free = min(free, max(0, int(cap) - reserved))
    return int(free + cached)


# The CUDA-only calls of the package, each with its answer on a machine without a GPU (all chapters).

def model_device(model: torch.nn.Module) -> torch.device:
    """Where a model lives: the device of its first parameter (or buffer); the CPU for an empty module."""
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device
    return torch.device("cpu")


def resolve_device(model: torch.nn.Module, requested: str | torch.device | None = None) -> torch.device:
    """The device helpers run on: the model's, or `requested` when given — which must then be the model's.

    Helpers never move a model behind the reader's back: place it once (`model.to(device)`), then let every
    helper follow it (chapter 0).
    """
    device = model_device(model)
    if requested is None:
        return device
    wanted = torch.device(requested)
    same = wanted.type == device.type and (wanted.index is None or wanted.index == device.index)
    if not same:
        raise ValueError(f"the model is on {device}, but {wanted} was asked for: move the model once "
                         f"(model.to({str(wanted)!r})) and drop the device argument")
    return device


def on_cuda(device: str | torch.device | None) -> bool:
    """Whether a run's device setting names a CUDA device ('cuda', 'cuda:1'); None and 'cpu' do not."""
    return device is not None and torch.device(device).type == "cuda"


def cuda_available() -> bool:
    """Whether a CUDA GPU is usable here: the one place the package asks (profiles, precision, backends)."""
    return torch.cuda.is_available()


def cuda_rng_state() -> list[torch.Tensor] | None:
    """Every CUDA generator's state for a checkpoint; None on a machine without a GPU (chapter 5b)."""
    return torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None


def set_cuda_rng_state(states: list[torch.Tensor] | None) -> None:
    """Put back the CUDA generators' states; a checkpoint resumed on the CPU has none to restore (chapter 5b)."""
    if states is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states)


def synchronize(device: torch.device) -> None:
    """Wait for queued GPU work (timing); nothing to wait for on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def reset_peak_memory(device: torch.device) -> None:
    """Start a new peak-memory window on a GPU; the CPU keeps no such statistic."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)


def peak_memory_bytes(device: torch.device) -> int | None:
    """`torch.cuda.max_memory_allocated` since the last reset; None on the CPU (no allocator statistics)."""
    return torch.cuda.max_memory_allocated(device) if device.type == "cuda" else None


def peak_reserved_bytes(device: torch.device) -> int | None:
    """`torch.cuda.max_memory_reserved` since the last reset: the allocator's cached blocks at their most; None
    on the CPU (A3)."""
    return torch.cuda.max_memory_reserved(device) if device.type == "cuda" else None


def reserved_bytes(device: torch.device) -> int | None:
    """What PyTorch's caching allocator holds now (`torch.cuda.memory_reserved`); None on the CPU (A3)."""
    return torch.cuda.memory_reserved(device) if device.type == "cuda" else None


def _nvml(read: Callable[[Any], Any]) -> Any:
    """`read(pynvml)` between nvmlInit and nvmlShutdown; None where NVML cannot be read (no nvidia-ml-py, no
    driver library)."""
    try:
        import pynvml  # ships with CUDA machines' images (nvidia-ml-py); absent on CPU-only ones

        pynvml.nvmlInit()
        try:
            return read(pynvml)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # the caller's row says None instead of a guess
        return None


def card_used_bytes(device: torch.device) -> int | None:
    """The card's used memory as nvidia-smi reports it (NVML: every process, the CUDA context included); None on
    the CPU or where NVML cannot be read (A3). Index `device.index` as NVML counts cards (one-card machines)."""
    if device.type != "cuda":
        return None
    return _nvml(lambda nvml: int(nvml.nvmlDeviceGetMemoryInfo(nvml.nvmlDeviceGetHandleByIndex(device.index or 0))
                                  .used))


def driver_version() -> str | None:
    """The NVIDIA driver's version (NVML), or None without one (A3)."""
    return _nvml(lambda nvml: str(nvml.nvmlSystemGetDriverVersion()))


def cuda_initialized() -> bool:
    """Whether this process has created its CUDA context yet: its size can be measured only before (A3)."""
    return torch.cuda.is_available() and torch.cuda.is_initialized()


def set_cudnn_attention(enabled: bool) -> None:
    """Allow or forbid cuDNN's kernel among SDPA's choices for the rest of the process (A3); no effect on a CPU."""
    torch.backends.cuda.enable_cudnn_sdp(enabled)


# PyTorch puts cuDNN's attention first in SDPA's order with a runtime cuDNN newer than 9.15 on sm90- and
# sm100-class cards (`check_prefer_cudnn_attention` in aten/src/ATen/native/transformers/cuda/sdp_utils.cpp; older
# releases chose differently), and runs it in fp16 and bf16 only (`check_dtypes_low_precision`).
CUDNN_PREFERRED_AFTER = 91500
CUDNN_FIRST_MAJORS = (9, 10)


def cudnn_runtime_version() -> int | None:
    """The cuDNN version PyTorch loaded (91600 for 9.16.0); None without a CUDA GPU (chapter 5, A3)."""
    return torch.backends.cudnn.version() if torch.cuda.is_available() else None


def cudnn_attention_first(capability: tuple[int, int] | None, cudnn_version: int | None, precision: str) -> bool:
    """Whether PyTorch would try cuDNN's attention first on a card of this capability and cuDNN version, in this
    precision: the source's rule, for any card (chapter 5, A3)."""
    return (capability is not None and capability[0] in CUDNN_FIRST_MAJORS and cudnn_version is not None
            and cudnn_version > CUDNN_PREFERRED_AFTER and precision in ("fp16", "bf16"))


def sdpa_picks_cudnn(device: torch.device, dtype: torch.dtype, heads: int, head_dim: int, dropout: float) -> bool:
    """Whether this machine's SDPA picks cuDNN's attention for a padded batch of this model's attention shape:
    PyTorch's own dispatcher asked (`torch._fused_sdp_choice`); False on a CPU (chapter 5, A3)."""
    if device.type != "cuda" or not hasattr(torch, "_fused_sdp_choice"):
        return False
    from torch.nn.attention import SDPBackend

    q = torch.zeros(2, heads, 64, head_dim, device=device, dtype=dtype, requires_grad=True)
    mask = torch.ones(2, 1, 64, 64, device=device, dtype=torch.bool)
    mask[0, ..., 32:] = False  # a padded row, as real batches have
    return torch._fused_sdp_choice(q, q, q, mask, dropout) == SDPBackend.CUDNN_ATTENTION.value


def model_picks_cudnn(config, device: torch.device, dtype: torch.dtype) -> bool:
    """Whether SDPA picks cuDNN's attention for this model configuration's attention on `device` (chapter 5)."""
    heads = config.num_attention_heads
    return sdpa_picks_cudnn(device, dtype, heads, config.hidden_size // heads,
                            getattr(config, "attention_probs_dropout_prob", 0.0))


# cuBLAS's reproducible workspace setting. PyTorch releases before pytorch/pytorch#161749 (merged October 2025)
# refuse a cuBLAS call under strict deterministic algorithms unless it is :4096:8 or :16:8, and read it once, at the
# process's first cuBLAS call; later releases give each handle and stream its own workspace and check nothing.
CUBLAS_WORKSPACE_ENV = "CUBLAS_WORKSPACE_CONFIG"
DETERMINISTIC_CUBLAS = ":4096:8"
_BEFORE_DETERMINISTIC: list[dict[str, Any]] = []  # what the process had before a run switched them on (one entry)


def use_deterministic_algorithms(enabled: bool) -> None:
    """`TrainConfig.deterministic`, applied where every backend sets up its run (chapter 5b).

    On: `torch.use_deterministic_algorithms(True, warn_only=False)` and $CUBLAS_WORKSPACE_CONFIG=:4096:8 where
    unset. Strict, not warn-only: only then do SDPA's flash and memory-efficient backward passes take their
    deterministic paths and cuDNN's attention (no deterministic backward in PyTorch) drop out of SDPA's choice;
    warn-only keeps the fast kernels and warns (PyTorch's reproducibility notes, "CUDA Scaled Dot Product
    Attention"). An operation without a deterministic version then stops the run with PyTorch's error naming it.
    On a CPU the variable is unused and this book's kernels give the same numbers either way (tests/test_determinism).

    Off: if a run of this process switched them on, what the process had before comes back; otherwise nothing
    changes (a reader's own `torch.use_deterministic_algorithms` stays). Like the seed, the setting holds for the
    rest of the process rather than for one call: chapter 5 shows `train` whole, and every run sets it anew.
    """
    if enabled:
        if not _BEFORE_DETERMINISTIC:
            _BEFORE_DETERMINISTIC.append({"on": torch.are_deterministic_algorithms_enabled(),
                                          "warn_only": torch.is_deterministic_algorithms_warn_only_enabled(),
                                          "cublas": os.environ.get(CUBLAS_WORKSPACE_ENV)})
        # PyTorch caches the workspace size at the process's first cuBLAS call: in a process that already used
        # the GPU (a notebook's earlier cells) this takes effect only after a restart; set it before the kernel
        os.environ.setdefault(CUBLAS_WORKSPACE_ENV, DETERMINISTIC_CUBLAS)
        torch.use_deterministic_algorithms(True, warn_only=False)
    elif _BEFORE_DETERMINISTIC:
        before = _BEFORE_DETERMINISTIC.pop()
        torch.use_deterministic_algorithms(before["on"], warn_only=before["warn_only"])
        if before["cublas"] is None:
            os.environ.pop(CUBLAS_WORKSPACE_ENV, None)
        else:
            os.environ[CUBLAS_WORKSPACE_ENV] = before["cublas"]


@contextlib.contextmanager
def cudnn_attention(enabled: bool):
    """cuDNN's attention allowed or forbidden among SDPA's choices for the block, then as it was (chapter 5)."""
    before = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(enabled)
    try:
        yield
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)


def card_properties(device: torch.device) -> dict[str, Any]:
    """Name, compute capability, memory and CUDA version of a GPU; just the name 'cpu' on the CPU (A3)."""
    if device.type != "cuda":
        return {"gpu": "cpu"}
    return {"gpu": torch.cuda.get_device_name(device), "capability": list(torch.cuda.get_device_capability(device)),
            "card memory": torch.cuda.get_device_properties(device).total_memory, "cuda": torch.version.cuda,
            "driver": driver_version()}


def empty_cache(device: torch.device | None = None) -> None:
    """Give cached GPU blocks back after an out-of-memory error; nothing to give back on the CPU."""
    if (device is None or torch.device(device).type == "cuda") and torch.cuda.is_available():
        torch.cuda.empty_cache()


def device_name(device: torch.device) -> str:
    """The GPU's name, or 'cpu'."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def device_capability(device: torch.device | None = None) -> tuple[int, int] | None:
    """A CUDA GPU's compute capability (7.5 on a T4, 8.0 on an A100), or the one $BERTMEM_CUDA_CAPABILITY
    forces; None on the CPU."""
    if (device is not None and torch.device(device).type != "cuda") or not torch.cuda.is_available():
        return None
    return forced_capability() or torch.cuda.get_device_capability(device)


def move_to(batch: dict[str, Any], device: torch.device | str) -> dict[str, Any]:
    """Every tensor of a batch on `device` (the model's); other values unchanged (chapters 0 and 2)."""
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
