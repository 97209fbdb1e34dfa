"""Fault injection for demonstrations and tests: a Ctrl-C or a CUDA out-of-memory error on cue (chapter 5b)."""

from __future__ import annotations

import torch


def interrupt_after(model: torch.nn.Module, calls: int) -> torch.nn.Module:
    """Make the model's `calls`-th forward pass raise KeyboardInterrupt, as a Ctrl-C would (chapter 5b)."""
    if calls < 1:
        raise ValueError(f"calls must be >= 1, got {calls}")
    forward, count = model.forward, [0]

    def interrupting_forward(*args, **kwargs):
        count[0] += 1
        if count[0] == calls:
            raise KeyboardInterrupt
        return forward(*args, **kwargs)

    model.forward = interrupting_forward
    return model


def out_of_memory_above(model: torch.nn.Module, max_examples: int) -> torch.nn.Module:
    """Make forward passes on more than `max_examples` examples raise torch.OutOfMemoryError (chapter 5b)."""
    if max_examples < 0:
        raise ValueError(f"max_examples must be >= 0, got {max_examples}")
    forward = model.forward

    def small_card_forward(*args, **kwargs):
        if kwargs["input_ids"].shape[0] > max_examples:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return forward(*args, **kwargs)

    model.forward = small_card_forward
    return model
