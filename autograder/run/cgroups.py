"""One cgroup per sandbox: memory, CPU and task limits that hold for all its processes together.

``RLIMIT_AS`` limits each process's address space, so a submission that forks holds the limit
once per child (four children held 4,610 MiB in a sandbox limited to 3,072 MiB); scheduling is
per session, so ten ``setsid()`` busy loops took ten shares of the CPU from every other
sandbox. A cgroup counts every process in it: the sandbox's bubblewrap process joins its own
cgroup before it runs (:meth:`SandboxCgroup.join`, called between ``fork`` and ``exec``), and
every process it starts is inside.

Each sandbox's cgroup gets (the same for every sandbox):

=========  ===========================================  ===========================================
resource   cgroup v2 (unified hierarchy)                cgroup v1
=========  ===========================================  ===========================================
memory     ``memory.max`` = the limit,                  ``memory.limit_in_bytes`` = the limit,
           ``memory.swap.max`` = 0 (where present)      ``memory.memsw.limit_in_bytes`` = the limit
                                                        (where present)
CPU        ``cpu.weight`` 100 (equal shares),           ``cpu.shares`` 1024 (equal shares),
           ``cpu.max`` one core (``100000 100000``)     ``cpu.cfs_quota_us`` / ``cfs_period_us`` one
                                                        core
tasks      ``pids.max`` = ``RLIMIT_NPROC``'s tasks +    the same
           bubblewrap's own processes
=========  ===========================================  ===========================================

Layout: ``<the grader's own cgroup>/autograder-<pid>/box-slot<k>-<n>``, one grader-owned parent
per grading process, in each of the memory, cpu and pids hierarchies on v1 and in the single
hierarchy on v2, so that limits set on the grader's own cgroup (a systemd slice, a container)
still hold around its sandboxes. On v2 a cgroup that holds processes cannot hand controllers to
children (the "no internal processes" rule), so the parent is, in this order: under the
grader's own cgroup when that is the hierarchy's root; under it after moving the grader into a
leaf ``autograder-<pid>/grader`` when the grader is the only process there (a delegated scope:
``systemd-run --user --scope -p Delegate=yes ...``); else under the hierarchy's root (root
only). Parents left by grading processes that died are removed when the next one starts.

Where a controller cannot be used (no cgroup filesystem, not root and nothing delegated, a
read-only ``/sys/fs/cgroup`` in a container), :func:`grader_cgroups` says which and why
(:meth:`GraderCgroups.warning`: the line ``python -m autograder grade`` prints), and the
sandboxes run with their ``RLIMIT_*`` limits only.

Use, on a machine where the grader may create cgroups (tests/test_autograder_sandbox.py runs
it where it can)::

    box = sandbox_cgroup("slot0", memory_bytes=1 << 30, cpus=1.0, tasks=64)
    box.settings()["memory"]  # on cgroup v2: {'memory.max': '1073741824', 'memory.swap.max': '0'}
    box.remove()  # after the sandbox's processes are gone: True
"""

from __future__ import annotations

import atexit
import errno
import itertools
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

CONTROLLERS = ("memory", "cpu", "pids")
PROC_SELF = Path("/proc/self")
PARENT_PREFIX = "autograder-"
CPU_PERIOD_US = 100_000
V2_CPU_WEIGHT = 100  # the default weight: every sandbox has the same
V1_CPU_SHARES = 1024  # the default shares: every sandbox has the same
BWRAP_TASKS = 4  # bubblewrap's monitor and init processes, setpriv, one spare
PROTECTION = {
    "memory": "one memory limit for all of a sandbox's processes together (RLIMIT_AS alone "
              "limits each process, so forked children can hold --memory-mb each)",
    "cpu": "an equal CPU share and a one-core cap per sandbox (one submission's processes can "
           "slow every other sandbox)",
    "pids": "a task limit per sandbox (RLIMIT_NPROC alone, counted per uid)",
}


class CgroupError(Exception):
    """A cgroup could not be found, made or set; the message names the file and the reason.

    Attributes:
        controller: the controller whose setting was refused, when there is one.
    """

    def __init__(self, message: str, controller: str | None = None):
        super().__init__(message)
        self.controller = controller


def _mkdir(path: Path) -> None:
    """``mkdir`` in a cgroup filesystem (one place, so tests can stand in for the kernel)."""
    os.mkdir(path)


