"""What the bubblewrap sandbox isolates, probed from inside one; its cgroup, real and faked.

The tests that start sandboxes are marked slow. The cgroup tests run for real where the grader
can make cgroups (root on cgroup v1 or v2, or a delegated v2 scope) and are skipped elsewhere;
the v2 logic and the "no cgroup" warning are also tested on a fake cgroupfs under ``tmp_path``.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from autograder.run import cgroups, environment
from autograder.run.sandbox import Limits, Sandbox, SandboxDied, acquire_slots, reap_uid, slot_uid
from autograder.strip import build_sandbox_course_lib
from coursebook.chapters import REPO

slow = pytest.mark.slow  # starts sandboxed Python processes

PROBE = r"""
import json, os, socket, resource
facts = {"uid": os.getuid(), "pids": sorted(int(p) for p in os.listdir('/proc') if p.isdigit())}
facts["course_lib_source_visible"] = os.path.exists(%(repo)r + "/course_lib")
facts["solutions_visible"] = os.path.exists(%(repo)r + '/solutions')
facts["git_visible"] = os.path.exists(%(repo)r + '/.git')
try:
    open('/usr/evil', 'w')
    facts["usr_writable"] = True
except OSError:
    facts["usr_writable"] = False
open('/tmp/ok', 'w').write('x')
try:
    socket.create_connection(('127.0.0.1', 22), timeout=1)
    facts["net"] = True
except OSError:
    facts["net"] = False
facts["nproc"] = resource.getrlimit(resource.RLIMIT_NPROC)[0]
from course_lib import attention
import torch
try:
    attention.masked_softmax(torch.zeros(2))
    facts["reference"] = "callable"
except RuntimeError as err:
    facts["reference"] = str(err)
import importlib, sys
for extra in %(package_folders)r:  # a student who knows where the packages were
    sys.path.append(extra)
facts["imports"] = {}
for name in %(outside)r:
    try:
        importlib.import_module(name)
        facts["imports"][name] = "imported"
    except ImportError as err:
        facts["imports"][name] = str(err)
facts["course_lib_modules"] = sorted(p.split(".")[0] for p in os.listdir(
    os.path.dirname(importlib.import_module("course_lib").__file__)))
