"""A second device on a CPU-only machine, to catch device mixing in CI (which has no GPU).

A CPU build of torch cannot pretend to have CUDA: `Tensor.to("cuda")` and autograd need a CUDA device guard that
is not compiled in. The `lazy` device (LazyTensor's, in every build, never used by this project) has one, and unlike
`meta` it is not special-cased by `load_state_dict` — so inside `SecondDevice()` (a `TorchDispatchMode`) a tensor
created on or moved to `lazy` becomes an `OnSecondDevice` tensor: real CPU data that reports `device='lazy'`.
An operation that combines one with a plain CPU tensor (more than a 0-dim scalar, which
CUDA accepts too) raises `DeviceMixingError`, as a GPU raises "Expected all tensors to be on the same device".
Moving with `.to()`, `copy_` or loading a state dict is the legal way across, as on a real GPU.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

DEVICE = torch.device("lazy")
aten = torch.ops.aten
MOVES = {aten._to_copy.default, aten.copy_.default, aten.lift_fresh.default, aten.detach.default,
         aten.alias.default, aten._local_scalar_dense.default}


class DeviceMixingError(RuntimeError):
    """A CPU tensor reached an operation on tensors that live on the second device."""


class OnSecondDevice(torch.Tensor):
    """CPU data that reports the second device (`lazy`)."""

    @staticmethod
    def __new__(cls, data: torch.Tensor):
        return torch.Tensor._make_wrapper_subclass(cls, data.shape, strides=data.stride(),
                                                   storage_offset=data.storage_offset(), dtype=data.dtype,
                                                   layout=data.layout, device=DEVICE,
                                                   requires_grad=data.requires_grad)

    def __init__(self, data: torch.Tensor):
        self.elem = data

    def __repr__(self) -> str:
        return f"OnSecondDevice({self.elem!r})"

    def __reduce_ex__(self, protocol):  # saved like a GPU tensor that is loaded with map_location="cpu"
        return self.elem.detach().__reduce_ex__(protocol)

    def __tensor_flatten__(self):
        return ["elem"], None

    @staticmethod
    def __tensor_unflatten__(inner, meta, outer_size, outer_stride):
        return OnSecondDevice(inner["elem"])

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        with SecondDevice():  # reached outside the mode (e.g. from autograd's engine): same rules
            return func(*args, **(kwargs or {}))


def _unwrap(value):
    return value.elem if isinstance(value, OnSecondDevice) else value


def _wrap(value):
    if isinstance(value, torch.Tensor) and not isinstance(value, OnSecondDevice):
        return OnSecondDevice(value)
    return value


def _targets_second_device(device) -> bool:
    return device is not None and torch.device(device).type == DEVICE.type


class SecondDevice(TorchDispatchMode):
    """Inside: `lazy` tensors hold real data, and mixing them with CPU tensors raises `DeviceMixingError`."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        flat = tree_flatten((args, kwargs))[0]
        on_second = [t for t in flat if isinstance(t, OnSecondDevice)]
        on_cpu = [t for t in flat if isinstance(t, torch.Tensor) and not isinstance(t, OnSecondDevice)
                  and t.dim() > 0]
        if func not in MOVES and on_second and on_cpu:
            raise DeviceMixingError(f"{func}: a CPU tensor of shape {tuple(on_cpu[0].shape)} met a tensor on the "
                                    "model's device; move it to the model's device first")
        target = kwargs.get("device")
        if _targets_second_device(target):
            kwargs["device"] = torch.device("cpu")
        out = func(*tree_map(_unwrap, args), **tree_map(_unwrap, kwargs))
        if func is aten.copy_.default:  # in place: the destination keeps its device
            return args[0]
        if target is not None:
            return tree_map(_wrap, out) if _targets_second_device(target) else out
        return tree_map(_wrap, out) if on_second else out