def _rmdir(path: Path) -> None:
    """``rmdir`` of a cgroup: the kernel removes its control files with it."""
    os.rmdir(path)


def _write(path: Path, text: str) -> None:
    """Write ``text`` to a cgroup control file in one ``write``, as the kernel expects."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _read(path: Path) -> str:
    with open(path, encoding="utf-8") as f:
        return f.read()


def _explain(err: OSError) -> str:
    return err.strerror or type(err).__name__


@dataclass(frozen=True)
class Mounts:
    """Where the grader's own cgroups are.

    Attributes:
        version: 1 (a hierarchy per controller) or 2 (the unified hierarchy).
        own: controller -> the directory of the grader's own cgroup in that controller's
            hierarchy (v2: the same directory for every controller).
        root: v2: the hierarchy's mount point (the fallback parent); v1: ``None``.
        lost: controller -> why it cannot be used at all.
    """

    version: int
    own: dict[str, Path]
    root: Path | None
    lost: dict[str, str]


def _unescape(field_: str) -> str:
    """A path field of ``mountinfo`` with its octal escapes (``\\040`` is a space) decoded."""
    out, i = [], 0
    while i < len(field_):
        if field_[i] == "\\" and field_[i + 1:i + 4].isdigit() and len(field_) >= i + 4:
            out.append(chr(int(field_[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field_[i])
            i += 1
    return "".join(out)


def _relative(path: str, mount_root: str) -> str | None:
    """``path`` (from ``/proc/self/cgroup``) relative to a mount of the hierarchy rooted at
    ``mount_root``; None when the mount does not show it.

    Example:
        >>> _relative("/docker/abc/x", "/docker/abc"), _relative("/a", "/"), _relative("/b", "/a")
        ('/x', '/a', None)
    """
    if mount_root == "/":
        return path if path.startswith("/") and "/.." not in path else None
    if path == mount_root:
        return "/"
    if path.startswith(mount_root + "/") and "/.." not in path:
        return path[len(mount_root):]
    return None


def detect(proc_self: Path | None = None) -> Mounts:
    """Find the grader's own cgroups from ``/proc/self/mountinfo`` and ``/proc/self/cgroup``.

    A controller mounted as a v1 hierarchy is used there (hybrid systems bind memory, cpu and
    pids to v1 and leave the v2 mount empty); otherwise the v2 mount is used.

    Raises:
        CgroupError: when neither file can be read or no cgroup filesystem is mounted.
    """
    proc_self = proc_self or PROC_SELF
    try:
        mountinfo = _read(proc_self / "mountinfo").splitlines()
        membership = _read(proc_self / "cgroup").splitlines()
    except OSError as err:
        raise CgroupError(f"cannot read {err.filename}: {_explain(err)}") from None
    v1: dict[str, tuple[str, str]] = {}
    v2: tuple[str, str] | None = None
    for line in mountinfo:
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3:
            continue
        root, point = _unescape(fields[3]), _unescape(fields[4])
        if tail[0] == "cgroup2" and v2 is None:
            v2 = (root, point)
        elif tail[0] == "cgroup":
            for option in tail[2].split(","):
                if option in CONTROLLERS and option not in v1:
                    v1[option] = (root, point)
    paths_v1: dict[str, str] = {}
    path_v2: str | None = None
    for line in membership:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        if parts[0] == "0" and parts[1] == "":
            path_v2 = parts[2]
        for controller in parts[1].split(","):
            paths_v1[controller] = parts[2]
    if v1:
        own: dict[str, Path] = {}
        lost: dict[str, str] = {}
        for c in CONTROLLERS:
            if c not in v1:
                lost[c] = f"the {c} controller is not mounted"
                continue
            rel = _relative(paths_v1.get(c, ""), v1[c][0])
            if rel is None:
                lost[c] = f"the grader's {c} cgroup is not inside the mounted hierarchy"
            else:
                own[c] = Path(v1[c][1] + rel)
        return Mounts(1, own, None, lost)
    if v2 is None:
        raise CgroupError("no cgroup filesystem is mounted")
    rel = _relative(path_v2 or "", v2[0])
    if rel is None:
        raise CgroupError("the grader's cgroup is not inside the mounted hierarchy")
    own_dir = Path(v2[1] + rel)
    return Mounts(2, {c: own_dir for c in CONTROLLERS}, Path(v2[1]), {})


def _settings(version: int, memory_bytes: int, cpus: float, tasks: int
              ) -> dict[str, list[tuple[str, str, bool]]]:
    """Per controller, the ``(file, value, required)`` writes of a sandbox's cgroup, in order.

    Example:
        >>> _settings(2, 1 << 30, 1.0, 64)["cpu"]
        [('cpu.weight', '100', True), ('cpu.max', '100000 100000', True)]
        >>> _settings(1, 1 << 30, 0.5, 64)["cpu"][-1]
        ('cpu.cfs_quota_us', '50000', True)
    """
    quota = max(1000, round(cpus * CPU_PERIOD_US))
    pids = [("pids.max", str(tasks + BWRAP_TASKS), True)]
    if version == 2:
        return {"memory": [("memory.max", str(memory_bytes), True),
                           ("memory.swap.max", "0", False)],
                "cpu": [("cpu.weight", str(V2_CPU_WEIGHT), True),
                        ("cpu.max", f"{quota} {CPU_PERIOD_US}", True)],
                "pids": pids}
    # memsw (memory + swap) after the memory limit: the kernel wants memsw >= memory
    return {"memory": [("memory.limit_in_bytes", str(memory_bytes), True),
                       ("memory.memsw.limit_in_bytes", str(memory_bytes), False)],
            "cpu": [("cpu.shares", str(V1_CPU_SHARES), True),
                    ("cpu.cfs_period_us", str(CPU_PERIOD_US), True),
                    ("cpu.cfs_quota_us", str(quota), True)],
            "pids": pids}


@dataclass
class SandboxCgroup:
    """The cgroup(s) of one sandbox: one directory on v2, one per controller on v1."""

    version: int
    dirs: dict[str, Path]
    written: dict[str, dict[str, str]] = field(default_factory=dict)
    _procs: tuple[bytes, ...] = ()
    _peak_fd: int | None = None

    def __post_init__(self) -> None:
        unique = dict.fromkeys(self.dirs.values())
        self._procs = tuple(os.fsencode(d / "cgroup.procs") for d in unique)

    def join(self) -> None:
        """Move the calling process into this cgroup (in every hierarchy).

        Meant for the sandbox's preexec function (between ``fork`` and ``exec``): it only
        writes precomputed paths, so every process the sandbox starts afterwards is inside.
        """
        pid = str(os.getpid()).encode()
        for path in self._procs:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)

    def settings(self) -> dict[str, dict[str, str]]:
        """What was written, per controller: ``{"cpu": {"cpu.max": "100000 100000"}, ...}``."""
        return {c: dict(v) for c, v in self.written.items()}

    def pids(self) -> set[int]:
        """The processes in this cgroup now (as this process's PID namespace numbers them)."""
        found: set[int] = set()
        for d in dict.fromkeys(self.dirs.values()):
            try:
                found.update(int(p) for p in _read(d / "cgroup.procs").split())
            except (OSError, ValueError):
                continue
        found.discard(os.getpid())
        return found

    def kill(self, timeout: float = 10.0) -> bool:
        """SIGKILL every process in the cgroup until none is left; False if some survive."""
        for d in dict.fromkeys(self.dirs.values()):
            if self.version == 2 and (d / "cgroup.kill").exists():
                try:
                    _write(d / "cgroup.kill", "1")
                except OSError:
                    pass
        deadline = time.monotonic() + timeout
        while True:
            pids = self.pids()
            if not pids:
                return True
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)

    def remove(self, timeout: float = 10.0) -> bool:
        """Kill what is left and remove the directories; False if one stays (it is reported
        by nobody and removed when the next grading process starts)."""
        if self._peak_fd is not None:
            os.close(self._peak_fd)
            self._peak_fd = None
        self.kill(timeout)
        deadline = time.monotonic() + timeout
        removed = True
        for d in dict.fromkeys(self.dirs.values()):
            while True:
                try:
                    _rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError as err:
                    if err.errno != errno.EBUSY or time.monotonic() > deadline:
                        removed = False
                        break
                    time.sleep(0.02)
        return removed

    def memory_current(self) -> int | None:
        """Bytes the cgroup's processes hold now (``memory.current``; v1
        ``memory.usage_in_bytes``), None without a memory cgroup."""
        d = self.dirs.get("memory")
        if d is None:
            return None
        try:
            return int(_read(d / ("memory.current" if self.version == 2
                                  else "memory.usage_in_bytes")))
        except (OSError, ValueError):
            return None

    def memory_unreclaimable(self) -> int | None:
        """Bytes the cgroup holds that the kernel cannot drop to make room: anonymous memory,
        tmpfs files and (v2) kernel memory, from ``memory.stat``; page cache (the files its
        processes read, reclaimable) left out. None without a memory cgroup."""
        d = self.dirs.get("memory")
        if d is None:
            return None
        try:
            stat = dict(line.split() for line in _read(d / "memory.stat").splitlines()
                        if len(line.split()) == 2)
            values = {k: int(v) for k, v in stat.items()}
        except (OSError, ValueError):
            return None
        if self.version == 2:
            kernel = values.get("kernel", values.get("slab", 0) + values.get("kernel_stack", 0)
                                + values.get("pagetables", 0))
            return values.get("anon", 0) + values.get("shmem", 0) + kernel
        return (values.get("total_rss", values.get("rss", 0))
                + values.get("total_shmem", values.get("shmem", 0)))

    def set_memory_limit(self, memory_bytes: int) -> bool:
        """Set the cgroup's memory limit (and, on v1, memory + swap) to ``memory_bytes``; False
        without a memory cgroup or where the kernel refused it."""
        d = self.dirs.get("memory")
        if d is None:
            return False
        value = str(int(memory_bytes))
        try:
            if self.version == 2:
                _write(d / "memory.max", value)
                return True
            _write(d / "memory.limit_in_bytes", value)  # lowered first: memsw >= memory
            try:
                _write(d / "memory.memsw.limit_in_bytes", value)
            except OSError:
                pass  # no swap accounting: the memory limit alone
            return True
        except OSError:
            return False

    def _peak_file(self) -> Path | None:
        d = self.dirs.get("memory")
        if d is None:
            return None
        return d / ("memory.peak" if self.version == 2 else "memory.max_usage_in_bytes")

    def memory_peak(self) -> int | None:
        """Bytes: the most memory the cgroup held since it was made or since
        :meth:`reset_memory_peak`; None without a memory cgroup or where the kernel does not
        keep the peak (v2 before Linux 5.19)."""
        path = self._peak_file()
        if path is None:
            return None
        try:
            if self._peak_fd is not None:  # v2: the reset holds for reads through its fd
                os.lseek(self._peak_fd, 0, os.SEEK_SET)
                return int(os.read(self._peak_fd, 64))
            return int(_read(path))
        except (OSError, ValueError):
            return None

    def reset_memory_peak(self) -> bool:
        """Start the peak again from the current use; False where the kernel cannot (v2 before
        Linux 6.12, or no memory cgroup)."""
        path = self._peak_file()
        if path is None:
            return False
        if self.version == 1:
            try:
                _write(path, "0")
                return True
            except OSError:
                return False
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError:
            return False
        try:
            os.write(fd, b"reset\n")
        except OSError:
            os.close(fd)
            return False
        if self._peak_fd is not None:
            os.close(self._peak_fd)
        self._peak_fd = fd
        return True


