"""One sandboxed Python process per submission (bubblewrap), driven from the trusted side.

What the sandbox isolates (also in ``autograder/README.md``):

* **Files**: a fresh mount namespace whose root is an empty tmpfs. Read-only: ``/usr`` (system
  libraries), the base Python installation's standard library, the allowed packages alone
  (torch, numpy and the runner's IPython, :mod:`autograder.run.environment`: every other folder of
  installed packages is covered by an empty tmpfs and the virtualenv is not mounted), the
  sandbox's allow-listed copy of course_lib (the grading plumbing, no exercise module and no body
  of any exercise's answer, see :mod:`autograder.strip`, with this run's hidden inputs in
  ``grading-inputs/``) and the runner script.
  Writable: ``/tmp`` only, a size-capped tmpfs that disappears with the sandbox. The repository,
  ``solutions/``, ``.git``, the gradebook, the grades, the reference outputs and the other
  submissions do not exist inside.
* **Network**: a new, empty network namespace (``--unshare-net``): no interface but a down
  loopback.
* **Processes**: a new PID namespace (``--unshare-pid``); bubblewrap's init is PID 1, and
  ``--die-with-parent`` kills everything in it when the sandbox is ended, so no child (detached,
  daemonised, ``setsid``) outlives the submission. IPC and UTS namespaces are new too.
* **User**: as root, the student's process runs under an unprivileged uid of its own per worker
  slot (``setpriv``, no capabilities, ``no_new_privs``), so ``RLIMIT_NPROC`` caps its process and
  thread count (a fork bomb hits the cap); slots are held with ``flock`` so concurrent runs never
  share a uid, and every process of the slot's uid is killed before and after each sandbox; as a
  normal user, a user namespace does the same.
* **Limits**: a cgroup per sandbox (:mod:`autograder.run.cgroups`): one memory limit for all its
  processes together (default 3 GiB, no swap), an equal CPU weight and a one-core cap, a task
  limit; and per process ``RLIMIT_AS`` (address space, the same 3 GiB, a second line where the
  cgroup exists and the only line where it cannot be made), ``RLIMIT_NPROC`` (default 64
  tasks), ``RLIMIT_FSIZE`` (64 MiB per file), ``RLIMIT_CORE`` 0, the tmpfs size; per-cell and
  per-notebook wall-clock limits enforced by the driver (a cell that overruns gets the whole
  sandbox killed, and a fresh one is started for the next exercise); captured output capped at
  64 KiB per cell, file descriptors 1 and 2 go to /dev/null.
"""

from __future__ import annotations

import fcntl
import json
import os
import resource
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autograder.run import cgroups, environment

RUNNER = Path(__file__).with_name("sandbox_runner.py")
#: The folder of ``course_dir`` (read-only in the sandbox) holding the hidden cases' inputs that
#: the trusted process built for this grading run (not a Python name: nothing can import it).
INPUTS_FOLDER = "grading-inputs"
REPLY_CAP = 48 * 1024 * 1024
UID_BASE = 60000
SLOT_LOCKS = Path(tempfile.gettempdir()) / "autograder-slots"


def slot_uid(slot: int) -> int:
    """The unprivileged uid the sandboxes of a worker slot run under (when run as root)."""
    return UID_BASE + slot


