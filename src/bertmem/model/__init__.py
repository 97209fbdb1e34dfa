"""Models: loading tokenizers and classifiers (offline-first), adapters (LoRA, frozen layers) and the chunked
classifier for long texts.
"""

from bertmem.model.adapters import (
    LORA_LR_FACTOR,
    LORA_RANK,
    apply_lora,
    embeddings_module,
    freeze_lower_layers,
    has_lora,
    is_head,
    lora_target_modules,
    merge_lora,
    trainable_share,
)
from bertmem.model.chunked import (
    POOLINGS,
    ChunkedClassifier,
    PooledOutput,
    WindowReading,
    fit_scorer,
    pool_windows,
    pooled_correct,
    read_windows,
)
from bertmem.model.loading import (
    MINILM_ID,
    classifier_from_config,
    enable_gradient_checkpointing,
    find_encoder_layers,
    load_classifier,
    load_model_and_tokenizer,
    load_tokenizer,
    tiny_bert_config,
    tiny_classifier,
)

__all__ = ["ChunkedClassifier", "LORA_LR_FACTOR", "LORA_RANK", "MINILM_ID", "POOLINGS", "PooledOutput", "WindowReading",
    "apply_lora", "classifier_from_config", "embeddings_module", "enable_gradient_checkpointing",
    "find_encoder_layers", "fit_scorer", "freeze_lower_layers", "has_lora", "is_head", "load_classifier",
    "load_model_and_tokenizer", "load_tokenizer", "lora_target_modules", "merge_lora", "pool_windows",
    "pooled_correct", "read_windows", "tiny_bert_config", "tiny_classifier", "trainable_share"]