@dataclass
class GraderCgroups:
    """This grading process's parent cgroup(s), under which each sandbox gets its own.

    Attributes:
        version: 1 or 2; 0 when no cgroup filesystem was found.
        parents: controller -> the grader-owned parent directory (only usable controllers).
        lost: controller -> why that controller is not used.
        moved_from: v2: the cgroup the grader left for ``autograder-<pid>/grader``, else None.
    """

    version: int
    parents: dict[str, Path]
    lost: dict[str, str]
    moved_from: Path | None = None
    _count: itertools.count = field(default_factory=itertools.count)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def create(self, name: str, memory_bytes: int, cpus: float, tasks: int) -> SandboxCgroup:
        """A new cgroup for one sandbox with the usable controllers' limits set.

        Raises:
            CgroupError: a directory or setting the kernel refused (the message names it).
        """
        with self._lock:
            leaf = f"box-{name}-{next(self._count)}"
        box = SandboxCgroup(self.version, {c: p / leaf for c, p in self.parents.items()})
        wanted = _settings(self.version, memory_bytes, cpus, tasks)
        made: set[Path] = set()
        for c, d in box.dirs.items():
            path = d
            try:
                if d not in made:
                    _mkdir(d)
                    made.add(d)
                for fname, value, required in wanted[c]:
                    path = d / fname
                    if not required and not path.exists():
                        continue
                    _write(path, value)
                    box.written.setdefault(c, {})[fname] = value
            except OSError as err:
                box.dirs = {k: v for k, v in box.dirs.items() if v in made}
                box.remove(timeout=1.0)
                raise CgroupError(f"the kernel refused {path}: {_explain(err)}", c) from None
        return box

    def warning(self) -> str | None:
        """One line naming each protection lost and why; None when every controller is used.

        Example:
            >>> GraderCgroups(2, {}, {"cpu": "x: Permission denied"}).warning()[:60]
            'warning: the sandboxes run without a cgroup for cpu (x: Perm'
        """
        if not self.lost:
            return None
        by_reason: dict[str, list[str]] = {}
        for c in CONTROLLERS:
            if c in self.lost:
                by_reason.setdefault(self.lost[c], []).append(c)
        why = "; ".join(f"{', '.join(cs)}: {r}" if len(by_reason) > 1 else r
                        for r, cs in by_reason.items())
        lost = [c for c in CONTROLLERS if c in self.lost]
        return (f"warning: the sandboxes run without a cgroup for {', '.join(lost)} ({why}); "
                f"protection lost: {'; '.join(PROTECTION[c] for c in lost)}")

    def close(self) -> None:
        """Remove the grader-owned parents (at exit); the grader returns to its own cgroup."""
        parents = dict.fromkeys(self.parents.values())
        for parent in parents:
            for box in sorted(parent.glob("box-*")):
                SandboxCgroup(self.version, {"memory": box}).remove(timeout=2.0)
        if self.moved_from is not None:
            for parent in parents:
                _disable(parent)
            _disable(self.moved_from)
            try:
                _write(self.moved_from / "cgroup.procs", str(os.getpid()))
            except OSError:
                return  # the leaf stays until this process exits; the next run removes it
            _rmdir_quiet(next(iter(parents)) / "grader")
        for parent in parents:
            _rmdir_quiet(parent)


