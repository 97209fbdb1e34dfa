"""What a long document costs to train on: estimated step peaks from 512 to 8,192 tokens (chapter 9).

bert-base read as one sequence (eager attention, fused attention, with gradient checkpointing) or as windows
(`bertmem.data.windows`), and encoders built for long input, all under FakeTensorMode (`memory.estimate`): a GPU's
kernels, nothing allocated, no weights. Each estimate is a few seconds of single-threaded Python, independent of
the others, so `long_input_estimates` spreads them over two processes where the machine has two cores."""

from __future__ import annotations

import os
from typing import Any

from bertmem.data.windows import window_count
from bertmem.memory.estimate import estimate_step_memory, model_config
from bertmem.model.known import usable_positions
from bertmem.model.loading import _quiet_transformers

Job = tuple[Any, int, int, dict[str, Any]]  # (configuration, sequences per step, tokens per sequence, options)


def long_position_config(config_or_model_id, length: int):
    """A configuration whose position table holds `length` tokens (bert-base's stops at 512) (chapter 9).

    Reading 1,024 tokens as one sequence needs a longer table (new rows, trained); its shapes, not its
    values, set the memory, so the estimate only needs the longer configuration.
    """
    import copy


    config = copy.deepcopy(model_config(config_or_model_id))
    offset = config.max_position_embeddings - (usable_positions(config) or config.max_position_embeddings)
    config.max_position_embeddings = max(config.max_position_embeddings, length + offset)  # RoBERTa's 2 rows
    return config


def _bert_jobs(lengths: tuple[int, ...], model, window: int, stride: int, precision: str,
               micro_batch: int) -> dict[str, list[Job]]:
    """bert-base four ways: one sequence (eager, SDPA, SDPA + checkpointing) and windows (SDPA)."""
    ways = {"one sequence, eager attention": dict(attention="eager"),
            "one sequence, SDPA": dict(attention="sdpa"),
            "one sequence, SDPA + checkpointing": dict(attention="sdpa", gradient_checkpointing=True)}
    jobs = {name: [(long_position_config(model, n), micro_batch, n, dict(precision=precision, **kwargs))
                   for n in lengths] for name, kwargs in ways.items()}
    jobs[f"windows of {window} every {stride} tokens, SDPA"] = [
        (model, micro_batch * window_count(n, window, stride), window, dict(precision=precision))
        for n in lengths]
    return jobs


def _encoder_jobs(lengths: tuple[int, ...], precision: str, micro_batch: int) -> dict[str, list[Job]]:
    """Encoders built for long input, from their base configurations.

    ModernBERT-base: local attention in most layers, 8,192 positions (its configuration's defaults are the base
    model's). Longformer-base (allenai/longformer-base-4096's vocabulary and 4,098 positions): a sliding window with
    [CLS] attending globally, as its classifier sets it (`estimate` answers the two questions its attention asks
    the data that way). BigBird-RoBERTa-base: block-sparse attention, in fp32 because its fp16 step does not
    trace under FakeTensorMode (a scatter of mixed dtypes). Past a configuration's own position table, the table
    is lengthened as for bert-base (RoBERTa's positions start at 2: Longformer's table holds 2 more).
    """
    from transformers import BigBirdConfig, LongformerConfig, ModernBertConfig

    longformer = LongformerConfig(vocab_size=50265, max_position_embeddings=4098, type_vocab_size=1,
                                  pad_token_id=1, bos_token_id=0, eos_token_id=2)  # longformer-base-4096's
    encoders = {"ModernBERT-base": (ModernBertConfig(), precision, "sdpa", 0),
                "Longformer-base": (longformer, precision, "eager", 2),
                "BigBird-RoBERTa-base, fp32": (BigBirdConfig(), "fp32", "eager", 0)}
    return {name: [(long_position_config(config, n + offset), micro_batch, n, dict(precision=used,
                                                                                  attention=attention))
                   for n in lengths] for name, (config, used, attention, offset) in encoders.items()}


def _peak_gib(job: Job) -> float:
    """One estimate's step peak in GiB (run in a worker process; its notices stay there)."""
    import warnings


    config, sequences, length, options = job
    with warnings.catch_warnings(), _quiet_transformers():  # BigBird's fallback at 512, Longformer's global [CLS]
        warnings.simplefilter("ignore")
        return estimate_step_memory(config, sequences, length, **options).step_peak / 2**30


def long_input_estimates(lengths: tuple[int, ...], model_id: str = "bert-base-uncased", window: int = 512,
                         stride: int = 384, precision: str = "fp16", micro_batch: int = 1,
                         workers: int | None = None) -> list[dict]:
    """The estimated step peak (GiB, a GPU's kernels) of documents of each length, one row per reading (ch. 9).

    bert-base four ways (`micro_batch` documents per step), then ModernBERT-base, Longformer-base and
    BigBird-RoBERTa-base. `workers`: processes for the estimates (default: two where there are two cores).
    """
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context


    lengths, model = tuple(lengths), model_config(model_id)  # resolved once, here, not in every worker
    jobs = {**_bert_jobs(lengths, model, window, stride, precision, micro_batch),
            **_encoder_jobs(lengths, precision, micro_batch)}
    flat = [job for row in jobs.values() for job in row]
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    workers = min(2, usable) if workers is None else workers
    if workers <= 1:
        peaks = [_peak_gib(job) for job in flat]
    else:  # spawned, not forked: a fork of a process that has run torch can hang
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
            peaks = list(pool.map(_peak_gib, flat))
    values = iter(peaks)
    return [{"reading": name, **{n: next(values) for n in lengths}} for name in jobs]
