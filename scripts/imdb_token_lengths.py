"""Count IMDb's training reviews in tokens, uncut, for the time estimates' default data (`bertmem plan`, the
"Will it fit?" page): src/bertmem/recorded/imdb-token-lengths.json holds every length that occurs with its count.

    python scripts/imdb_token_lengths.py [--output PATH]

Counted with BERT's uncased WordPiece vocabulary (the packaged all-MiniLM-L6-v2 tokenizer: bert-base-uncased's
30,522 tokens), special tokens included; other tokenizers count the same text differently. Needs the IMDb Parquet
files (BERTMEM_DATA_MIRROR) and takes under a minute.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bertmem.data.frames import load_text_classification, token_lengths  # noqa: E402
from bertmem.model.loading import MINILM_ID, load_tokenizer  # noqa: E402

RECORDED = Path(__file__).resolve().parents[1] / "src" / "bertmem" / "recorded"


def counted() -> dict:
    """IMDb's training split as {length: count}, with where it comes from."""
    frame = load_text_classification("imdb", "train")
    lengths = token_lengths(frame, load_tokenizer(MINILM_ID))
    counts = collections.Counter(int(n) for n in lengths)
    return {"dataset": "imdb", "split": "train", "examples": int(len(lengths)),
            "tokenizer": "bert-base-uncased's WordPiece vocabulary (the packaged all-MiniLM-L6-v2 tokenizer), "
                         "special tokens included, uncut",
            "command": "python scripts/imdb_token_lengths.py",
            "counts": [[n, counts[n]] for n in sorted(counts)]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=RECORDED / "imdb-token-lengths.json")
    args = parser.parse_args(argv)
    data = counted()
    args.output.write_text(json.dumps(data, separators=(",", ":")) + "\n", encoding="utf-8")
    print(f"{data['examples']} reviews, {len(data['counts'])} distinct lengths -> {args.output.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