def _rmdir_quiet(path: Path) -> bool:
    try:
        _rmdir(path)
        return True
    except OSError:
        return False


def _enabled(cgroup: Path) -> set[str]:
    try:
        return set(_read(cgroup / "cgroup.subtree_control").split())
    except OSError:
        return set()


def _enable(cgroup: Path, controllers: list[str]) -> dict[str, str]:
    """Hand ``controllers`` to the children of a v2 cgroup; controller -> why not, for each
    that the kernel refused."""
    refused: dict[str, str] = {}
    already = _enabled(cgroup)
    for c in controllers:
        if c in already:
            continue
        try:
            _write(cgroup / "cgroup.subtree_control", f"+{c}")
        except OSError as err:
            hint = " (the cgroup holds processes)" if err.errno == errno.EBUSY else ""
            refused[c] = f"cannot enable it in {cgroup / 'cgroup.subtree_control'}: " \
                         f"{_explain(err)}{hint}"
    return refused


def _disable(cgroup: Path) -> None:
    for c in _enabled(cgroup) & set(CONTROLLERS):
        try:
            _write(cgroup / "cgroup.subtree_control", f"-{c}")
        except OSError:
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale(parent_dir: Path) -> None:
    """Remove the ``autograder-<pid>`` parents of grading processes that no longer run."""
    try:
        entries = list(parent_dir.iterdir())
    except OSError:
        return
    for entry in entries:
        pid = entry.name[len(PARENT_PREFIX):]
        if not entry.name.startswith(PARENT_PREFIX) or not pid.isdigit() or _alive(int(pid)) \
                or not entry.is_dir():
            continue
        for sub in sorted((p for p in entry.glob("*") if p.is_dir()), reverse=True):
            _rmdir_quiet(sub)
        _rmdir_quiet(entry)


