"""Long runs that survive Colab (chapter 5): one writer per folder, time-based checkpoints, resume after kill -9,
a bench that continues where it was killed. The process tests start real `bertmem` processes and kill them with
signals they cannot catch."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

import pandas as pd
import pytest
import torch
from cli_helpers import cli_args
from torch.utils.data import DataLoader

from bertmem.cli import checkpoint_minutes, main
from bertmem.core.locks import (
    LOCK_NAME,
    STALE_AFTER_S,
    FolderInUse,
    FolderLock,
    Holder,
    lock_output_folder,
    stat_fields,
)
from bertmem.experiments.bench import BenchConfig, FinishedRuns, run_slug
from bertmem.loop.checkpoint import CHECKPOINT_NAME, load_checkpoint
from bertmem.loop.combined import train
from bertmem.loop.config import RunConfig, TrainConfig
from bertmem.model.loading import tiny_classifier
from bertmem.profiles import get_profile

ENV = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")


def start(argv: list[str]) -> subprocess.Popen:
    """A real `python -m bertmem` process."""
    return subprocess.Popen([sys.executable, "-m", "bertmem", *argv], env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(argv: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `python -m bertmem` to its end."""
    return subprocess.run([sys.executable, "-m", "bertmem", *argv], env=ENV, capture_output=True, text=True,
                          timeout=timeout)


