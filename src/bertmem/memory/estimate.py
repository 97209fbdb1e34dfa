"""Estimate one training step on a CUDA GPU without allocating memory, under FakeTensorMode (chapter 1)."""

from __future__ import annotations

import contextlib
import copy
import functools
import hashlib
import inspect
import json
import os
import pickle
import warnings
from pathlib import Path
from typing import Callable, Iterator

import torch

from bertmem.loop.combined import prepare_model
from bertmem.loop.config import TrainConfig
from bertmem.loop.optim import make_optimizer
from bertmem.loop.precision import PRECISIONS, autocast_context
from bertmem.memory.analytic import _check_sizes, adamw8bit_state_like, quantization_maps
from bertmem.memory.measure import MemoryReport, measure_step_memory
from bertmem.memory.speed import ModelWork
from bertmem.memory.stored import estimator_versions, versions_text
from bertmem.model.known import attention_kernels, known_config, takes_token_types
from bertmem.model.loading import classifier_from_config, resolve_model_source
from bertmem.model.matmuls import counted_shape, non_embedding_parameters


def model_config(config_or_model_id, num_labels: int = 2):
    """A transformers config from a config object, a known checkpoint's id (`bertmem.model.known`), or a local
    or Hub model (chapter 1)."""
    from transformers import AutoConfig, PretrainedConfig

    if isinstance(config_or_model_id, PretrainedConfig):
        return config_or_model_id
    if not isinstance(config_or_model_id, str):
        raise TypeError(f"expected a transformers config or a model id, got {type(config_or_model_id).__name__}")
    known = None if Path(config_or_model_id).expanduser().is_dir() else known_config(config_or_model_id, num_labels)
    if known is not None:  # vendored: no download, works offline (a local folder of that name comes first)
        return known
    return AutoConfig.from_pretrained(resolve_model_source(config_or_model_id), num_labels=num_labels)


def parameter_count(config_or_model_id, num_labels: int = 2) -> int:
    """Parameters of the sequence classifier, counted on the meta device: nothing allocated (setup cells)."""
    return model_work(config_or_model_id, num_labels=num_labels).parameters


def model_work(config_or_model_id, lora_r: int | None = None, freeze_layers: int = 0,
               num_labels: int = 2) -> ModelWork:
    """What one training example costs the classifier as a run prepares it (LoRA's adapters, frozen layers): its
    matmul shape, counted on the meta device (nothing allocated), with its parameters and its non-embedding
    parameters, which the fallback 6 · non-embedding parameters · tokens multiplies for an architecture the count
    does not cover (the time estimates: `bertmem plan`, the "Will it fit?" page, the chapters' minutes)."""
    if isinstance(config_or_model_id, str):  # a name: counted once per process (setup cells count ~20 runs)
        return _named_model_work(config_or_model_id, lora_r, freeze_layers, num_labels)
    return _count_work(config_or_model_id, lora_r, freeze_layers, num_labels)


@functools.lru_cache(maxsize=256)
def _named_model_work(model_id: str, lora_r: int | None, freeze_layers: int, num_labels: int) -> ModelWork:
    return _count_work(model_id, lora_r, freeze_layers, num_labels)


def _count_work(config_or_model_id, lora_r: int | None, freeze_layers: int, num_labels: int) -> ModelWork:
    config = model_config(config_or_model_id, num_labels)
    # the kernel changes no weight (DeBERTa has eager only); ModernBERT's two both run padded batches
    with torch.device("meta"):
        model = classifier_from_config(config, attention_kernels(config)[-1])
        parameters = sum(p.numel() for p in model.parameters())  # the classifier's own: before LoRA's adapters
        non_embedding = non_embedding_parameters(model)  # Kaplan et al.'s N: the fallback's, before the adapters
        prepare_model(model, TrainConfig(lora_r=lora_r, freeze_layers=freeze_layers))
    return ModelWork(parameters=parameters, shape=counted_shape(model), non_embedding=non_embedding)