print(json.dumps(facts))
"""
#: Packages of the development environment that the sandbox must not hold (the issue's and
#: the course's own: tests, website, peers), and course_lib modules that are not the grading
#: plumbing.
OUTSIDE = ["transformers", "peft", "entmax", "tiktoken", "scipy", "networkx", "matplotlib",
           "nbformat", "jupyter_book", "pytest", "networkx", "course_lib.llama",
           "course_lib.longrange", "course_lib.exercises.seq2seq"]


@pytest.fixture(scope="module")
def course_dir(tmp_path_factory) -> Path:
    from course_lib import attention

    dest = tmp_path_factory.mktemp("course")
    stripped = build_sandbox_course_lib(dest, [attention.masked_softmax],
                                        ["course_lib.attention", "course_lib.checks"])
    assert stripped == ["course_lib/attention.py:masked_softmax"]
    return dest


@pytest.fixture()
def slot():
    import os

    slots, fds = acquire_slots(1)
    yield slots[0]
    for fd in fds:
        os.close(fd)


@slow
def test_sandbox_isolates_files_network_processes_and_references(course_dir: Path,
                                                                  slot: int) -> None:
    box = Sandbox(course_dir, slot=slot, limits=Limits(cell_timeout=30))
    box.start()
    try:
        reply = box.run("cell", PROBE % {"repo": str(REPO), "outside": OUTSIDE,
                                         "package_folders": environment.package_folders()}, 60)
    finally:
        box.kill()
    assert reply["ok"], reply
    facts = json.loads(reply["output"].strip().splitlines()[-1])
    assert facts["uid"] != 0
    assert not facts["solutions_visible"] and not facts["git_visible"]
    assert not facts["course_lib_source_visible"]
    assert facts["usr_writable"] is False
    assert facts["net"] is False
    assert facts["nproc"] == Limits().tasks
    assert max(facts["pids"]) < 50, "not a fresh PID namespace"
    assert "not available while grading" in facts["reference"]
    # the environment holds the allow-list alone, whatever path a student appends
    assert facts["imports"] == {name: f"No module named '{name}'" for name in OUTSIDE}
    assert facts["course_lib_modules"] == ["__init__", "attention", "checks", "exercises",
                                           "grading", "utils"]


@slow
def test_the_sandbox_imports_only_the_allowed_distributions(course_dir: Path, slot: int) -> None:
    """Every top-level module importable in the sandbox belongs to the standard library, an
    allowed distribution or course_lib: nothing else is on any path it can reach."""
    code = ("import pkgutil, sys, json\n"
            "print(json.dumps(sorted({m.name for m in pkgutil.iter_modules()})))")
    box = Sandbox(course_dir, slot=slot, limits=Limits(cell_timeout=30))
    box.start()
    try:
        reply = box.run("cell", code, 60)
    finally:
        box.kill()
    assert reply["ok"], reply
    found = set(json.loads(reply["output"].strip().splitlines()[-1]))
    stdlib = Path(sysconfig.get_paths(vars={"base": sys.base_prefix,
                                            "platbase": sys.base_exec_prefix})["stdlib"])
    shipped = {p.name for p in stdlib.iterdir() if p.name != "site-packages"}
    shipped |= {p.name for p in (stdlib / "lib-dynload").glob("*")}
    allowed = (set(environment.site_entries()) | set(sys.stdlib_module_names) | shipped
               | {"course_lib", "runner"})  # runner: the grader's own script, /opt/grader
    allowed = {name.split(".")[0] for name in allowed}
    extra = sorted(m for m in found if m not in allowed and not m.startswith("_"))
    assert not extra, f"the sandbox can import {extra}, which no allow-list names"
    assert {"torch", "numpy", "IPython", "course_lib"} <= found


@slow
def test_timeout_and_death_are_reported(course_dir: Path, slot: int) -> None:
    box = Sandbox(course_dir, slot=slot, limits=Limits())
    box.start()
    with pytest.raises(SandboxDied) as err:
        box.run("cell", "while True:\n    pass", 2)
    assert err.value.timed_out
    box = Sandbox(course_dir, slot=slot, limits=Limits())
    box.start()
    with pytest.raises(SandboxDied) as err:
        box.run("cell", "import os\nos._exit(3)", 20)
    assert not err.value.timed_out and "status 3" in err.value.reason


@slow
def test_a_fork_bomb_leaves_nothing_behind(course_dir: Path, slot: int) -> None:
    """After a fork bomb's sandbox is killed, its slot's uid has no process left."""
    box = Sandbox(course_dir, slot=slot, limits=Limits())
    box.start()
    with pytest.raises(SandboxDied):
        box.run("cell", "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
                "        pass", 3)
    assert reap_uid(slot_uid(slot), timeout=0.1)
    box = Sandbox(course_dir, slot=slot, limits=Limits())
    box.start()  # the slot is usable again at once
    assert box.run("cell", "print(1 + 1)", 20)["output"].strip() == "2"
    box.kill()


# --- the sandbox's cgroup (issue 17, items 8 and 9) -----------------------------------------

GIB = 1 << 30

# Student code: four children each touch up to 1 GiB (64 MiB at a time, until MemoryError),
# report every chunk, then hold what they got until the parent has counted. A child the
# kernel kills stops reporting; only children alive at the end count. The children volunteer
# as the OOM killer's first victims, so that the runner survives to answer.
FORK_AND_HOLD = r"""
import json, os, select, time
CHUNK = 64 << 20
r, w = os.pipe()
hold_r, hold_w = os.pipe()
kids = []
for i in range(4):
    pid = os.fork()
    if pid == 0:
        os.close(r)
        os.close(hold_w)
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")
        held, result = [], "full"
        try:
            while len(held) * CHUNK < (1 << 30):
                held.append(bytearray(b"\x01") * CHUNK)
                os.write(w, b"%d chunk\n" % i)
        except MemoryError:
            result = "MemoryError"
        os.write(w, b"%d %s\n" % (i, result.encode()))
        os.read(hold_r, 1)
        os._exit(0)
    kids.append(pid)