def acquire_slots(n: int) -> tuple[list[int], list[int]]:
    """``n`` worker slots no other grading run on this machine holds: ``(slots, lock fds)``.

    Each slot has its own uid, and a slot's uid is cleaned of every process between sandboxes,
    so two concurrent runs must never share one: an exclusive ``flock`` per slot guarantees it.
    Close the fds (or exit) to release.
    """
    SLOT_LOCKS.mkdir(mode=0o700, exist_ok=True)
    slots, fds = [], []
    for slot in range(1000):
        fd = os.open(SLOT_LOCKS / f"{slot}.lock", os.O_CREAT | os.O_RDWR, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue
        slots.append(slot)
        fds.append(fd)
        if len(slots) == n:
            return slots, fds
    for fd in fds:
        os.close(fd)
    raise RuntimeError("no free grading slot (1000 in use)")


def _pids_of_uid(uid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                for line in f:
                    if line.startswith("Uid:"):
                        if int(line.split()[1]) == uid:
                            pids.append(int(entry))
                        break
        except OSError:
            continue
    return pids


def reap_uid(uid: int, timeout: float = 10.0) -> bool:
    """Kill every process of ``uid`` until none is left; False if some survive ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        pids = _pids_of_uid(uid)
        if not pids:
            return True
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


@dataclass(frozen=True)
class Limits:
    """Resource limits of one sandbox.

    Attributes:
        memory_bytes: the sandbox's memory: its cgroup's limit for all its processes together,
            and each process's ``RLIMIT_AS``.
        tasks: ``RLIMIT_NPROC`` of the sandbox's uid; the cgroup's ``pids.max`` adds
            bubblewrap's own few processes.
        cpus: the cgroup's CPU cap in cores (every sandbox has the same CPU weight).
        file_bytes, tmp_bytes: ``RLIMIT_FSIZE`` and the size of the ``/tmp`` tmpfs.
        cell_timeout, notebook_timeout, start_timeout: wall-clock limits in seconds.

    Example:
        >>> Limits(memory_bytes=1 << 30).cpus
        1.0
    """

    memory_bytes: int = 3 << 30
    tasks: int = 64
    cpus: float = 1.0
    file_bytes: int = 64 << 20
    tmp_bytes: int = 256 << 20
    cell_timeout: float = 60.0
    notebook_timeout: float = 300.0
    start_timeout: float = 60.0


class SandboxDied(Exception):
    """The sandboxed process ended (crash, os._exit, killed) or timed out."""

    def __init__(self, reason: str, timed_out: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.timed_out = timed_out


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def _mount_parents(dest: str, made: set[str]) -> list[str]:
    args = []
    parts = Path(dest).parts
    for k in range(2, len(parts)):
        parent = str(Path(*parts[:k]))
        if parent not in made:
            made.add(parent)
            args += ["--perms", "0755", "--dir", parent]
    return args


def system_tops() -> list[str]:
    """bubblewrap arguments for ``/bin``, ``/sbin`` and the ``/lib*`` folders: read-only binds,
    or the same symbolic links where the system has merged them into ``/usr``."""
    args: list[str] = []
    for top in ("/bin", "/sbin", "/lib", "/lib64", "/lib32"):
        p = Path(top)
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), top]
        elif p.is_dir():
            args += ["--ro-bind", top, top]
    return args


def bwrap_command(course_dir: Path, slot: int, limits: Limits, cmd_fd: int,
                  rep_fd: int) -> list[str]:
    """The bubblewrap command line of a sandbox (see the module docstring)."""
    bwrap = bwrap_path()
    if bwrap is None:
        raise RuntimeError("bubblewrap (bwrap) is not installed: `apt-get install bubblewrap` "
                           "(make setup does it)")
    args = [bwrap, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
            "--unshare-cgroup-try", "--die-with-parent", "--new-session",
            "--hostname", "sandbox", "--ro-bind", "/usr", "/usr", *system_tops()]
    for f in ("/etc/ld.so.cache", "/etc/localtime", "/etc/nsswitch.conf", "/etc/passwd",
              "/etc/group"):
        if Path(f).exists():
            args += ["--ro-bind", f, f]
    # /tmp first: a Python installation or virtualenv that lives under /tmp (a CI checkout) is
    # then bound on top of the fresh tmpfs instead of being hidden by it.
    args += ["--proc", "/proc", "--dev", "/dev",
             "--perms", "1777", "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp"]
    made: set[str] = {"/tmp"}
    # The base interpreter only (its standard library): the virtualenv is not mounted, and every
    # folder of installed packages is covered by an empty tmpfs (autograder/run/environment.py).
    base = os.path.realpath(sys.base_prefix)
    if not base.startswith("/usr"):
        args += _mount_parents(base, made) + ["--ro-bind", base, base]
    for folder in environment.package_folders():
        if folder.startswith(("/usr/", base + "/")):
            args += ["--tmpfs", folder]
    args += ["--perms", "0755", "--dir", "/opt", "--perms", "0755", "--dir", "/opt/grader",
             "--perms", "0755", "--dir", environment.SITE]
    for name, path in sorted(environment.site_entries().items()):
        args += ["--ro-bind", str(path), f"{environment.SITE}/{name}"]
    args += ["--ro-bind", str(course_dir), "/opt/course",
             "--ro-bind", str(RUNNER), "/opt/grader/runner.py",
             "--chdir", "/tmp", "--clearenv"]
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/tmp", "PYTHONPATH": f"/opt/course:{environment.SITE}",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONHASHSEED": "0", "COURSE_GRADING_MODE": "record",
        "COURSE_GRADING_RECORD_DIR": "/tmp/records", "COURSE_LIB_QUICK": "1",
        "COURSE_GRADING_INPUT_DIR": f"/opt/course/{INPUTS_FOLDER}",
        "COURSE_DEVICE": "cpu", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1", "MPLBACKEND": "Agg", "MPLCONFIGDIR": "/tmp/.mpl",
        "CUDA_VISIBLE_DEVICES": "",
    }
    for k, v in env.items():
        args += ["--setenv", k, v]
    python = [environment.sandbox_python(), *environment.python_flags(), "/opt/grader/runner.py",
              str(cmd_fd), str(rep_fd)]
    if os.geteuid() == 0:
        uid = slot_uid(slot)
        args += ["/usr/bin/setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                 "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs"]
    else:
        args[1:1] = ["--unshare-user"]
    return args + python


def _limit_preexec(limits: Limits, cgroup: cgroups.SandboxCgroup | None = None
                   ) -> Callable[[], None]:
    """The function the sandbox's first process runs between ``fork`` and ``exec``: join the
    sandbox's cgroup (so that every process of the sandbox is inside), then set the limits."""
    join = cgroup.join if cgroup is not None else None

    def preexec() -> None:
        if join is not None:
            join()
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        resource.setrlimit(resource.RLIMIT_NPROC, (limits.tasks, limits.tasks))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.file_bytes, limits.file_bytes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    return preexec


@dataclass
class Sandbox:
    """A running sandboxed runner: send it code, get a reply or :class:`SandboxDied`."""

    course_dir: Path
    slot: int
    limits: Limits
    proc: subprocess.Popen | None = None
    _buf: bytes = b""
    started: float = field(default_factory=time.time)
    cgroup: cgroups.SandboxCgroup | None = None

    def start(self) -> None:
        """Start the sandbox in a cgroup of its own (where one can be made) and wait until
        its runner is ready.

        Raises:
            SandboxDied: the runner did not start (or an earlier sandbox of the slot survives).
            autograder.run.cgroups.CgroupError: the kernel refused the sandbox's cgroup.
        """
        if os.geteuid() == 0 and not reap_uid(slot_uid(self.slot)):
            raise SandboxDied("processes of an earlier sandbox of this slot would not die")
        self.cgroup = cgroups.sandbox_cgroup(f"slot{self.slot}", self.limits.memory_bytes,
                                             self.limits.cpus, self.limits.tasks)
        self._spawn(lambda cmd_r, rep_w: bwrap_command(self.course_dir, self.slot, self.limits,
                                                       cmd_r, rep_w))

    def _spawn(self, command: Callable[[int, int], list[str]], **popen: Any) -> None:
        """Start ``command(cmd_fd, reply_fd)`` in the sandbox's cgroup with its limits, and wait
        until its runner says it is ready (the cgroup is removed if it cannot start)."""
        cmd_r, cmd_w = os.pipe()
        rep_r, rep_w = os.pipe()
        try:
            self.proc = subprocess.Popen(
                command(cmd_r, rep_w), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, pass_fds=(cmd_r, rep_w), start_new_session=True,
                preexec_fn=_limit_preexec(self.limits, self.cgroup), **popen)
        except BaseException:
            os.close(cmd_w)
            os.close(rep_r)
            if self.cgroup is not None:
                self.cgroup.remove()
                self.cgroup = None
            raise
        finally:
            os.close(cmd_r)
            os.close(rep_w)
        self._cmd = os.fdopen(cmd_w, "wb", buffering=0)
        self._rep = rep_r
        os.set_blocking(rep_r, False)
        self._buf = b""
        ready = self._read(self.limits.start_timeout)
        if not ready.get("ready"):
            self.kill()
            raise SandboxDied("the sandbox did not start")

    def _read(self, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        sel = selectors.DefaultSelector()
        sel.register(self._rep, selectors.EVENT_READ)
        try:
            while b"\n" not in self._buf:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.kill()
                    raise SandboxDied(f"timed out after {timeout:g} s", timed_out=True)
                if not sel.select(min(left, 0.5)):
                    if self.proc is not None and self.proc.poll() is not None:
                        code = self.kill(grace=1.0)
                        raise SandboxDied(_death_reason(code))
                    continue
                try:
                    chunk = os.read(self._rep, 1 << 20)
                except BlockingIOError:
                    continue
                if not chunk:
                    code = self.kill(grace=2.0)
                    raise SandboxDied(_death_reason(code))
                self._buf += chunk
                if len(self._buf) > REPLY_CAP:
                    self.kill()
                    raise SandboxDied("the kernel sent more data than the grader accepts")
        finally:
            sel.close()
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            reply = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: JSON nested past the parser
            self.kill()
            raise SandboxDied("the kernel's reply was garbled (did your code write to the "
                              "grader's channel?)") from None
        if not isinstance(reply, dict):
            self.kill()
            raise SandboxDied("the kernel's reply was garbled")
        return reply

    def run(self, op: str, code: str, timeout: float, **extra) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            raise SandboxDied("the kernel is not running")
        try:
            self._cmd.write((json.dumps({"op": op, "code": code, **extra}) + "\n").encode())
        except (BrokenPipeError, OSError):
            code_ = self.kill()
            raise SandboxDied(_death_reason(code_)) from None
        return self._read(timeout)

    def kill(self, grace: float = 0.0) -> int | None:
        """End the sandbox and every process in it; return the runner's exit status.

        Args:
            grace: seconds to wait for an exit already under way (the reply channel closed)
                before killing, so that its real status is reported.
        """
        if self.proc is None:
            return None
        code = self.proc.poll()
        if code is None and grace > 0:
            try:
                code = self.proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                code = None
        if code is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            if self.cgroup is not None:  # every process of the sandbox, other sessions too
                self.cgroup.kill()
            try:
                code = self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                code = None
        for f in (getattr(self, "_cmd", None),):
            try:
                f and f.close()
            except OSError:
                pass
        try:
            os.close(self._rep)
        except (OSError, AttributeError):
            pass
        self.proc = None
        if os.geteuid() == 0:
            reap_uid(slot_uid(self.slot))  # stragglers still leaving the PID namespace
        if self.cgroup is not None:
            self.cgroup.remove()  # after its processes are gone
            self.cgroup = None
        return code

    def processes(self) -> list[int]:
        """The sandbox's processes as this process sees them: its cgroup's, else the
        descendants of the process it started."""
        if self.cgroup is not None:
            found = self.cgroup.pids()
            if found:
                return sorted(found)
        if self.proc is None:
            return []
        return _descendants(self.proc.pid)

    def memory_in_use(self) -> tuple[int | None, int]:
        """``(bytes the sandbox's cgroup holds that cannot be reclaimed, or None; the address
        space of its processes)``: what the trusted driver measures before a memory probe (the
        page cache of files it read is left out: the kernel drops it to make room, so it must not
        count as room)."""
        current = self.cgroup.memory_unreclaimable() if self.cgroup is not None else None
        return current, sum(_vm_size(pid) for pid in self.processes())

    def limit_memory(self, extra_bytes: int, baseline: tuple[int | None, int]) -> list[str]:
        """Limit the sandbox, from outside, to ``baseline`` plus ``extra_bytes``: its cgroup's
        memory limit and each of its processes' address space (``prlimit``; children inherit
        it). Returns what was limited (empty: nothing could be, the caller must not grade)."""
        current, _ = baseline
        done = []
        if current is not None and self.cgroup is not None:
            if self.cgroup.set_memory_limit(current + extra_bytes):
                done.append("cgroup")
        for pid in self.processes():
            size = _vm_size(pid)
            if size <= 0:
                continue
            try:
                resource.prlimit(pid, resource.RLIMIT_AS, (size + extra_bytes,
                                                          size + extra_bytes))
                done.append(f"address space of {pid}")
            except (OSError, ValueError):
                continue
        return done

    def limit_memory_from_runner(self, extra_bytes: int, timeout: float) -> list[str]:
        """Where this process may not ``prlimit`` the sandbox's processes (a container without
        ``CAP_SYS_RESOURCE``, whose student uid is not this process's: the fallback runner in
        Gradescope's or PrairieLearn's container), the sandbox's runner lowers its own address
        space limit, soft and hard, to its size plus ``extra_bytes``. Call it only before any
        student code has run in this sandbox: from then on the kernel holds every process of the
        sandbox to it (children inherit it, and an unprivileged process cannot raise a hard
        limit). Checked from here in ``/proc/<pid>/limits``; returns what was limited (empty:
        nothing, the caller must not grade)."""
        extra = int(extra_bytes)
        code = ("import resource as _r\n"
                "with open('/proc/self/status') as _f:\n"
                "    _vm = next(int(l.split()[1]) * 1024 for l in _f if l.startswith('VmSize:'))\n"
                f"_r.setrlimit(_r.RLIMIT_AS, (_vm + {extra}, _vm + {extra}))\n"
                "del _r, _f, _vm\n")
        self.run("cell", code, timeout)
        done = []
        for pid in self.processes():
            size, hard = _vm_size(pid), _address_space_limit(pid)
            if size > 0 and hard is not None and hard <= size + extra_bytes + (64 << 20):
                done.append(f"address space of {pid} (lowered by the runner itself)")
        return done

    def memory_peak(self) -> int | None:
        """Bytes: the most memory the sandbox's processes held together since it started or
        since :meth:`reset_memory_peak`; None without a memory cgroup (or where the kernel
        does not keep the peak).

        Example (the trusted driver, around one exercise)::

            box.reset_memory_peak()
            box.run("test", code, timeout)
            used = box.memory_peak()  # None: not measurable here
        """
        return self.cgroup.memory_peak() if self.cgroup is not None else None

    def reset_memory_peak(self) -> bool:
        """Start :meth:`memory_peak` again from the memory held now; False where it cannot be
        reset (no memory cgroup; cgroup v2 before Linux 6.12)."""
        return self.cgroup.reset_memory_peak() if self.cgroup is not None else False


def _descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += children.get(p, [])
    return sorted(out)


def _vm_size(pid: int) -> int:
    """Bytes of ``pid``'s address space (``VmSize``), 0 when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmSize:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _address_space_limit(pid: int) -> int | None:
    """The hard ``RLIMIT_AS`` of ``pid`` in bytes, from ``/proc/<pid>/limits``; None when
    unlimited or unreadable."""
    try:
        with open(f"/proc/{pid}/limits") as f:
            for line in f:
                if line.startswith("Max address space"):
                    hard = line.split()[4]
                    return None if hard == "unlimited" else int(hard)
    except (OSError, ValueError, IndexError):
        pass
    return None


def _death_reason(code: int | None) -> str:
    if code is None:
        return "the kernel died"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return f"the kernel died (signal {name})"
    if code >= 128:
        try:
            return f"the kernel died (signal {signal.Signals(code - 128).name})"
        except ValueError:
            pass
    return f"the kernel exited (status {code})"