def wait_for(condition, proc: subprocess.Popen, timeout: float = 120) -> None:
    """Poll until `condition()` holds; fail if the process ends first."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"the process ended first (exit {proc.returncode}): {proc.stderr.read()[-2000:]}")
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def checkpoint_step(folder: Path) -> int:
    """The optimizer step of the checkpoint in `folder`, 0 while there is none (or it is being replaced)."""
    try:
        return load_checkpoint(folder)["position"]["step"]
    except (FileNotFoundError, ValueError):
        return 0


# 1. One writer per folder ------------------------------------------------------------------------------------

def holder(**changes) -> Holder:
    return replace(Holder.this_process(), **changes)


def write_lock(folder: Path, who: Holder, age_s: float = 0.0) -> Path:
    path = folder / LOCK_NAME
    path.write_text(json.dumps(asdict(who)))
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_a_live_holder_is_named_and_a_second_lock_refused(tmp_path):
    with FolderLock(tmp_path) as first:
        assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
        other_process = holder(pid=os.getppid(), started="")  # a live process on this machine
        (tmp_path / LOCK_NAME).write_text(json.dumps(asdict(other_process)))
        with pytest.raises(FolderInUse, match=rf"in use by process {os.getppid()} on host "):
            FolderLock(tmp_path).acquire()
        (tmp_path / LOCK_NAME).write_text(json.dumps(asdict(first.holder)))
    assert not (tmp_path / LOCK_NAME).exists()  # released on leaving the block


def test_a_lock_of_a_process_that_no_longer_runs_is_taken_over(tmp_path, capsys):
    ended = subprocess.Popen(["true"])
    ended.wait()
    write_lock(tmp_path, holder(pid=ended.pid, started=""))
    with FolderLock(tmp_path) as lock:
        assert "which no longer runs" in lock.took_over and f"process {ended.pid}" in lock.took_over
    assert "took over the lock" in capsys.readouterr().err


def test_a_zombie_holder_counts_as_gone(tmp_path):
    """A killed process its parent has not reaped yet still answers kill(pid, 0): its state says it is gone."""
    zombie = subprocess.Popen(["sleep", "60"])
    zombie.kill()
    deadline = time.monotonic() + 30
    while stat_fields(zombie.pid)[:1] != ["Z"]:
        assert time.monotonic() < deadline
        time.sleep(0.05)  # dead, not yet waited for
    try:
        write_lock(tmp_path, holder(pid=zombie.pid, started=""))
        with FolderLock(tmp_path) as lock:
            assert lock.took_over is not None
    finally:
        zombie.wait()


def test_a_reused_process_id_is_not_the_holder(tmp_path):
    """Same pid, another start time (the id was given to a new process after a reset): the lock is stale."""
    write_lock(tmp_path, holder(pid=os.getppid(), started="1"))
    with FolderLock(tmp_path) as lock:
        assert lock.took_over is not None


def test_another_machines_lock_holds_while_its_heartbeat_is_fresh(tmp_path):
    """A folder on Google Drive, locked by a Colab runtime that was reset: its process cannot be asked, its
    heartbeat can."""
    elsewhere = holder(host=socket.gethostname() + "-other", boot="another-boot")
    write_lock(tmp_path, elsewhere, age_s=10)
    with pytest.raises(FolderInUse, match="-other"):
        FolderLock(tmp_path).acquire()
    write_lock(tmp_path, elsewhere, age_s=STALE_AFTER_S + 60)
    with FolderLock(tmp_path) as lock:
        assert "heartbeat stopped" in lock.took_over


def test_a_half_written_lock_is_refused_while_fresh_and_taken_over_when_old(tmp_path):
    (tmp_path / LOCK_NAME).write_text('{"host": ')
    with pytest.raises(FolderInUse, match="another run"):
        FolderLock(tmp_path).acquire()
    then = time.time() - 3600
    os.utime(tmp_path / LOCK_NAME, (then, then))
    with FolderLock(tmp_path) as lock:
        assert "names no holder" in lock.took_over


def test_another_machines_refusal_says_how_long_to_wait(tmp_path):
    write_lock(tmp_path, holder(host="colab-old", boot="b"), age_s=60)
    with pytest.raises(FolderInUse, match=r"on another machine \(heartbeat 60 s old\): if that machine is gone, "
                                          r"run again in 4\.0 minutes"):
        FolderLock(tmp_path).acquire()


def test_the_heartbeat_touches_only_its_own_lock(tmp_path, monkeypatch, capsys):
    import bertmem.core.locks as locks

    monkeypatch.setattr(locks, "HEARTBEAT_S", 0.05)
    with FolderLock(tmp_path):
        path = tmp_path / LOCK_NAME
        os.utime(path, (0, 0))
        time.sleep(0.5)
        assert path.stat().st_mtime > 0  # touched again
        path.write_text(json.dumps(asdict(holder(pid=1, started="x"))))  # someone took it
        os.utime(path, (0, 0))
        time.sleep(0.5)
        assert path.stat().st_mtime == 0  # not ours: left alone
    assert path.exists()  # release leaves another run's lock in place
    assert "no longer this run's" in capsys.readouterr().err


def test_a_takeover_that_finds_a_fresh_lock_puts_it_back(tmp_path):
    """Two runs judged one lock stale; the first replaced it: the second's rename must not steal the new one."""
    lock = FolderLock(tmp_path)
    judged = holder(pid=1, started="gone")
    fresh = holder(pid=os.getppid(), started="")
    write_lock(tmp_path, fresh)
    assert lock._set_aside(judged) is False
    assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getppid()
    assert [p.name for p in tmp_path.iterdir()] == [LOCK_NAME]


def test_only_rank_zero_of_a_launch_holds_the_folder(tmp_path):
    assert isinstance(lock_output_folder(tmp_path, env={"WORLD_SIZE": "2", "RANK": "0"}), FolderLock)
    with lock_output_folder(tmp_path, env={"WORLD_SIZE": "2", "RANK": "1"}):
        assert not (tmp_path / LOCK_NAME).exists()