os.close(w)
os.close(hold_r)
chunks, ended, dead, buf = [0] * 4, {}, {}, b""
deadline = time.time() + 90
while len(ended) + len(dead) < 4 and time.time() < deadline:
    if select.select([r], [], [], 0.2)[0]:
        buf += os.read(r, 65536)
        *lines, buf = buf.split(b"\n")
        for line in lines:
            i, what = line.decode().split(" ", 1)
            if what == "chunk":
                chunks[int(i)] += 1
            else:
                ended[int(i)] = what
    for i, pid in enumerate(kids):
        if i not in ended and i not in dead and os.waitpid(pid, os.WNOHANG)[0]:
            dead[i] = "killed"
time.sleep(0.5)
for i, pid in enumerate(kids):
    if i not in dead and os.waitpid(pid, os.WNOHANG)[0]:
        dead[i] = "killed"
alive = [i for i in range(4) if i not in dead]
print(json.dumps({"held": sum(chunks[i] for i in alive) * CHUNK, "alive": alive,
                  "ended": {str(i): ended.get(i, dead.get(i)) for i in range(4)}}))
os.close(hold_w)
for i in alive:
    os.waitpid(kids[i], 0)
"""

HOG = r"""
import os
for _ in range(10):
    if os.fork() == 0:
        os.setsid()
        while True:
            pass
print("forked")
"""

ONE_CPU_SECOND = r"""
import time
wall, cpu = time.perf_counter(), time.process_time()
while time.process_time() - cpu < 1.0:
    pass
print(time.perf_counter() - wall)
"""


def _need_cgroups(*controllers: str) -> None:
    lost = [c for c in controllers if c not in cgroups.grader_cgroups().parents]
    if lost:
        pytest.skip(f"no {', '.join(lost)} cgroup on this machine: "
                    f"{cgroups.grader_cgroups().warning()}")


def _cpu_seconds(pids: set[int]) -> float:
    """User + system CPU time of the processes ``pids`` so far (dead ones count 0)."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15)
    return total / os.sysconf("SC_CLK_TCK")


@slow
def test_forked_children_share_one_memory_limit(course_dir: Path, slot: int) -> None:
    """Four children touching 1 GiB each under a 1.5 GiB limit hold at most 1.5 GiB together
    (RLIMIT_AS alone let each hold about 0.8 GiB: 3.2 GiB in all)."""
    _need_cgroups("memory")
    limit = 3 * GIB // 2
    box = Sandbox(course_dir, slot=slot, limits=Limits(memory_bytes=limit))
    box.start()
    try:
        dirs = box.cgroup.dirs
        assert all(d.is_dir() for d in dirs.values())
        memory = box.cgroup.settings()["memory"]
        assert memory.get("memory.max", memory.get("memory.limit_in_bytes")) == str(limit)
        reply = box.run("cell", FORK_AND_HOLD, 120)
        assert reply["ok"], reply
        facts = json.loads(reply["output"].strip().splitlines()[-1])
        peak = box.memory_peak()
        print(f"\nfork test: children held {facts['held'] / 2**20:.0f} MiB together, cgroup peak "
              f"{peak / 2**20:.0f} MiB, limit {limit / 2**20:.0f} MiB, children: {facts['ended']}")
        assert facts["held"] <= limit, facts
        assert set(facts["ended"].values()) & {"killed", "MemoryError"}, facts
        assert peak is not None and peak <= limit
        if box.reset_memory_peak():  # the children are gone: the peak starts again lower
            assert box.memory_peak() < peak
    finally:
        box.kill()
    assert not any(d.exists() for d in dirs.values()), "the sandbox's cgroup outlived it"


