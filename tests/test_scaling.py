"""Chapter 7: per-device bytes under DDP, ZeRO-1/2/3 and FSDP."""

import pytest

from bertmem.memory.sharding import StateBytes, per_device_bytes, sharding_table


def test_zero_stages_follow_the_paper_formulas():
    psi, n = 1_000_000, 8
    paper = StateBytes(2, 2, 12)  # fp16 weights + grads, K = 12 bytes of fp32 master weights and Adam moments
    totals = {s: per_device_bytes(psi, 0, n, s, paper)["total"] for s in ("ddp", "zero1", "zero2", "zero3")}
    assert totals["ddp"] == 16 * psi
    assert totals["zero1"] == pytest.approx(4 * psi + 12 * psi / n)
    assert totals["zero2"] == pytest.approx(2 * psi + 14 * psi / n)
    assert totals["zero3"] == pytest.approx(16 * psi / n)


def test_activations_are_not_sharded_and_fsdp_holds_a_gathered_unit():
    out = per_device_bytes(100, 5000, 4, "fsdp", gathered_params=10)
    assert out["activations"] == 5000 and out["weights"] == 100
    assert out["gathered_weights"] == 40 and out["total"] == 100 + 100 + 200 + 5000 + 40
    assert "gathered_weights" not in per_device_bytes(100, 0, 1, "fsdp")


def test_table_has_every_strategy_and_one_device_equals_ddp():
    rows = {r["strategy"]: r for r in sharding_table(1000, 10, device_counts=(1, 4))}
    assert set(rows) == {"ddp (default)", "ddp, gradient_as_bucket_view", "zero1", "zero2", "zero3", "fsdp"}
    assert len({r[1] for r in rows.values()}) == 1  # nothing to shard (or all-reduce) on one device
    assert (rows["zero3"][4] < rows["zero2"][4] < rows["zero1"][4] < rows["ddp, gradient_as_bucket_view"][4]
            < rows["ddp (default)"][4])
    # the default keeps its all-reduce buckets as a second gradient copy: 20 bytes per parameter, not 16
    assert rows["ddp (default)"][4] - 10 == 20 * 1000 and rows["ddp, gradient_as_bucket_view"][4] - 10 == 16 * 1000


def test_zero_offload_keeps_sixteen_bit_weights_and_deepspeeds_whole_gradient_buffer_on_the_gpu():
    from bertmem.memory.sharding import DEEPSPEED_REDUCE_BUCKET, offload_bytes, reduce_buffer_bytes

    out = offload_bytes(1000, 500, bucket_elements=150, largest_param=40)  # 150 16-bit values: 300 bytes
    assert out["gpu"]["total"] == 2 * 1000 + 300 + 2 * 40 + 500
    # fp32 master weights and gradients, Adam's moments, a 16-bit copy to send back, the staging buffer
    assert out["cpu"]["total"] == 16 * 1000 + 2 * 1000 + 2 * 40
    accumulating = offload_bytes(1000, 500, bucket_elements=150, largest_param=40, accumulation=True)
    assert accumulating["cpu"]["total"] - out["cpu"]["total"] == 2 * 1000  # the 16-bit gradients kept between steps
    # DeepSpeed allocates the whole bucket whatever the model: not capped at a small model's gradients
    assert offload_bytes(1000, 0)["gpu"]["gradient buffer (16-bit)"] == 2 * DEEPSPEED_REDUCE_BUCKET
    assert reduce_buffer_bytes(5 * 10**7, overlap_comm=True) == 2 * 2 * 5 * 10**7  # the shipped zero2.json: two
    with pytest.raises(ValueError):
        offload_bytes(0, 0)


def test_bad_arguments():
    with pytest.raises(ValueError, match="strategy"):
        per_device_bytes(1, 0, 2, "tensor-parallel")
    with pytest.raises(ValueError, match="devices"):
        per_device_bytes(1, 0, 0)
    with pytest.raises(ValueError):
        StateBytes(-1, 4, 8)