@pytest.mark.slow
def test_a_second_run_into_a_busy_folder_is_refused_naming_the_first(tmp_path, reviews_csv):
    """Two terminals, one folder: the second run, and a --resume, are refused while the first runs; SIGTERM
    ends the first with a checkpoint and frees the folder."""
    out = tmp_path / "busy"
    first = start(cli_args(reviews_csv, out, "--epochs", "400", "--checkpoint-every", "5"))
    try:
        wait_for(lambda: checkpoint_step(out) >= 5, first)
        for extra in ((), ("--resume",)):
            second = finish(cli_args(reviews_csv, out, "--epochs", "400", *extra))
            assert second.returncode == 2, second.stderr
            lines = [x for x in second.stderr.splitlines() if "error" in x]
            assert len(lines) == 1 and f"in use by process {first.pid} on host {socket.gethostname()}" in lines[0]
        assert first.poll() is None  # the first run never noticed
    finally:
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=120)
    assert first.returncode == 143, err[-2000:]
    assert not (out / LOCK_NAME).exists()


# 2. Resume after kill -9 -------------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_run_killed_with_sigkill_resumes_to_the_uninterrupted_result(tmp_path, reviews_csv):
    """kill -9 (no handler runs, no save on the way out), then --resume from the last periodic checkpoint: the
    same losses and parameter checksum as a run never interrupted; the dead run's lock is taken over."""
    args = ("--epochs", "20", "--checkpoint-every", "1")
    reference = finish(cli_args(reviews_csv, tmp_path / "whole", *args))
    assert reference.returncode == 0, reference.stderr[-2000:]
    out = tmp_path / "killed"
    victim = start(cli_args(reviews_csv, out, *args))
    wait_for(lambda: checkpoint_step(out) >= 10, victim)
    victim.send_signal(signal.SIGKILL)
    victim.communicate(timeout=60)
    assert victim.returncode == -signal.SIGKILL and (out / LOCK_NAME).exists()  # nothing cleaned up
    killed_at = checkpoint_step(out)
    assert 10 <= killed_at < 160 and not (out / "metrics.json").exists()
    resumed = finish(cli_args(reviews_csv, out, *args, "--resume"))
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f"process {victim.pid}" in resumed.stderr and "which no longer runs" in resumed.stderr
    whole, again = (json.loads((tmp_path / name / "metrics.json").read_text()) for name in ("whole", "killed"))
    assert [h["loss"] for h in again["history"]] == [h["loss"] for h in whole["history"]]
    assert len(whole["history"]) == 160
    assert again["parameter_checksum"] == whole["parameter_checksum"]
    assert not (out / LOCK_NAME).exists()


# 3. Checkpoints by time --------------------------------------------------------------------------------------

def rows(count: int = 32) -> list[dict]:
    return [{"input_ids": torch.arange(8) + i, "attention_mask": torch.ones(8, dtype=torch.long),
             "labels": torch.tensor(i % 2)} for i in range(count)]


@pytest.mark.parametrize("minutes, saves", [(1e-9, 8 + 1), (60.0, 1)])
def test_checkpoint_minutes_saves_when_the_time_is_up(tmp_path, minutes, saves):
    """8 optimizer steps, one epoch: due after every step when the interval is tiny, only at the epoch's end when
    it is an hour; the saves and their time are counted."""
    run = RunConfig(progress=False, output_dir=str(tmp_path), checkpoint_minutes=minutes)
    result = train(tiny_classifier(), DataLoader(rows(), batch_size=4), TrainConfig(learning_rate=1e-3), run=run)
    assert result.checkpoint_saves == saves and result.checkpoint_time_s > 0
    assert 0 < result.checkpoint_share < 1
    assert load_checkpoint(tmp_path)["position"]["step"] == 8


def test_checkpoint_minutes_alone_is_enough_to_checkpoint_and_needs_a_folder():
    assert RunConfig(output_dir="x", checkpoint_minutes=5).checkpoint_dir == "x"
    with pytest.raises(ValueError, match="checkpoint_minutes needs output_dir"):
        RunConfig(checkpoint_minutes=5)
    for bad in (0, -1, float("inf"), "auto", True):
        with pytest.raises(ValueError, match="checkpoint_minutes must be a number > 0"):
            RunConfig(output_dir="x", checkpoint_minutes=bad)
    with pytest.raises(ValueError, match="checkpoint_minutes"):
        RunConfig(output_dir="x", checkpoint_minutes=5, backend="accelerate")


