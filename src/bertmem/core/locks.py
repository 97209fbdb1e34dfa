"""One writer per output folder: a lock file naming its holder, a heartbeat, stale locks taken over (chapter 5b).

Two runs writing into one folder overwrite each other's checkpoints and results, and the last writer wins
silently. A run therefore holds `OUTPUT_DIR/bertmem.lock` while it works: host, process id, the process's start
time and the command. A second run is refused with one sentence naming the holder. A lock whose holder is gone is
taken over with a message: on the same machine when the process no longer exists (killed with `kill -9`, a
crash), on another machine (a Colab runtime that was reset; the folder is on Google Drive) when its heartbeat,
refreshed every minute by a thread of the holder, is older than `STALE_AFTER_S` — and, for a folder on Google
Drive, `DRIVE_SYNC_S` more: Colab writes to Drive through a local cache and syncs later, so a live holder's heartbeat
can reach another runtime late. Across machines this is best effort: it relies on the shared drive creating files
exclusively and keeping their modification times.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from bertmem.core.runtime import on_drive

LOCK_NAME = "bertmem.lock"
HEARTBEAT_S = 60.0  # how often a holder touches its lock
STALE_AFTER_S = 300.0  # another machine's lock untouched this long: its holder is gone
# Colab syncs a Drive folder from a local cache on its own schedule (googlecolab/colabtools#659) and documents no
# bound; a 3 GB file reached Drive 30 minutes late in #2607 (small files there sooner). A lock on Drive therefore
# waits this much longer before it counts as stale: a stated margin, not a measured bound.
DRIVE_SYNC_S = 1800.0


class FolderInUse(ValueError):
    """Another live run holds the output folder's lock."""


def boot_id() -> str:
    """This machine's boot id (Linux), so a process id from before a reboot never counts (chapter 5b)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def pid_namespace() -> str:
    """This process's PID namespace (Linux): containers sharing a host name and boot id differ here (ch. 5b)."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return ""


def stat_fields(pid: int) -> list[str]:
    """The fields of /proc/<pid>/stat after the process name (Linux; empty elsewhere or when it is gone) (ch. 5b)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()  # the name may hold spaces
    except (OSError, IndexError):
        return []


def process_start(pid: int) -> str:
    """When `pid` started (clock ticks since boot, Linux): a reused process id is not its holder (chapter 5b)."""
    fields = stat_fields(pid)
    return fields[19] if len(fields) > 19 else ""  # field 22 of the whole line


def process_alive(pid: int, started: str = "") -> bool:
    """Whether process `pid` runs here (a zombie does not; another process with its id does not) (chapter 5b)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: it exists
        pass
    fields = stat_fields(pid)
    if not fields:
        return True  # no /proc (macOS): the signal answered
    return fields[0] != "Z" and (not started or process_start(pid) in ("", started))


@dataclass(frozen=True)
class Holder:
    """Who holds a lock: machine, process and what it runs (chapter 5b)."""

    host: str
    pid: int
    started: str  # the process's start time on its machine, "" where unknown
    boot: str  # the machine's boot id, "" where unknown
    since: str  # wall-clock time the lock was taken (UTC)
    command: str
    namespace: str = ""  # the PID namespace, "" where unknown: process ids mean something only inside it

    @classmethod
    def this_process(cls) -> "Holder":
        """The holder a lock taken now, by this process, records."""
        program = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
        if program in ("bertmem", "__main__.py"):  # the console script, or python -m bertmem
            command = " ".join(["bertmem", *sys.argv[1:]])
        else:  # a notebook kernel or a script calling the library
            command = f"python {program}".strip()
        return cls(host=socket.gethostname(), pid=os.getpid(), started=process_start(os.getpid()),
                   boot=boot_id(), since=time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                   command=command if len(command) <= 160 else command[:159] + "…", namespace=pid_namespace())

    def describe(self) -> str:
        """'process 1234 on host h (since …, `bertmem train …`)'."""
        return f"process {self.pid} on host {self.host} (since {self.since}, `{self.command}`)"

    def same_machine(self, other: "Holder") -> bool:
        """Whether both records come from this machine since its last boot, in one PID namespace."""
        def same(a: str, b: str) -> bool:
            return not a or not b or a == b  # unknown on either side: the host name decides

        return self.host == other.host and same(self.boot, other.boot) and same(self.namespace, other.namespace)


