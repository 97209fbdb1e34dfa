"""One fine-tuning run from data to an output folder: the entry point behind `bertmem train` (chapter 5b, A1)."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import platform
import shutil
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from bertmem.core.devices import (
    CPU_BF16_ENV,
    cuda_available,
    cudnn_attention,
    cudnn_attention_first,
    cudnn_runtime_version,
    device_capability,
    device_name,
    forced_capability,
    forced_flag,
    model_device,
    native_cpu_bf16,
    require_device,
    resolve_device,
    model_picks_cudnn,
)
from bertmem.core.locks import lock_output_folder
from bertmem.core.runtime import seed_everything
from bertmem.data.frames import (
    PrepareFrame,
    cut_line,
    bucket_length,
    cut_report,
    epoch_shapes,
    prepare_frame,
    shape_positions,
    token_lengths,
)
from bertmem.data.loaders import DataConfig, build_loaders, load_frames
from bertmem.experiments.cost import epoch_work, run_utilisation
from bertmem.experiments.fit import (
    FitRequest,
    RunPlan,
    attention_kernel_rule,
    bucket_for,
    plan_run,
    plan_summary,
    with_epoch_estimate,
)
from bertmem.experiments.predict import Reading, class_probabilities, save_reading
from bertmem.experiments.report import class_report, save_confusion
from bertmem.loop.accelerate_loop import train_with_accelerate
from bertmem.loop.baseline import TrainResult, evaluate, predict
from bertmem.loop.checkpoint import CHECKPOINT_NAME
from bertmem.loop.class_weights import balanced_weights, weigh_classes, weights_line
from bertmem.loop.combined import encoder_levers, train
from bertmem.loop.config import TINY_MODEL, RunConfig, TrainConfig
from bertmem.loop.precision import DTYPES, choose_precision
from bertmem.loop.hf_trainer import train_with_trainer
from bertmem.model.adapters import has_lora, merge_lora
from bertmem.model.chunked import ChunkedClassifier
from bertmem.model.compiled import check_compile_mode, compilations_since, compile_model
from bertmem.model.loading import MINILM_ID, classifier_from_config, load_classifier, load_tokenizer, tiny_bert_config
from bertmem.model.matmuls import counted_shape


def run_tokenizer(run: RunConfig):
    """The tokenizer of run.model_id ('tiny-bert' reads MiniLM's vocabulary) (chapter 5)."""
    return load_tokenizer(MINILM_ID if run.model_id == TINY_MODEL else run.model_id)


def build_model(run: RunConfig, label_names: list[str], max_length: int = 512):
    """The classifier for run.model_id (a Hub id, folder, or 'tiny-bert'), a new head for `label_names`, and
    its tokenizer (chapter 5)."""
    if run.model_id == TINY_MODEL:
        tokenizer = load_tokenizer(MINILM_ID)
        config = tiny_bert_config(vocab_size=tokenizer.vocab_size, num_labels=len(label_names),
                                  max_position_embeddings=max(128, max_length), hidden_dropout_prob=0.0,
                                  attention_probs_dropout_prob=0.0,
                                  id2label=dict(enumerate(label_names)),
                                  label2id={n: i for i, n in enumerate(label_names)})
        return classifier_from_config(config, run.attention), tokenizer
    return load_classifier(run.model_id, len(label_names), run.attention, label_names), run_tokenizer(run)


def environment_info() -> dict[str, Any]:
    """Hardware and library versions, written beside every result (chapter 5)."""
    import accelerate
    import transformers

    info = {"python": platform.python_version(), "torch": torch.__version__, "transformers": transformers.__version__,
            "accelerate": accelerate.__version__, "cpu": platform.processor() or platform.machine(),
            "cpu_threads": torch.get_num_threads(), "cpu_bf16": cpu_bf16_line()}
    if cuda_available():
        info["gpu"] = device_name(torch.device("cuda", 0))
    return info


def cpu_bf16_line() -> str:
    """'native', 'none', or either with what the environment forced: what 'auto' precision saw (chapters 3, 5)."""
    line = "native" if native_cpu_bf16() else "none"
    forced = forced_flag(CPU_BF16_ENV)
    return line if forced is None else f"{line}, treated as {'native' if forced else 'none'} ({CPU_BF16_ENV})"


def parameter_checksum(model: torch.nn.Module) -> float:
    """Sum of all weights in float64: equal on every rank when data-parallel copies agree (chapter 7)."""
    full = [getattr(p, "full_tensor", lambda p=p: p)() for p in model.parameters()]  # gather FSDP shards
    return float(sum(t.detach().double().sum() for t in full))


def run_experiment(run: RunConfig, data: DataConfig, config: TrainConfig, *,
                   prepare: PrepareFrame = prepare_frame, fit: FitRequest | None = None) -> dict[str, Any]:
    """Load data and model, train with the chosen backend, evaluate, write the output folder (chapter 5b).

    `prepare` checks each split's rows: chapter A1 passes the `prepare_frame` its cell defines. `fit`: plan the
    run for a card first (`--memory`, `--micro-batch auto`): its micro-batch, accumulation, peak and time.
    """
    if data.window is not None and encoder_levers(config):  # before anything loads (train() would refuse later)
        levers = ", ".join(encoder_levers(config))
        raise ValueError(f"--window trains a pooling wrapper around the classifier; {levers} cannot find its "
                         "encoder there: drop them, or drop --window")
    check_compile_mode(run.compile, data.pad_to_multiple_of)
    device = require_device(run.device) if run.device is not None else None
    if not run.output_dir:
        return trained_summary(run, data, config, prepare, device, fit)
    folder = prepare_output_dir(run)  # before any data or model is loaded: a bad folder must not cost a run
    with lock_output_folder(folder):  # one writer per folder, from before the data loads to the last file
        check_previous_run(folder, run)
        return trained_summary(run, data, config, prepare, device, fit)


def trained_summary(run: RunConfig, data: DataConfig, config: TrainConfig, prepare: PrepareFrame,
                    device: torch.device | None, fit: FitRequest | None = None) -> dict[str, Any]:
    """`run_experiment` once its output folder is checked and held: data, plan, model, training, outputs
    (ch. 5, A1)."""
    frames = load_frames(data, prepare)
    names = frames[0].attrs["label_names"]
    tokenizer = run_tokenizer(run)
    lengths = {what: token_lengths(frame, tokenizer) for what, frame in zip(("train", "eval"), frames)}
    cuts = {what: cut_report(lengths[what], data.max_length) for what in lengths}
    pair = data.second_text_column is not None and not data.join_texts
    print(cut_line(cuts["train"], data.max_length, data.truncation, data.window, pair=pair))  # never cut silently
    plan = None
    if fit is not None:  # before the model takes memory: a plan that does not fit stops here
        planned = [data.padded_to() or bucket_length(min(n, data.max_length), data.pad_to_multiple_of,
                                                     data.max_length) for n in lengths["train"]]
        plan = planned_once(run) or plan_run(fit, run, data, config, planned)
        data = dataclasses.replace(data, micro_batch=plan.micro_batch)
        config = dataclasses.replace(config, accumulation_steps=plan.accumulation_steps)
    seed_everything(config.seed)  # the new classifier head is drawn here: same seed, same run
    model, _ = build_model(run, names, data.window or data.max_length)
    if data.window is not None:  # every window of a text, its logits pooled, trained end to end (chapter 9)
        model = ChunkedClassifier(model)
    if config.class_weights == "balanced":  # every backend reads the model's loss: weighted there (A1)
        weights = balanced_weights(frames[0]["label"], len(names))
        weigh_classes(model, weights)
        print(weights_line(weights, names), flush=True)
    if device is not None and run.backend != "accelerate":  # Accelerate gives each process its own device
        model.to(device)  # placed once; every helper below follows the model
    compiled_from = compile_model(model, run.compile)  # lazily: the first forward pass compiles
    if run.output_dir and run.overwrite and not run.resume:
        remove_previous_run(Path(run.output_dir).expanduser())
    if plan is not None and run.output_dir:  # a resumed run takes this plan again, whatever memory is free then
        (Path(run.output_dir) / PLAN_FILE).write_text(json.dumps(plan_summary(plan), indent=1, default=str))
    loaders = build_loaders(data, tokenizer, frames, seed=config.seed)
    read = [min(n, data.max_length) for n in lengths["train"]]
    shapes = None if data.window is not None else epoch_shapes(
        read, data.micro_batch, data.group_by_length, config.seed, data.padded_to(), data.pad_to_multiple_of,
        data.max_length)
    keep_cudnn, kernels = True, None
    if shapes is not None:  # counted before the run starts: what the card sets its kernels up for
        print(shapes_line(shapes, data), flush=True)
        keep_cudnn, kernels = kernel_choice(run, config, model, device, shapes)
    if plan is not None:
        # windows: each text's tokens as read
        tokens = shape_positions(shapes) if shapes is not None else sum(read)
        plan = with_epoch_estimate(plan, run, config, len(frames[0]), tokens)
        print("\n".join(plan.lines(len(frames[0]), tokens, max(read))), flush=True)
    identity = dict(asdict(run), **asdict(data), label_names=list(names))  # train() adds fingerprint and size
    with contextlib.nullcontext() if keep_cudnn else cudnn_attention(False):  # as it was, after the run
        result = run_backend(run, model, loaders.train, config, loaders.eval, identity)
    utilisation = None if shapes is None else epoch_utilisation(model, read, shapes, result, config)
    predictions = result.predictions if result.predictions is not None else predict(model, loaders.eval)
    compiled = None if run.compile == "off" else compilations_since(compiled_from)
    if compiled is not None:  # training and evaluation: each new shape may have cost one
        print(compiled.line(run.compile), flush=True)
    summary = {"final": result.final_metrics, "epochs": result.epochs, "history": result.history,
               "precision": result.precision, "skipped_steps": result.skipped_steps, "backoffs": result.backoffs,
               "num_processes": result.num_processes, "rank": result.rank, "rank_bytes": result.rank_bytes,
               "parameter_checksum": parameter_checksum(model), "label_names": names,
               "train_examples": len(frames[0]), "eval_examples": len(frames[1]), "environment": environment_info(),
               **class_report(predictions, list(names)), "longer_than_max_length": cuts,
               "plan": None if plan is None else plan_summary(plan),
               "shapes": None if shapes is None else {f"{rows}×{length}": n
                                                      for (rows, length), n in sorted(shapes.items())},
               "attention_kernels": kernels, "utilisation": utilisation,
               "compilations": None if compiled is None else asdict(compiled),
               "checkpoints": {"saves": result.checkpoint_saves, "time_s": result.checkpoint_time_s,
                               "share": result.checkpoint_share,
                               "periodic_share": result.periodic_checkpoint_share}}
    if run.output_dir:
        write_outputs(Path(run.output_dir), run, data, config, summary, result, model, tokenizer)
    return summary


def shapes_line(shapes, data: DataConfig) -> str:
    """'shapes: 14 (micro-batch × padded length) in one epoch, 12 lengths …' (chapter 5, `bertmem train`)."""
    lengths = {length for _, length in shapes}
    if data.padded_to() is not None:
        how = "every batch padded to --max-length"
    elif data.pad_to_multiple_of is not None:
        how = f"lengths rounded up to multiples of {data.pad_to_multiple_of}"
    else:
        how = (f"each batch padded to its longest example (--pad-to-multiple-of {bucket_for(data.max_length)} "
               "meets fewer)")
    return (f"shapes: {len(shapes)} (micro-batch × padded length) in one epoch, {len(lengths)} lengths from "
            f"{min(lengths)} to {max(lengths)}; {how}")


def kernel_choice(run: RunConfig, config: TrainConfig, model, device: torch.device | None,
                  shapes) -> tuple[bool, str | None]:
    """Chapter 5's attention-kernel rule (`--cudnn-attention auto`) for the card this run trains on, or the
    reader's choice: (keep cuDNN's attention, the line printed; None where there is nothing to decide: a CPU,
    eager attention)."""
    where = device if device is not None else torch.device("cuda" if cuda_available() else "cpu")
    if where.type != "cuda" or run.attention != "sdpa":
        return True, None
    if run.cudnn_attention != "auto":
        keep = run.cudnn_attention == "on"
        line = f"attention kernels: cuDNN's attention {'among' if keep else 'off'} SDPA's choices (--cudnn-attention)"
        print(line, flush=True)
        return keep, line
    forced = forced_capability()  # another card's answer, from the source's rule; else PyTorch's own, here
    precision = choose_precision(config.precision, "cuda", capability=forced or device_capability(where),
                                 verbose=False).precision
    cudnn_first = (cudnn_attention_first(forced, cudnn_runtime_version(), precision) if forced is not None
                   else model_picks_cudnn(model.config, where, DTYPES[precision]))
    keep, line = attention_kernel_rule(cudnn_first, len({length for _, length in shapes}))
    print(line, flush=True)
    return keep, line


def epoch_utilisation(model, read: list[int], shapes, result: TrainResult,
                      config: TrainConfig) -> dict[str, Any] | None:
    """The trained epochs' MFU, padded and useful, against a peak measured now; printed (chapter 5). None where
    it cannot be said: an architecture the count does not cover, a run cut short by --max-steps, no timed epoch."""
    shape = counted_shape(model)  # after the levers: LoRA's adapters count, frozen weights get no gradient
    times = [e["train_time_s"] for e in result.epochs if "train_time_s" in e]
    if shape is None or not times or config.max_steps is not None:
        return None
    # periodic checkpoint saves fall inside the epochs' time and are not training
    seconds = (sum(times) - result.checkpoint_time_s + result.checkpoint_after_epochs_s) / len(times)
    work = epoch_work(shape, read, shapes).share(1 / max(1, result.num_processes))  # each card's share
    used = run_utilisation(work, seconds, result.precision, model_device(model).type)
    print(f"MFU {used['MFU']:.1%} of the measured {used['peak TFLOP/s']:.1f} TFLOP/s, {used['useful MFU']:.1%} "
          f"counting the examples' own tokens ({used['peak']})", flush=True)
    return used


PLAN_FILE = "plan.json"  # the micro-batch and accumulation a planned run chose, for --resume


def planned_once(run: RunConfig) -> RunPlan | None:
    """On --resume, the plan the interrupted run chose (its micro-batch and accumulation), else None (A1)."""
    path = Path(run.output_dir or ".") / PLAN_FILE
    if not (run.resume and run.output_dir and path.is_file()):
        return None
    saved = json.loads(path.read_text())
    print(f"resuming with the first run's plan: micro-batch {saved['micro_batch']} × {saved['accumulation_steps']}")
    return RunPlan(saved["micro_batch"], saved["accumulation_steps"], saved["budget"],
                   notes=["resumed: planned by the first run"])


def run_backend(run: RunConfig, model, train_loader, config: TrainConfig, eval_loader,
                settings: dict[str, Any] | None = None) -> TrainResult:
    """Train with bertmem's loop, Accelerate or the HF Trainer (same recipe, same batches) (chapter 5b)."""
    if run.backend == "accelerate":
        return train_with_accelerate(model, train_loader, config, eval_loader, run=run)
    if run.backend == "trainer":
        result = train_with_trainer(model, train_loader, config, run=run)
        result.epochs.append(evaluate(model, eval_loader))
        return result
    return train(model, train_loader, config, eval_loader, settings, run=run)


# what a run leaves in its folder
RUN_FILES = ("metrics.json", "config.json", "loss.png", "confusion.png", PLAN_FILE, CHECKPOINT_NAME)


def previous_run_files(folder: Path) -> list[Path]:
    """The files and folders a bertmem run leaves behind in `folder` (chapter A1)."""
    found = [folder / name for name in RUN_FILES if (folder / name).exists()]
    found += sorted(folder.glob("rank*.json"))
    if (folder / "model").is_dir():
        found.append(folder / "model")
    return found


def prepare_output_dir(run: RunConfig) -> Path:
    """Check the output folder before any work: creatable, writable, not the model (chapter A1)."""
    folder = Path(run.output_dir).expanduser()
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"output_dir {folder} is a file, not a folder: choose another --output-dir")
    model_dir = Path(run.model_id).expanduser()
    inside = folder.resolve() in (model_dir.resolve(), *model_dir.resolve().parents)
    if model_dir.is_dir() and inside:
        raise ValueError(f"output_dir {folder} holds the model being fine-tuned ({run.model_id}): writing results "
                         "there would replace its files; choose another --output-dir")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise ValueError(f"output_dir {folder} cannot be created or written ({err.strerror or err}): "
                         "choose a writable --output-dir") from None
    return folder