def test_the_gpu_profiles_long_runs_checkpoint_by_time_by_default():
    gpu, cpu = get_profile("gpu", env={}), get_profile("cpu", env={})
    assert checkpoint_minutes("auto", "plain", gpu) == 15 == get_profile("full", env={}).checkpoint_minutes
    assert checkpoint_minutes("auto", "accelerate", gpu) is None  # that backend keeps its own checkpoints
    assert checkpoint_minutes("auto", "plain", cpu) is None
    assert checkpoint_minutes(2.5, "plain", cpu) == 2.5 and checkpoint_minutes(None, "plain", gpu) is None
    assert get_profile("gpu", env={"BERTMEM_CHECKPOINT_MINUTES": "none"}).checkpoint_minutes is None


def test_train_says_where_its_checkpoints_live_and_what_they_cost(tmp_path, reviews_csv, capsys):
    out = tmp_path / "timed"
    assert main(cli_args(reviews_csv, out, "--checkpoint-minutes", "30", "--max-steps", "3")) == 0
    err = capsys.readouterr().err
    assert "checkpoints every 30 minutes, at each epoch end" in err and f"go to {out}" in err
    assert "checkpoints took" in err and "% of the time spent training and saving" in err
    saved = json.loads((out / "metrics.json").read_text())["checkpoints"]
    assert saved["saves"] == 1 and 0 < saved["share"] < 1


def test_checkpoint_minutes_may_change_on_resume(tmp_path, reviews_csv):
    """How often a run saves changes neither its data nor its schedule: a resume may set it differently."""
    out = tmp_path / "steps"
    assert main(cli_args(reviews_csv, out, "--checkpoint-every", "2", "--max-steps", "4")) == 0
    resumed = cli_args(reviews_csv, out, "--checkpoint-minutes", "30", "--max-steps", "4", "--resume")
    assert main(resumed) == 0
    assert load_checkpoint(out)["position"]["step"] == 4


# 4. The bench continues where it was killed ------------------------------------------------------------------

@pytest.fixture
def bench_csv(tmp_path):
    rows = [(f"review {i} says {'good' if i % 2 else 'bad'} things about film {i % 11}", i % 2) for i in range(160)]
    path = tmp_path / "reviews.csv"
    pd.DataFrame(rows, columns=["text", "label"]).to_csv(path, index=False)
    return path


def bench_args(csv: Path, out: Path, *extra: str) -> list[str]:
    return ["bench", "--model", "tiny-bert", "--dataset", str(csv), "--train-size", "64", "--eval-size", "24",
            "--max-length", "32", "--effective-batch", "8", "--accumulation-steps", "2", "--epochs", "30",
            "--learning-rate", "1e-3", "--device", "cpu", "--no-progress", "--no-estimate", "--seeds", "0",
            "--variants", "fp32 baseline", "accumulation ×4", "--output-dir", str(out), *extra]


@pytest.mark.slow
def test_a_killed_bench_resumes_without_redoing_finished_runs(tmp_path, bench_csv, capsys):
    out = tmp_path / "bench"
    first_row = out / "finished" / f"run-{run_slug('fp32 baseline', 0)}.json"
    bench = start(bench_args(bench_csv, out))
    wait_for(first_row.exists, bench)
    bench.send_signal(signal.SIGKILL)  # between two variants: the second is still training
    bench.communicate(timeout=60)
    assert bench.returncode == -signal.SIGKILL
    assert not (out / "finished" / f"run-{run_slug('accumulation ×4', 0)}.json").exists()
    kept = json.loads(first_row.read_text())
    assert main(bench_args(bench_csv, out)) == 0
    err = capsys.readouterr().err
    assert "finished runs found there, not run again: 1" in err and "took over the lock" in err
    result = json.loads((out / "bench.json").read_text())
    by_variant = {r["variant"]: r for r in result["rounds"][0]}
    assert by_variant["fp32 baseline"]["step_times_s"] == kept["step_times_s"]  # read, not run again
    assert by_variant["accumulation ×4"]["step_times_s"]  # run now
    assert (out / "finished" / f"run-{run_slug('accumulation ×4', 0)}.json").exists()