@slow
def test_a_setsid_cpu_hog_gets_one_core_and_cannot_starve_another_sandbox(
        course_dir: Path) -> None:
    """Ten ``setsid()`` busy loops in one sandbox: their sandbox is capped at one core, every
    sandbox has the same weight, and another sandbox's second of CPU is not starved."""
    _need_cgroups("cpu", "pids")
    slots, fds = acquire_slots(2)
    try:
        def timed_work() -> tuple[float, float]:
            t0 = time.perf_counter()
            other = Sandbox(course_dir, slot=slots[1], limits=Limits())
            other.start()
            started = time.perf_counter() - t0
            try:
                return started, float(other.run("cell", ONE_CPU_SECOND, 120)["output"])
            finally:
                other.kill()

        quiet = timed_work()
        hog = Sandbox(course_dir, slot=slots[0], limits=Limits())
        hog.start()
        try:
            cpu = hog.cgroup.settings()["cpu"]
            if hog.cgroup.version == 2:
                assert cpu == {"cpu.weight": "100", "cpu.max": "100000 100000"}
            else:
                assert cpu == {"cpu.shares": "1024", "cpu.cfs_period_us": "100000",
                               "cpu.cfs_quota_us": "100000"}
            assert hog.cgroup.settings()["pids"] == {"pids.max": str(Limits().tasks + 4)}
            assert hog.run("cell", HOG, 20)["output"].strip() == "forked"
            time.sleep(0.5)
            pids = hog.cgroup.pids()
            assert len(pids) >= 11, "the detached processes left the sandbox's cgroup"
            t0, used0 = time.perf_counter(), _cpu_seconds(pids)
            loaded = timed_work()
            cores = (_cpu_seconds(pids) - used0) / (time.perf_counter() - t0)
        finally:
            hog.kill()
        after = timed_work()  # the machine's other load changes: the slower quiet figure counts
        print(f"\ncpu hog: another sandbox started in {quiet[0]:.1f} / {after[0]:.1f} s quiet, "
              f"{loaded[0]:.1f} s beside the hog; its 1 s of CPU took {quiet[1]:.2f} / "
              f"{after[1]:.2f} s quiet, {loaded[1]:.2f} s beside the hog; the hog's sandbox used "
              f"{cores:.2f} cores")
        assert cores <= 1.25, "the hog's sandbox used more than its one core"
        assert loaded[1] <= 4 * max(quiet[1], after[1]) + 1, "a CPU hog starved another sandbox"
    finally:
        for fd in fds:
            os.close(fd)


# --- cgroups on a fake cgroupfs (v2 logic, the no-cgroup path) ------------------------------

V2_FILES = ("cgroup.procs", "cgroup.controllers", "cgroup.subtree_control", "cgroup.kill",
            "memory.max", "memory.swap.max", "memory.peak", "cpu.weight", "cpu.max", "pids.max")


def _fake_v2(tmp_path: Path, own: str, procs: str, controllers: str = "cpu memory pids io"
             ) -> tuple[Path, Path]:
    """A fake /proc/self and a cgroup2 mount under ``tmp_path``: ``(proc_self, mount)``."""
    proc, mount = tmp_path / "proc-self", tmp_path / "cgroupfs"
    proc.mkdir()
    (proc / "mountinfo").write_text(
        "24 1 0:21 / / rw - ext4 /dev/root rw\n"
        f"35 24 0:30 / {mount} rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n")
    (proc / "cgroup").write_text(f"0::{own}\n")
    for d in [mount, mount / own.strip("/")]:
        d.mkdir(parents=True, exist_ok=True)
        for name in V2_FILES:
            (d / name).write_text("")
        (d / "cgroup.controllers").write_text(controllers + "\n")
    (mount / own.lstrip("/") / "cgroup.procs").write_text(procs)
    return proc, mount


class FakeKernel:
    """Stands in for the cgroup2 kernel on the fake mount: a new directory gets the control
    files (its ``cgroup.controllers`` from its parent's ``subtree_control``), and writes to
    ``cgroup.subtree_control`` add or remove controllers. With ``as_user``, directories and
    files without write permission refuse writes even to root, as they do to a normal user."""

    def __init__(self, as_user: bool = False):
        self.as_user = as_user
        self.writes: list[tuple[str, str]] = []

    def _check(self, path: Path) -> None:
        if self.as_user and not (path.stat().st_mode & stat.S_IWUSR):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))

    def mkdir(self, path: Path) -> None:
        self._check(path.parent)
        os.mkdir(path)
        for name in V2_FILES:
            (path / name).write_text("")
        (path / "cgroup.controllers").write_text(
            (path.parent / "cgroup.subtree_control").read_text())

    def rmdir(self, path: Path) -> None:
        self._check(path.parent)
        if any(p.is_dir() for p in path.iterdir()):
            raise OSError(errno.EBUSY, os.strerror(errno.EBUSY), str(path))
        for f in path.iterdir():
            f.unlink()
        os.rmdir(path)

    def write(self, path: Path, text: str) -> None:
        self._check(path)
        self.writes.append((str(path), text))
        if path.name == "cgroup.subtree_control":
            on = set(path.read_text().split())
            on = on | {text[1:]} if text.startswith("+") else on - {text[1:]}
            path.write_text(" ".join(sorted(on)))
        else:
            path.write_text(text)


