"""The one GPU table: every card the planner offers, matched from CUDA device names, with its sources."""

import re
from pathlib import Path

import pytest

from bertmem.memory.cards import CARD_MEMORY, CARDS, card_for, parse_memory

BIB = (Path(__file__).resolve().parents[1] / "book" / "references.bib").read_text(encoding="utf-8")


@pytest.mark.parametrize("device, key", [
    ("Tesla T4", "T4"), ("NVIDIA L4", "L4"), ("NVIDIA A10", "A10"), ("NVIDIA GeForce RTX 3090", "RTX3090"),
    ("NVIDIA GeForce RTX 4090", "RTX4090"), ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
    ("NVIDIA A100 80GB PCIe", "A100-80GB"),
    ("NVIDIA A100-SXM4-40GB", "A100"), ("NVIDIA H100 80GB HBM3", "H100"),
    ("NVIDIA L40S", "L40S"), ("NVIDIA RTX A6000", "A6000"), ("Tesla P100-PCIE-16GB", "P100"),
    ("Tesla V100-SXM2-16GB", "V100"), ("Tesla V100-SXM2-32GB", "V100-32GB"), ("Tesla V100-PCIE-32GB", "V100-32GB"),
    ("NVIDIA H200", "H200"),
    ("NVIDIA A10G", None), ("NVIDIA L40", None), ("NVIDIA GeForce RTX 3090 Ti", None),
    ("NVIDIA GeForce RTX 4090 Laptop GPU", None), ("NVIDIA H100 PCIe", None), ("NVIDIA H100 NVL", None),
    ("NVIDIA H200 NVL", None),
    (None, None)])
def test_a_device_name_finds_its_card_and_no_other(device, key):
    assert card_for(device) is (CARDS[key] if key else None)


def test_at_least_six_cards_have_memory_each_with_its_sources():
    with_memory = [card for card in CARDS.values() if card.memory_mib]
    assert len(with_memory) >= 6 and len(CARD_MEMORY) == len(with_memory)
    for card in with_memory:
        assert re.search(rf"@misc{{{card.source},", BIB), card.name  # the datasheet is in the bibliography
        assert card.memory_source.startswith("https://github.com/"), card.name  # where the total was read
    assert parse_memory("a100-80gb") == 81920 * 2**20 and parse_memory("rtx4090") == 24564 * 2**20


def test_bf16_only_where_the_card_has_it():
    assert [key for key, card in CARDS.items() if card.memory_mib and card.low_precision() == "fp16"] == [
        "T4", "V100-32GB", "V100", "P100"]  # before Ampere: no bf16 tensor cores


def test_a_rate_is_measured_only_where_the_card_has_a_published_one():
    t4, l4 = CARDS["T4"], CARDS["L4"]
    assert t4.rate_measured("auto") and t4.rate_measured("fp16") and t4.rate_measured("fp32")
    assert not l4.rate_measured("auto") and not l4.rate_measured("bf16")