def test_a_bench_with_other_settings_is_refused_and_overwrite_starts_over(tmp_path, bench_csv, capsys):
    out = tmp_path / "bench"
    quick = ["--epochs", "1", "--variants", "fp32 baseline"]
    assert main(bench_args(bench_csv, out) + quick) == 0
    with pytest.raises(SystemExit) as stop:
        main(bench_args(bench_csv, out, "--learning-rate", "2e-3") + quick)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "learning_rate: 0.001 then, 0.002 now" in err and "--overwrite" in err
    assert main(bench_args(bench_csv, out, "--learning-rate", "2e-3", "--overwrite") + quick) == 0
    assert json.loads((out / "finished" / "settings.json").read_text())["learning_rate"] == 2e-3


def test_more_seeds_reuse_the_finished_ones(tmp_path, bench_csv):
    """Seeds and variants only choose rows: a bench continued with another seed keeps the first seed's rows."""
    folder = tmp_path / "bench"
    bench = BenchConfig(model_id="tiny-bert", dataset=str(bench_csv), seeds=(0,))
    FinishedRuns(folder, bench).keep("fp32 baseline", 0, {"variant": "fp32 baseline"})
    FinishedRuns(folder, bench).check("data")
    more = FinishedRuns(folder, replace(bench, seeds=(0, 1)))
    more.check("data")
    assert more.row("fp32 baseline", 0) == {"variant": "fp32 baseline"} and more.row("fp32 baseline", 1) is None
    with pytest.raises(ValueError, match="data_fingerprint"):
        more.check("other data")


def test_a_run_refused_by_the_lock_leaves_the_holders_folder_alone(tmp_path, reviews_csv, capsys):
    out = tmp_path / "held"
    out.mkdir()
    write_lock(out, holder(pid=os.getppid(), started=""))
    with pytest.raises(SystemExit) as stop:
        main(cli_args(reviews_csv, out, "--overwrite"))
    assert stop.value.code == 2 and "in use by process" in capsys.readouterr().err
    assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME]
    assert not (out / CHECKPOINT_NAME).exists()


def test_a_lock_on_google_drive_waits_out_colabs_sync_before_it_counts_as_stale(tmp_path):
    """Colab syncs Drive late: another runtime's heartbeat may arrive long after it was written, so a lock on Drive
    counts as stale only after DRIVE_SYNC_S more (ages faked by the lock file's modification time)."""
    from bertmem.core.locks import DRIVE_SYNC_S

    content = tmp_path / "content"
    on_drive = content / "drive" / "MyDrive" / "bertmem-runs" / "bench"
    off_drive = content / "bertmem-runs" / "bench"
    elsewhere = holder(host=socket.gethostname() + "-other", boot="another-boot")
    for folder in (on_drive, off_drive):
        folder.mkdir(parents=True)
        write_lock(folder, elsewhere, age_s=STALE_AFTER_S + 60)
    with FolderLock(off_drive, content=content) as lock:  # the local disk: five minutes of silence is enough
        assert "heartbeat stopped" in lock.took_over
    wait = (STALE_AFTER_S + DRIVE_SYNC_S - (STALE_AFTER_S + 60)) / 60
    with pytest.raises(FolderInUse, match=rf"run again in {wait:.1f} minutes"):
        FolderLock(on_drive, content=content).acquire()
    write_lock(on_drive, elsewhere, age_s=STALE_AFTER_S + DRIVE_SYNC_S + 60)
    with FolderLock(on_drive, content=content) as lock:
        assert "heartbeat stopped" in lock.took_over