def test_detect_finds_v1_controllers_and_the_v2_mount(tmp_path: Path) -> None:
    proc = tmp_path / "p"
    proc.mkdir()
    (proc / "mountinfo").write_text(  # hybrid: controllers on v1, an empty v2 mount beside
        "31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n"
        "32 31 0:29 /docker/abc /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
        "35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
        "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n")
    (proc / "cgroup").write_text("5:cpu,cpuacct:/docker/abc/x\n4:memory:/user/1\n0::/\n")
    mounts = cgroups.detect(proc)
    assert mounts.version == 1
    assert mounts.own == {"memory": Path("/sys/fs/cgroup/memory/user/1"),
                          "cpu": Path("/sys/fs/cgroup/cpu,cpuacct/x")}
    assert mounts.lost == {"pids": "the pids controller is not mounted"}
    proc2, mount = _fake_v2(tmp_path, "/user.slice/u 1.scope", procs="1\n")
    mountinfo = (proc2 / "mountinfo").read_text().replace(str(mount), str(mount) + "\\040x")
    (proc2 / "mountinfo").write_text(mountinfo)  # a space in the mount point, escaped
    mounts = cgroups.detect(proc2)
    assert mounts.version == 2 and mounts.root == Path(str(mount) + " x")
    assert mounts.own["pids"] == Path(str(mount) + " x/user.slice/u 1.scope")
    (proc2 / "mountinfo").write_text("24 1 0:21 / / rw - ext4 /dev/root rw\n")
    with pytest.raises(cgroups.CgroupError, match="no cgroup filesystem is mounted"):
        cgroups.detect(proc2)


def test_v2_delegated_scope_moves_the_grader_into_a_leaf_and_sets_every_limit(
        tmp_path: Path, monkeypatch) -> None:
    """The grader alone in its cgroup (``systemd-run --scope -p Delegate=yes``): it moves into
    ``autograder-<pid>/grader``, hands memory, cpu and pids down, and each sandbox's cgroup
    gets the v2 limits; closing moves it back and removes what it made."""
    own = "/user.slice/run-1.scope"
    proc, mount = _fake_v2(tmp_path, own, procs=f"{os.getpid()}\n")
    kernel = FakeKernel()
    monkeypatch.setattr(cgroups, "_mkdir", kernel.mkdir)
    monkeypatch.setattr(cgroups, "_write", kernel.write)
    monkeypatch.setattr(cgroups, "_rmdir", kernel.rmdir)
    grader = cgroups.setup(proc)
    scope = mount / own.lstrip("/")
    parent = scope / f"autograder-{os.getpid()}"
    assert grader.version == 2 and grader.lost == {}
    assert grader.parents == {"memory": parent, "cpu": parent, "pids": parent}
    assert grader.moved_from == scope
    assert (str(parent / "grader" / "cgroup.procs"), str(os.getpid())) in kernel.writes
    assert (scope / "cgroup.subtree_control").read_text().split() == ["cpu", "memory", "pids"]
    assert (parent / "cgroup.subtree_control").read_text().split() == ["cpu", "memory", "pids"]
    box = grader.create("slot3", memory_bytes=GIB, cpus=1.0, tasks=64)
    leaf = parent / "box-slot3-1"  # box-probe-0 was the probe, made and removed
    assert box.dirs == {"memory": leaf, "cpu": leaf, "pids": leaf}
    assert box.settings() == {"memory": {"memory.max": str(GIB), "memory.swap.max": "0"},
                              "cpu": {"cpu.weight": "100", "cpu.max": "100000 100000"},
                              "pids": {"pids.max": "68"}}
    assert (leaf / "cpu.max").read_text() == "100000 100000"
    assert box._procs == (os.fsencode(leaf / "cgroup.procs"),)
    grader.close()
    assert (str(scope / "cgroup.procs"), str(os.getpid())) in kernel.writes
    assert not parent.exists()