def _setup_v1(mounts: Mounts, name: str) -> GraderCgroups:
    parents: dict[str, Path] = {}
    lost = dict(mounts.lost)
    for c, own in mounts.own.items():
        _remove_stale(own)
        parent = own / name
        try:
            if not parent.is_dir():
                _mkdir(parent)
            parents[c] = parent
        except OSError as err:
            lost[c] = f"cannot create {parent}: {_explain(err)}"
    return GraderCgroups(1, parents, lost)


def _available(cgroup: Path) -> set[str]:
    try:
        return set(_read(cgroup / "cgroup.controllers").split())
    except OSError:
        return set()


def _try_v2_parent(base: Path, name: str, move_self: bool) -> tuple[GraderCgroups, bool]:
    """Make ``base/name`` a parent with controllers: ``(result, usable)``; undone when not."""
    lost: dict[str, str] = {}
    offered = _available(base)
    wanted = [c for c in CONTROLLERS if c in offered]
    for c in CONTROLLERS:
        if c not in offered:
            lost[c] = f"the {c} controller is not available in {base}"
    parent = base / name
    try:
        if not parent.is_dir():
            _mkdir(parent)
    except OSError as err:
        return GraderCgroups(2, {}, {c: f"cannot create {parent}: {_explain(err)}"
                                     for c in CONTROLLERS}), False
    moved = False
    if move_self:
        try:
            _mkdir(parent / "grader")
            _write(parent / "grader" / "cgroup.procs", str(os.getpid()))
            moved = True
        except OSError as err:
            _rmdir_quiet(parent / "grader")
            _rmdir_quiet(parent)
            return GraderCgroups(2, {}, {c: f"cannot move the grader into "
                                            f"{parent / 'grader'}: {_explain(err)}"
                                         for c in CONTROLLERS}), False
    lost.update(_enable(base, wanted))
    lost.update(_enable(parent, [c for c in wanted if c not in lost]))
    usable = [c for c in CONTROLLERS if c not in lost]
    if usable:
        return GraderCgroups(2, {c: parent for c in usable}, lost,
                             moved_from=base if moved else None), True
    if moved:
        _disable(base)
        try:
            _write(base / "cgroup.procs", str(os.getpid()))
        except OSError:
            pass
        _rmdir_quiet(parent / "grader")
    _rmdir_quiet(parent)
    return GraderCgroups(2, {}, lost), False


