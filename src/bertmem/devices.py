"""Which devices this machine has, with an answer on CPU-only machines (chapters 0 and 5)."""

from __future__ import annotations

import torch


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