def test_a_v2_setting_the_kernel_refuses_is_named_and_only_that_controller_is_lost(
        tmp_path: Path, monkeypatch) -> None:
    proc, mount = _fake_v2(tmp_path, "/", procs="1\n")  # the grader in the root cgroup
    kernel = FakeKernel()

    def refuse_cpu_max(path: Path, text: str) -> None:
        if path.name == "cpu.max":
            raise OSError(errno.EINVAL, os.strerror(errno.EINVAL))
        kernel.write(path, text)

    monkeypatch.setattr(cgroups, "_mkdir", kernel.mkdir)
    monkeypatch.setattr(cgroups, "_write", refuse_cpu_max)
    monkeypatch.setattr(cgroups, "_rmdir", kernel.rmdir)
    grader = cgroups.setup(proc)
    assert set(grader.parents) == {"memory", "pids"} and grader.moved_from is None
    assert "cpu.max: Invalid argument" in grader.lost["cpu"]
    line = grader.warning()
    assert line.startswith("warning: the sandboxes run without a cgroup for cpu (")
    assert cgroups.PROTECTION["cpu"] in line and "memory limit" not in line


def _unwritable_v2(tmp_path: Path, monkeypatch) -> Path:
    """A fake cgroup2 mount that nothing may be written to (mode 0555 / 0444), the grader in a
    cgroup with other processes (a login session): the fake /proc/self."""
    proc, mount = _fake_v2(tmp_path, "/user.slice/session-2.scope", procs=f"1\n{os.getpid()}\n")
    for d, _, files in os.walk(mount):
        for f in files:
            os.chmod(Path(d) / f, 0o444)
        os.chmod(d, 0o555)
    kernel = FakeKernel(as_user=True)  # root writes anywhere; a normal user cannot
    monkeypatch.setattr(cgroups, "_mkdir", kernel.mkdir)
    monkeypatch.setattr(cgroups, "_write", kernel.write)
    monkeypatch.setattr(cgroups, "_rmdir", kernel.rmdir)
    monkeypatch.setattr(cgroups, "_rmdir", kernel.rmdir)
    monkeypatch.setattr(cgroups, "PROC_SELF", proc)
    monkeypatch.setattr(cgroups, "_grader", None)
    return proc


def test_no_cgroup_names_every_protection_lost(tmp_path: Path, monkeypatch) -> None:
    _unwritable_v2(tmp_path, monkeypatch)
    grader = cgroups.grader_cgroups()
    assert grader.parents == {} and set(grader.lost) == {"memory", "cpu", "pids"}
    line = grader.warning()
    assert "\n" not in line and "Permission denied" in line
    assert line.startswith("warning: the sandboxes run without a cgroup for memory, cpu, pids (")
    for c in cgroups.CONTROLLERS:
        assert cgroups.PROTECTION[c] in line
    assert cgroups.sandbox_cgroup("slot0", GIB, 1.0, 64) is None
    monkeypatch.setattr(cgroups, "_grader", None)
    monkeypatch.setattr(cgroups, "PROC_SELF", tmp_path / "nowhere")
    assert "cannot read" in cgroups.grader_cgroups().warning()


@slow
def test_grade_warns_once_at_the_start_when_no_cgroup_can_be_made(
        tmp_path: Path, monkeypatch, capsys) -> None:
    """``python -m autograder grade`` on an unwritable cgroupfs: one line on stderr naming
    the protections lost, and the run grades with the RLIMIT limits alone."""
    from autograder.cli import main
    from tests.adversarial.chapters import FIXTURE, FIXTURES, released_copy

    fixtures = FIXTURES
    chapter = released_copy(FIXTURE, tmp_path / "course")
    subs = tmp_path / "subs"
    subs.mkdir()
    (subs / "s1001.ipynb").write_bytes((fixtures / "colab" / "fixture-solution.ipynb")
                                       .read_bytes())
    monkeypatch.setenv("AUTOGRADER_EXTRA_EXERCISES", str(fixtures / "exercises"))
    _unwritable_v2(tmp_path, monkeypatch)
    capsys.readouterr()
    code = main(["grade", "00", str(subs), "--out", str(tmp_path / "out"), "--no-progress",
                 "--workers", "1", "--root", str(chapter.root)])
    out, err = capsys.readouterr()
    assert code == 0, err
    warnings = [line for line in err.splitlines() if "cgroup" in line]
    assert len(warnings) == 1 and warnings[0].startswith("warning: the sandboxes run without "
                                                         "a cgroup for memory, cpu, pids")
    assert "forked children can hold --memory-mb each" in warnings[0]
    assert "1 students in grades.csv" in out
    assert (tmp_path / "out" / "grades.csv").read_text().splitlines()[1].startswith("s1001,")


