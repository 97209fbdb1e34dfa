"""Memory: measured (saved tensors, CUDA peaks), over the step (timeline), counted (analytic), estimated
(FakeTensorMode), sharded, the one GPU table (cards) and the planner.
"""

from bertmem.memory.analytic import analytic_step_memory, count_bert_parameters, state_bytes_per_value
from bertmem.memory.cards import CARD_MEMORY, CARDS, CUDA_CONTEXT_BYTES, Card, card_for, parse_memory
from bertmem.memory.estimate import batch_for_peak, estimate_step_memory, model_config, peak_line
from bertmem.memory.long_inputs import long_input_estimates, long_position_config
from bertmem.memory.measure import MemoryReport, measure_step_memory, saved_activation_bytes
from bertmem.memory.planner import (
    ALLOCATOR_MARGIN,
    FIT_CARDS,
    PlanRequest,
    attempt_training_step,
    estimate_for,
    estimated_rows,
    fits_column,
    plan_micro_batch,
)
from bertmem.memory.sharding import (
    SHARDED,
    STRATEGIES,
    StateBytes,
    largest_parameter,
    offload_bytes,
    per_device_bytes,
    reduce_buffer_bytes,
    sharding_table,
)
from bertmem.memory.timeline import record_timeline

__all__ = ["ALLOCATOR_MARGIN", "CARDS", "CARD_MEMORY", "CUDA_CONTEXT_BYTES", "Card", "FIT_CARDS", "MemoryReport",
    "PlanRequest", "fits_column",
    "SHARDED", "STRATEGIES", "StateBytes", "analytic_step_memory", "attempt_training_step", "card_for",
    "batch_for_peak", "count_bert_parameters", "estimate_for", "estimate_step_memory", "estimated_rows",
    "largest_parameter", "long_input_estimates", "long_position_config", "measure_step_memory", "model_config",
    "offload_bytes", "parse_memory", "peak_line", "reduce_buffer_bytes",
    "per_device_bytes", "plan_micro_batch", "record_timeline", "saved_activation_bytes", "sharding_table",
    "state_bytes_per_value"]