def _fused_sdpa(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """The memory-efficient fused kernel a CUDA GPU runs for BERT's padded attention (estimates only)."""
    if attn_mask is not None:
        attn_mask = attn_mask.to(query.dtype)
    return torch.ops.aten._scaled_dot_product_efficient_attention(
        query, key, value, attn_mask, True, dropout_p, is_causal, scale=scale)[0]


def _cuda_dropout(original):
    """Dropout that saves a bool mask, as CUDA's fused kernel does (the CPU's saves a float mask)."""
    def dropout(input, p=0.5, training=True, inplace=False):
        if training and p > 0:
            return torch.native_dropout(input, p, True)[0]
        return original(input, p, training, inplace)
    return dropout


def _cuda_layer_norm(original):
    """layer_norm in fp32 under autocast, as CUDA's autocast runs it (the CPU's keeps bf16)."""
    def layer_norm(input, *args, **kwargs):
        if torch.is_autocast_enabled("cpu"):
            with torch.autocast("cpu", enabled=False):
                args = [a.float() if isinstance(a, torch.Tensor) else a for a in args]
                return original(input.float(), *args, **kwargs)
        return original(input, *args, **kwargs)
    return layer_norm


@contextlib.contextmanager
def _cuda_like_kernels(attention: str, device: str) -> Iterator[None]:
    """Swap in the CUDA kernel choices that differ from the CPU's for one estimate (no-op for device='cpu')."""
    functional = torch.nn.functional
    originals = {name: getattr(functional, name) for name in ("scaled_dot_product_attention", "dropout", "layer_norm")}
    if device == "cuda":
        if attention == "sdpa":
            functional.scaled_dot_product_attention = _fused_sdpa
        functional.dropout = _cuda_dropout(originals["dropout"])
        functional.layer_norm = _cuda_layer_norm(originals["layer_norm"])
    try:
        yield
    finally:
        for name, fn in originals.items():
            setattr(functional, name, fn)


ESTIMATED_OPTIMIZERS = ("adamw", "adamw8bit", "adafactor", "sgd", "none")


@contextlib.contextmanager
def _longformer_global_cls(config) -> Iterator[None]:
    """Longformer's two questions about the data, answered as its classifier asks them: [CLS], and only [CLS],
    attends globally in every row (chapter 9). FakeTensorMode cannot answer them (`.item()`, `.nonzero()`)."""
    if config.model_type != "longformer":
        yield
        return
    from torch._subclasses.fake_tensor import FakeTensor
    from transformers.models.longformer import modeling_longformer as longformer

    attention, item, own_item = longformer.LongformerSelfAttention, torch.Tensor.item, "item" in vars(torch.Tensor)
    indices = vars(attention).get("_get_global_attn_indices")
    if indices is None:
        raise NotImplementedError("this transformers' Longformer has no _get_global_attn_indices: its estimate needs "
                                  "updating (bertmem.memory.estimate._longformer_global_cls)")

    def any_global(tensor):  # `is_index_global_attn.flatten().any().item()`: yes, [CLS]
        if isinstance(tensor, FakeTensor) and tensor.dtype == torch.bool and tensor.numel() == 1:
            return True
        return item(tensor)

    def cls_indices(is_index_global_attn):  # one global token, position 0, per row; none padded
        rows = torch.arange(is_index_global_attn.shape[0], device=is_index_global_attn.device)
        first = torch.zeros_like(rows)
        return 1, (rows, first), (rows, first), (rows[:0], rows[:0])

    torch.Tensor.item, attention._get_global_attn_indices = any_global, staticmethod(cls_indices)
    try:
        yield
    finally:
        attention._get_global_attn_indices = indices
        if own_item:
            torch.Tensor.item = item
        else:  # inherited from torch's C base class: remove the override
            del torch.Tensor.item


@contextlib.contextmanager
def _fake_step(config_or_model_id, batch_size: int, seq_len: int, attention: str, optimizer: str,
               gradient_checkpointing: bool, attention_dropout: float | None, num_labels: int, device: str,
               lora_r: int | None = None, freeze_layers: int = 0):
    """A FakeTensor model, batch and optimizer for one estimated step (no memory allocated)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from transformers import AutoModelForSequenceClassification

    config = copy.deepcopy(model_config(config_or_model_id, num_labels))
    _check_sizes(batch_size, seq_len, config)
    if attention not in attention_kernels(config):
        raise ValueError(f"{config.model_type} has no {attention} attention in transformers (it has "
                         f"{', '.join(attention_kernels(config))}): use attention='eager'")
    if attention_dropout is not None:  # BERT's name for it; DistilBERT and ModernBERT call it attention_dropout
        bert_name = hasattr(config, "attention_probs_dropout_prob")
        setattr(config, "attention_probs_dropout_prob" if bert_name else "attention_dropout", attention_dropout)
    if config.problem_type is None:  # else DeBERTa's loss asks which labels are valid (nonzero): no fake version
        config.problem_type = "single_label_classification" if config.num_labels > 1 else "regression"
    config.use_cache = False  # an encoder caches nothing; silences the checkpointing notice
    with torch.device("meta"):
        model = AutoModelForSequenceClassification.from_config(config, attn_implementation=attention)
        token_types = takes_token_types(model, config)
        # the levers and checkpointing exactly as a real run prepares them (on meta: peft's layers need real shapes)
        recipe = TrainConfig(lora_r=lora_r, freeze_layers=freeze_layers, gradient_checkpointing=gradient_checkpointing)
        prepare_model(model, recipe)
    with (FakeTensorMode(allow_non_fake_inputs=True), _cuda_like_kernels(attention, device),
          _longformer_global_cls(config)):
        model.to_empty(device="cpu")
        model.train()
        ids = torch.zeros(batch_size, seq_len, dtype=torch.long)
        batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                 "labels": torch.zeros(batch_size, dtype=torch.long)}
        if token_types:  # what the model's tokenizer gives it
            batch["token_type_ids"] = torch.zeros_like(ids)
        trainable = [p for p in model.parameters() if p.requires_grad]
        opt = {"adamw": lambda p: torch.optim.AdamW(p, foreach=False),
               "adafactor": lambda p: make_optimizer(p, "adafactor"),
               "adamw8bit": _adamw8bit_stand_in,
               "sgd": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, foreach=False),
               "none": lambda p: None}[optimizer](trainable)
        yield model, batch, opt


def _adamw8bit_stand_in(params: list[torch.Tensor]) -> torch.optim.Optimizer:
    """An optimizer holding bitsandbytes' 8-bit AdamW state layout (its kernels have no fake-tensor version).

    The state exists before the step, as in every step after the first; the update itself (lr 0) works in
    place like bitsandbytes' block-wise kernel, so the estimate counts the state, not the kernel's scratch.
    """
    opt = torch.optim.SGD(params, lr=0.0, foreach=False)
    for index, param in enumerate(params):
        opt.state[param] = {**adamw8bit_state_like(param), **(quantization_maps(param.device) if index == 0 else {})}
    return opt


def tracker_step_peak(config_or_model_id, batch_size: int, seq_len: int, precision: str = "fp32",
                      attention: str = "sdpa", gradient_checkpointing: bool = False,
                      attention_dropout: float | None = None, device: str = "cuda") -> int:
    """The peak of a second (steady-state) step by PyTorch's own MemTracker: an independent check (chapter 1)."""
    from torch.distributed._tools.mem_tracker import MemTracker


    def step(model, batch, opt) -> None:
        with autocast_context(precision, "cpu"):
            loss = model(**batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    with _fake_step(config_or_model_id, batch_size, seq_len, attention, "adamw", gradient_checkpointing,
                    attention_dropout, 2, device) as (model, batch, opt):
        step(model, batch, opt)  # creates the AdamW state that every later step holds
        tracker = MemTracker()
        tracker.track_external(model, opt, batch)
        with warnings.catch_warnings():  # "Module is None. Skipping POST_BW hook."
            warnings.simplefilter("ignore")
            with tracker:
                step(model, batch, opt)
        return sum(snapshot["Total"] for snapshot in tracker.get_tracker_snapshot("peak").values())


ESTIMATE_CACHE_ENV = "BERTMEM_ESTIMATE_CACHE"  # a folder: CI's stages share their estimates (.ci/run sets it)


@functools.lru_cache(maxsize=1)
def _estimator_identity() -> str:
    """What an estimate depends on besides its arguments: this package's source and the versions it runs on."""
    digest = hashlib.sha256(versions_text(estimator_versions()).encode())
    for path in sorted(Path(__file__).resolve().parents[1].rglob("*.py")):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _shared_by_processes(estimate: Callable[..., MemoryReport]) -> Callable[..., MemoryReport]:
    """With BERTMEM_ESTIMATE_CACHE set to a folder, each estimate is made once for every process that asks it again
    (CI: a unit test, the notebook stage and the dry run estimate the same steps). Keyed by the arguments, the
    model's configuration, this package's source and the versions: any change estimates afresh. Unset: no effect."""
    signature = inspect.signature(estimate)

    @functools.wraps(estimate)
    def shared(*args, **kwargs) -> MemoryReport:
        folder = os.environ.get(ESTIMATE_CACHE_ENV)
        if not folder:
            return estimate(*args, **kwargs)
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        arguments["config_or_model_id"] = model_config(arguments["config_or_model_id"],
                                                       arguments["num_labels"]).to_json_string()
        key = hashlib.sha256(json.dumps([_estimator_identity(), arguments], sort_keys=True).encode()).hexdigest()
        path = Path(folder) / f"{key}.pickle"
        if path.is_file():
            with contextlib.suppress(Exception):  # a torn or foreign file: estimate again
                return pickle.loads(path.read_bytes())
        report = estimate(*args, **kwargs)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_suffix(f".{os.getpid()}.partial")  # two workers may write one key: last rename wins
        partial.write_bytes(pickle.dumps(report))
        os.replace(partial, path)
        return report

    return shared


@_shared_by_processes
def estimate_step_memory(config_or_model_id, batch_size: int, seq_len: int, precision: str = "fp32",
                         attention: str = "sdpa", optimizer: str = "adamw", gradient_checkpointing: bool = False,
                         attention_dropout: float | None = None, num_labels: int = 2,
                         device: str = "cuda", lora_r: int | None = None, freeze_layers: int = 0) -> MemoryReport:
    """Estimate one training step without allocating memory, under FakeTensorMode (chapter 1).

    device='cuda' follows a GPU's kernel choices (fused memory-efficient attention, bool dropout masks,
    fp32 layer norm and softmax under autocast); device='cpu' follows this machine's kernels. Chapter 8's
    levers: `optimizer` 'adamw8bit' or 'adafactor', LoRA adapters of rank `lora_r`, `freeze_layers`.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"unknown precision {precision!r}: use one of {PRECISIONS}")
    if attention not in ("eager", "sdpa"):
        raise ValueError(f"attention must be 'eager' or 'sdpa', got {attention!r}")
    if device not in ("cuda", "cpu"):
        raise ValueError(f"device must be 'cuda' or 'cpu', got {device!r}")
    if optimizer not in ESTIMATED_OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {ESTIMATED_OPTIMIZERS}, got {optimizer!r}")
    with _fake_step(config_or_model_id, batch_size, seq_len, attention, optimizer, gradient_checkpointing,
                    attention_dropout, num_labels, device, lora_r, freeze_layers) as (model, batch, opt):
        report = measure_step_memory(model, batch, opt, precision)
    report.device, report.estimated = f"{device} (estimated)", True
    report.notes = [f"estimated under FakeTensorMode for {device}: {attention} attention"
                    + (" (memory-efficient fused kernel)" if attention == "sdpa" and device == "cuda" else "")
                    + f", {precision}, {optimizer}" + (", gradient checkpointing" if gradient_checkpointing else "")
                    + (f", LoRA r={lora_r}" if lora_r else "") + (f", {freeze_layers} layers frozen" if freeze_layers
                                                                   else ""),
                    "excludes the CUDA context, allocator caching/fragmentation and kernel workspaces"]
    return report


def peak_line(config_or_model_id, seq_len: int, **kwargs) -> tuple[float, float]:
    """The estimated step peak as fixed + per-example bytes at one length, from batches 1 and 2 (chapter 1).

    The peak is linear in the batch once the moment it falls at is fixed (the same for b = 1, 2, ...).
    """
    one = estimate_step_memory(config_or_model_id, 1, seq_len, **kwargs).step_peak
    two = estimate_step_memory(config_or_model_id, 2, seq_len, **kwargs).step_peak
    return float(one - (two - one)), float(two - one)


def batch_for_peak(config_or_model_id, seq_len: int, peak_bytes: float, **kwargs) -> int:
    """The batch whose estimated step peak comes nearest `peak_bytes`, at least 1 (chapters 1, 5, 9): the batch
    behind a published memory figure that does not state its own.

    Read off `peak_line` and checked with one estimate at the answer: where the peak of batches 1 and 2 falls at
    another moment of the step (the optimizer's, for short inputs) the line does not reach the answer, and it says so.
    """
    fixed, per_example = peak_line(config_or_model_id, seq_len, **kwargs)
    batch = max(1, round((peak_bytes - fixed) / per_example))
    estimated = estimate_step_memory(config_or_model_id, batch, seq_len, **kwargs).step_peak
    if abs(estimated / (fixed + batch * per_example) - 1) > 0.02:
        raise ValueError(f"at batch {batch} the estimated peak ({estimated / 2**30:.2f} GiB) is off the line through "
                         f"batches 1 and 2 ({(fixed + batch * per_example) / 2**30:.2f} GiB): the peak falls at "
                         "another moment of the step there; search the batch with estimate_step_memory instead")
    return batch