def check_previous_run(folder: Path, run: RunConfig) -> None:
    """Refuse a folder that holds an earlier run unless the run overwrites or resumes it (chapter A1).

    Checked once the folder's lock is held: a run still writing there is named by the lock instead. With
    `run.overwrite` a previous run's files are removed later (an old model/ must not sit next to new metrics); with
    `run.resume` they are kept, since the checkpoint is what the run continues from.
    """
    previous = previous_run_files(folder)
    if previous and not (run.overwrite or run.resume):
        names = ", ".join(p.name for p in previous)
        raise ValueError(f"output_dir {folder} already holds a run ({names}): pass --overwrite (overwrite=True) "
                         "to replace it, --resume to continue it, or choose another --output-dir")


def remove_previous_run(folder: Path) -> None:
    """With overwrite: drop an earlier run's files once data and model have loaded (a typo costs nothing)."""
    for path in previous_run_files(folder):  # several processes may do this at once under accelerate launch
        shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)


def write_outputs(folder: Path, run: RunConfig, data: DataConfig, config: TrainConfig, summary: dict,
                  result: TrainResult, model, tokenizer) -> None:
    """metrics.json, config.json, loss.png (and the model) from the main process; rank<r>.json from each of several."""
    folder.mkdir(parents=True, exist_ok=True)
    if result.num_processes > 1:  # what each data-parallel process holds and saw (chapter 7)
        rank_info = {k: summary[k] for k in ("parameter_checksum", "rank_bytes", "num_processes")}
        rank_info["losses"] = result.losses
        (folder / f"rank{result.rank}.json").write_text(json.dumps(rank_info, indent=1))
    if result.rank != 0:
        return
    (folder / "metrics.json").write_text(json.dumps(summary, indent=1, default=str))
    (folder / "config.json").write_text(json.dumps({"run": asdict(run), "data": asdict(data), "train": asdict(config)},
                                                         indent=1))
    from matplotlib.figure import Figure  # no pyplot: leaves a notebook's backend alone

    ax = Figure(figsize=(7, 3.5)).subplots()
    result.plot(ax=ax, smooth=max(1, min(10, len(result.history) // 5)))
    ax.set_title(f"{run.model_id} on {Path(data.dataset).name}")
    ax.figure.savefig(folder / "loss.png", dpi=120, bbox_inches="tight")
    save_confusion(summary, folder / "confusion.png",
                   f"{Path(run.model_id).name} on {Path(data.dataset).name}: held-out examples (counts)")
    if run.save_model:
        model = getattr(model, "module", model)

        if isinstance(model, ChunkedClassifier):  # the classifier reads one window; pooling is how it is used
            model = model.classifier
        if has_lora(model):  # saved merged: a plain transformers folder that loads without peft (chapter 8)
            merge_lora(model)
        model.save_pretrained(folder / "model")
        tokenizer.save_pretrained(folder / "model")
        save_reading(folder / "model", data, summary["label_names"])  # `bertmem predict` reads texts the same way


def predict_texts(model, tokenizer, texts: list[str], max_length: int = 256, batch_size: int = 32,
                  device: str | None = None) -> list[dict[str, Any]]:
    """Label and probability for each new text, with the model's own label names, on its device (chapter A1):
    the reading `bertmem predict` does for a file, for a list of texts."""
    if isinstance(texts, str) or not all(isinstance(t, str) and t.strip() for t in texts):
        raise TypeError("texts must be a list of non-empty strings (wrap a single text in a list)")
    resolve_device(model, device)  # a device other than the model's is refused, never moved to
    names = getattr(model.config, "id2label", None) or {}
    probabilities = class_probabilities(model, tokenizer, pd.DataFrame({"text": texts}), Reading(max_length=max_length),
                                        batch_size, show=False)
    return [{"text": text, "label": names.get(int(p.argmax()), str(int(p.argmax()))),
             "probability": float(p.max())} for text, p in zip(texts, probabilities)]