# --- the fallback runner's environment (platform containers without namespaces) -------------

def test_the_fallback_site_links_the_allowed_entries_only(tmp_path: Path) -> None:
    from autograder.platform_common import sandbox_site

    site = sandbox_site(tmp_path / "site")
    names = {p.name for p in site.iterdir()}
    assert names == set(environment.site_entries())
    assert {"torch", "numpy", "IPython"} <= names and "transformers" not in names
    assert all((site / n).is_symlink() for n in names)


def test_a_platform_container_locks_every_package_the_allow_list_does_not_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a mount namespace, student code could append a package folder to sys.path: in
    the platforms' throw-away containers the fallback runner makes every other entry root's."""
    from autograder import platform_common

    folder = tmp_path / "site-packages"
    for name in ("torch", "transformers", "peft"):
        (folder / name).mkdir(parents=True)
        (folder / name / "__init__.py").write_text("")
        (folder / name).chmod(0o755)
    monkeypatch.setattr(environment, "package_folders", lambda: [str(folder)])
    monkeypatch.setattr(environment, "site_entries", lambda: {"torch": folder / "torch"})
    locked = platform_common.lock_other_packages()
    assert sorted(Path(p).name for p in locked) == ["peft", "transformers"]
    assert stat.S_IMODE((folder / "transformers").stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "torch").stat().st_mode) == 0o755


@slow
def test_the_fallback_runner_imports_the_allow_list_alone(slot: int) -> None:
    """The fallback runner (no namespaces) runs the base interpreter with -S on the course folder
    and the allowed entries: the development environment's other packages are not on its path."""
    import shutil
    import tempfile

    from autograder.platform_common import HostSandbox, sandbox_site

    # the sandbox's uid must pass through every parent folder (pytest's tmp_path is root's alone)
    tmp_path = Path(tempfile.mkdtemp(prefix="fallback-env-"))
    tmp_path.chmod(0o711)
    course_dir = tmp_path / "course"
    build_sandbox_course_lib(course_dir, [])
    scratch = tmp_path / "homes"
    scratch.mkdir()
    scratch.chmod(0o711)
    runner = tmp_path / "runner.py"
    runner.write_text(sandbox_runner_source())
    runner.chmod(0o644)
    site = sandbox_site(tmp_path / "site")
    box = HostSandbox(course_dir, slot, Limits(cell_timeout=60), scratch=scratch, runner=runner,
                      site=site)
    box.start()
    code = ("import importlib, json, sys\nout = {}\n"
            "for name in ['torch', 'numpy', 'IPython', 'transformers', 'scipy', 'peft']:\n"
            "    try:\n        importlib.import_module(name)\n        out[name] = 'ok'\n"
            "    except ImportError as err:\n        out[name] = str(err)\n"
            "out['site'] = [p for p in sys.path if 'site-packages' in p]\n"
            "print(json.dumps(out))")
    try:
        reply = box.run("cell", code, 60)
    finally:
        box.kill()
        shutil.rmtree(tmp_path, ignore_errors=True)
    assert reply["ok"], reply
    facts = json.loads(reply["output"].strip().splitlines()[-1])
    assert facts.pop("site") == []
    assert facts == {"torch": "ok", "numpy": "ok", "IPython": "ok",
                     "transformers": "No module named 'transformers'",
                     "scipy": "No module named 'scipy'", "peft": "No module named 'peft'"}


def sandbox_runner_source() -> str:
    from autograder.run.sandbox import RUNNER

    return RUNNER.read_text()
