"""The bottom floor: devices (every CUDA-only call, with its CPU answer), Ctrl-C and SIGTERM, one writer per
output folder, fault injection, flags generated from dataclasses, runtime (seeds, progress bars, where runs write),
byte units.
"""

from bertmem.core.devices import cuda_free_bytes, empty_cache, model_device, move_to, resolve_device, synchronize
from bertmem.core.faults import interrupt_after, out_of_memory_above
from bertmem.core.interrupts import stops_on_sigterm
from bertmem.core.locks import FolderInUse, FolderLock
from bertmem.core.runtime import (
    on_colab,
    output_folder,
    shown_folder,
    progress,
    quiet_bitsandbytes_notice,
    seed_everything,
    where_runs_live,
)
from bertmem.core.units import GIB, MIB

__all__ = ["GIB", "MIB", "FolderInUse", "FolderLock", "cuda_free_bytes", "empty_cache", "interrupt_after",
    "model_device", "move_to", "on_colab", "out_of_memory_above", "output_folder", "shown_folder", "progress",
    "quiet_bitsandbytes_notice", "resolve_device", "seed_everything", "stops_on_sigterm", "synchronize",
    "where_runs_live"]
