"""How and where a run happens: model, device, output folder, checkpoints, progress (chapters 4, 5, 8, A1).

One of the three configuration dataclasses: what the data is lives in `DataConfig` (`bertmem.loaders`),
the recipe in `TrainConfig` (`bertmem.train`); none of this one changes what the model learns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .flags import RefusesRenamed
from .models import ATTENTION_IMPLEMENTATIONS
from .profile import MINILM_ID, Profile

BACKENDS = ("plain", "accelerate", "trainer")
TINY_MODEL = "tiny-bert"  # a 2-layer random BERT with MiniLM's vocabulary: tests and quick checks


@dataclass(frozen=True)
class RunConfig(RefusesRenamed):
    """How and where a run happens: model, kernels, device, loop, output folder, checkpoints (ch. 4, 5, 8, A1).

    Every field with help text is also a flag of `bertmem train` (generated, `bertmem.flags`).
    """

    model_id: str = field(default=MINILM_ID, metadata={
        "help": "Hub id, local model folder, or 'tiny-bert'", "flag": "--model"})
    attention: str = field(default="sdpa", metadata={
        "help": "attention kernel: sdpa (fused) or eager", "choices": ATTENTION_IMPLEMENTATIONS})
    device: str | None = field(default=None, metadata={
        "help": "cpu or cuda: where the model is placed, once; batches follow it"})  # chapter 0
    backend: str = field(default="plain", metadata={
        "help": "training loop; accelerate: run under `accelerate launch` for several processes",
        "choices": BACKENDS})
    progress: bool = field(default=True, metadata={"help": "show progress bars"})
    output_dir: str | None = field(default=None, metadata={
        "help": "folder for metrics.json, config.json, loss.png (and checkpoints, the model)"})
    checkpoint_every: int | None = field(default=None, metadata={  # None: no checkpoints at all
        "help": "keep OUTPUT_DIR/checkpoint.pt: every N optimizer steps, each epoch and on Ctrl-C (chapter 5)"})
    resume: bool = field(default=False, metadata={
        "help": "continue from OUTPUT_DIR/checkpoint.pt (and keep checkpointing there)"})
    save_model: bool = field(default=False, metadata={"help": "save the fine-tuned model to OUTPUT_DIR/model"})
    overwrite: bool = field(default=False, metadata={
        "help": "replace the results of a previous run in OUTPUT_DIR"})  # else such a folder is refused
    RENAMED = {"model": "model_id"}

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.attention not in ATTENTION_IMPLEMENTATIONS:
            raise ValueError(f"attention must be one of {ATTENTION_IMPLEMENTATIONS}, got {self.attention!r}")
        every = self.checkpoint_every
        if every is not None and (not isinstance(every, int) or every < 1):
            raise ValueError(f"checkpoint_every must be an int >= 1 or None, got {every!r}")
        for wanted, name in ((self.save_model, "save_model"), (every is not None, "checkpoint_every"),
                             (self.resume, "resume")):
            if wanted and not self.output_dir:
                raise ValueError(f"{name} needs output_dir: the folder that holds the model and checkpoint.pt")
        if self.checkpoint_dir and self.backend != "plain":
            raise ValueError(f"checkpoint_every and resume are features of bertmem's own loop (backend 'plain'), not "
                             f"of backend {self.backend!r}: drop them, or use the backend's own checkpoints")
        if self.device is not None:
            try:
                torch.device(self.device)
            except RuntimeError as err:
                raise ValueError(f"device {self.device!r} is not a torch device: use 'cpu' or 'cuda'") from err

    @property
    def checkpoint_dir(self) -> str | None:
        """Where checkpoint.pt lives: the output folder when the run keeps or resumes checkpoints (chapter 5)."""
        return self.output_dir if self.checkpoint_every is not None or self.resume else None

    @classmethod
    def from_profile(cls, profile: Profile, **overrides) -> "RunConfig":
        """The profile's model and device; everything else as given."""
        return cls(**{"model_id": profile.model_id, "device": profile.device, **overrides})