def _setup_v2(mounts: Mounts, name: str) -> GraderCgroups:
    own = mounts.own["memory"]
    root = mounts.root or own
    attempts: list[tuple[Path, bool]] = []
    if own == root:
        attempts.append((own, False))
    else:
        try:
            procs = set(_read(own / "cgroup.procs").split())
        except OSError:
            procs = set()
        if procs == {str(os.getpid())}:
            attempts.append((own, True))
        attempts.append((root, False))
    result = GraderCgroups(2, {}, {c: f"no cgroup under {own} could be made"
                                   for c in CONTROLLERS})
    for base, move_self in attempts:
        _remove_stale(base)
        tried, usable = _try_v2_parent(base, name, move_self)
        if usable:
            return tried
        result = tried if base == attempts[0][0] else result
    return result


def setup(proc_self: Path | None = None, probe: bool = True) -> GraderCgroups:
    """Make this process's parent cgroup(s); what cannot be used is in ``lost``.

    With ``probe``, a first sandbox cgroup is made and removed, and each controller whose
    settings the kernel refuses (a CPU quota above the grader's own, say) is moved to ``lost``.
    """
    try:
        mounts = detect(proc_self)
    except CgroupError as err:
        return GraderCgroups(0, {}, {c: str(err) for c in CONTROLLERS})
    name = f"{PARENT_PREFIX}{os.getpid()}"
    grader = _setup_v1(mounts, name) if mounts.version == 1 else _setup_v2(mounts, name)
    while probe and grader.parents:
        try:
            grader.create("probe", memory_bytes=256 << 20, cpus=1.0, tasks=64).remove(2.0)
            break
        except CgroupError as err:
            for c in [err.controller] if err.controller in grader.parents else list(grader.parents):
                del grader.parents[c]
                grader.lost[c] = str(err)
    if not grader.parents and grader.version and os.geteuid() != 0:
        hint = (" (as a normal user, run the grader in a delegated scope: systemd-run --user "
                "--scope -p Delegate=yes ...)" if grader.version == 2 else " (run it as root)")
        for c in grader.lost:
            grader.lost[c] += hint
    return grader


_grader: GraderCgroups | None = None
_grader_lock = threading.Lock()


def grader_cgroups() -> GraderCgroups:
    """This process's :class:`GraderCgroups`, set up on first use (see :func:`setup`)."""
    global _grader
    with _grader_lock:
        if _grader is None:
            _grader = setup()
            if _grader.parents:
                atexit.register(_grader.close)
        return _grader


def sandbox_cgroup(name: str, memory_bytes: int, cpus: float, tasks: int) -> SandboxCgroup | None:
    """A new cgroup for one sandbox, or None where no controller can be used.

    Raises:
        CgroupError: the kernel refused a setting that it accepted when the grader started.
    """
    grader = grader_cgroups()
    if not grader.parents:
        return None
    return grader.create(name, memory_bytes, cpus, tasks)