def read_holder(path: Path) -> Holder | None:
    """The holder a lock file names; None for an unreadable or half-written file (chapter 5b)."""
    try:
        return Holder(**json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


def stale_reason(holder: Holder | None, age_s: float, me: Holder, stale_after_s: float = STALE_AFTER_S) -> str | None:
    """Why a lock no longer holds (process gone, heartbeat stopped), or None while its holder runs (chapter 5b)."""
    if holder is None:
        return "a lock file that names no holder" if age_s > HEARTBEAT_S else None
    if holder.same_machine(me):
        if holder.pid == me.pid and holder.started == me.started:
            return "this same process, from a run that did not finish"
        return None if process_alive(holder.pid, holder.started) else "which no longer runs"
    if age_s > stale_after_s:
        return f"whose heartbeat stopped {age_s / 60:.0f} minutes ago (a runtime reset or a crash)"
    return None


class FolderLock:
    """`with FolderLock(folder):` — hold `folder/bertmem.lock` while a run writes there (chapter 5b)."""

    def __init__(self, folder: str | os.PathLike, flag: str = "--output-dir", content: Path | None = None):
        self.path, self.flag = Path(folder) / LOCK_NAME, flag
        # another machine's heartbeat reaches a folder on Drive only after Colab syncs it
        self.stale_after_s = STALE_AFTER_S + (DRIVE_SYNC_S if on_drive(folder, content) else 0.0)
        self.holder = Holder.this_process()
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self.took_over: str | None = None  # the message printed when a stale lock was taken over

    def acquire(self) -> None:
        """Create the lock file atomically; refuse if a live run holds it; take over a stale one, saying so."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(3):  # a lock removed or replaced between our look and our write: look again
            if self._create():
                break
            holder = read_holder(self.path)
            try:
                age = time.time() - self.path.stat().st_mtime
            except FileNotFoundError:
                continue
            reason = stale_reason(holder, age, self.holder, self.stale_after_s)
            if reason is None:
                raise FolderInUse(self.refusal(holder, age))
            if not self._set_aside(holder):
                continue  # the lock changed hands while we looked: look again
            self.took_over = (f"took over the lock of {self.path.parent} from "
                              f"{holder.describe() if holder else 'an unknown run'}, {reason}")
            print(f"bertmem: {self.took_over}", file=sys.stderr, flush=True)
        else:
            raise FolderInUse(f"output folder {self.path.parent}: could not take its lock; another run is "
                              f"starting there: choose another {self.flag}")
        self._beat = threading.Thread(target=self._heartbeat, name="bertmem-lock-heartbeat", daemon=True)
        self._beat.start()

    def refusal(self, holder: Holder | None, age_s: float) -> str:
        """The one sentence a refused run prints: who holds the folder and what to do."""
        who = holder.describe() if holder else "another run"
        if holder is not None and not holder.same_machine(self.holder):  # e.g. a Colab runtime that was reset
            wait = max(0.0, self.stale_after_s - age_s)
            return (f"output folder {self.path.parent} is in use by {who}, on another machine (heartbeat "
                    f"{age_s:.0f} s old): if that machine is gone, run again in {wait / 60:.1f} minutes, when the "
                    f"lock counts as stale; or choose another {self.flag}")
        return f"output folder {self.path.parent} is in use by {who}: wait for it to end, stop it, or choose " \
               f"another {self.flag}"

    def _set_aside(self, judged: Holder | None) -> bool:
        """Move a stale lock out of the way by renaming it (only one of several runs can), then check that the
        file moved is the one judged stale; a fresh lock moved by mistake is put back. True: the path is free."""
        aside = self.path.with_name(f"{LOCK_NAME}.stale.{os.getpid()}")
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return False
        if read_holder(aside) != judged:  # another run took the lock between our look and our rename
            with contextlib.suppress(FileExistsError):
                os.link(aside, self.path)
            aside.unlink(missing_ok=True)
            return False
        aside.unlink(missing_ok=True)
        return True

    def _create(self) -> bool:
        """Write our record to a new lock file; False if one exists."""
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as handle:
            json.dump(asdict(self.holder), handle)
        return True

    def _heartbeat(self) -> None:
        """Touch the lock every HEARTBEAT_S so another machine can tell we still run; say so once if it is lost."""
        warned = False
        while not self._stop.wait(HEARTBEAT_S):
            try:
                ours = read_holder(self.path) == self.holder
                if ours:
                    os.utime(self.path)
            except OSError:  # a network drive that hiccups: try again at the next beat
                ours = True
            if not ours and not warned:
                print(f"bertmem: warning: the lock of {self.path.parent} is no longer this run's: another run may "
                      "be writing there too", file=sys.stderr, flush=True)
                warned = True

    def release(self) -> None:
        """Stop the heartbeat and remove the lock, if it is still ours."""
        self._stop.set()
        if self._beat is not None:
            self._beat.join()
        if read_holder(self.path) == self.holder:
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> "FolderLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def lock_output_folder(folder: str | os.PathLike, flag: str = "--output-dir", env: dict | None = None):
    """The folder's lock for this process; under a multi-process launch only rank 0 holds it (chapters 5b, 7)."""
    env = os.environ if env is None else env
    if int(env.get("WORLD_SIZE", "1")) > 1 and env.get("RANK", "0") != "0":
        return contextlib.nullcontext()  # rank 0 holds the folder for every process of its launch
    return FolderLock(folder, flag)
