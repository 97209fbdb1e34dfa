"""The `bertmem train` command line the CLI tests share: tiny-bert on the `reviews_csv` fixture's columns."""


def cli_args(csv, out, *extra) -> list[str]:
    """`bertmem train` arguments for a short tiny-bert run on `csv`, writing to `out`, plus `extra`."""
    return ["train", "--model", "tiny-bert", "--dataset", str(csv), "--text-column", "review",
            "--label-column", "sentiment", "--train-size", "64", "--eval-size", "24", "--max-length", "32",
            "--micro-batch", "8", "--learning-rate", "1e-3", "--epochs", "1", "--device", "cpu", "--no-progress",
            "--output-dir", str(out), *extra]
