"""What the Gradescope and PrairieLearn exports share: the bundle, its setup script, one-file
grading with the hardened engine, and the fallback runner for containers without namespaces.

The bundle (``course/`` in the Gradescope zip, ``tests/course/`` in the PrairieLearn question) is
the repository's ``course_lib/`` and ``autograder/`` and the chapter's source and release
notebooks, copied from the working tree at one commit (``bundle.json`` records it; a tree that
differs from its commit in those paths is refused unless ``--allow-dirty``, and then marked
dirty). ``setup.sh`` installs a pinned CPU-only torch and the grading dependencies (pinned to the
versions of ``requirements-dev.txt``) into a virtual environment; course_lib is *not* installed
there: it stays in the bundle, on the trusted process's ``PYTHONPATH`` only.

Grading one file (:func:`grade_file`), in the trusted process (root on both platforms):

1. read the chapter spec from the bundled source notebook, build this run's hidden inputs (a
   fresh secret) and the stripped course_lib for the sandbox (:mod:`autograder.grade`'s own
   preparation), and compute every reference output now;
2. with the fallback runner: make the bundle unreadable to anyone but root (mode 0700) -- the
   source notebook (solutions, hidden tests) and the real course_lib are out of reach before any
   student code runs;
3. validate the notebook (:func:`autograder.submissions.load_notebook`); a file that cannot be
   graded gives a result with 0 and the reason;
4. run it with :func:`autograder.run.hardened.run_submission` (bubblewrap where it can create
   namespaces, else :class:`HostSandbox`); the judge decides from the records; the kernel is
   killed (and every process of its uid) before the caller writes any result.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nbformat import NotebookNode

from autograder.chapter_spec import ChapterSpec, load_chapter_spec
from autograder.ingest.validate import InvalidSubmission, load_notebook
from autograder.judge import Judge
from autograder.results import ExerciseOutcome, GradeResult
from autograder.run import cgroups, environment
from autograder.run.batch import Workspace, grade_notebook
from autograder.run.course import prepare_sandbox_course
from autograder.run.hardened import SandboxFactory
from autograder.run.sandbox import (
    INPUTS_FOLDER,
    RUNNER,
    Limits,
    Sandbox,
    SandboxDied,
    acquire_slots,
    bwrap_path,
    reap_uid,
    slot_uid,
)
from coursebook.chapters import REPO, Chapter, find_chapter

#: The torch every bundle pins (the course's tested version, CPU wheels).
TORCH_VERSION = "2.13.0"
TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
#: What grading imports besides torch (course_lib's dependencies, the notebook reader, IPython
#: for the kernel); versions come from requirements-dev.txt, which also constrains the rest.
GRADING_PACKAGES = ["numpy", "scipy", "matplotlib", "tqdm", "regex", "nbformat", "ipython"]
#: Paths of the repository copied into a bundle (besides the chapter's two notebooks).
BUNDLED = ("course_lib", "autograder", "coursebook")
RUNNER_ENV = "AUTOGRADER_PLATFORM_RUNNER"  # auto (default), bubblewrap, fallback


class BundleError(RuntimeError):
    """The bundle cannot be made (a dirty tree without --allow-dirty, no git)."""


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout


def pinned_versions(names: list[str], requirements: Path = REPO / "requirements-dev.txt"
                    ) -> dict[str, str]:
    """``name -> version`` from a pip requirements file's ``name==version`` lines.

    Example:
        >>> v = pinned_versions(["numpy", "nbformat"])
        >>> sorted(v) == ["nbformat", "numpy"] and all(v.values())
        True
    """
    pins: dict[str, str] = {}
    for line in requirements.read_text(encoding="utf-8").splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[name.strip().lower().replace("_", "-")] = version.strip()
    return {n: pins[n.lower().replace("_", "-")] for n in names
            if n.lower().replace("_", "-") in pins}


SETUP_SH = r"""#!/usr/bin/env bash
# Installs the grading environment of {chapter} (course commit {commit}).
# Gradescope runs it once, as root, when it builds the autograder image; the PrairieLearn
# grader image runs it in its Dockerfile. Needs Python 3.11 or newer (nbgrader 0.9.6 and
# IPython 9 do): on Ubuntu 22.04 (Python 3.10) it installs python3.11 from Ubuntu's own archive.
# Settings (environment): COURSE_VENV (default /opt/course-venv), COURSE_PYTHON (an interpreter
# to use), COURSE_TORCH_INDEX_URL (default {torch_index}; empty: pip's own configuration).
set -euo pipefail
HERE="$(cd "$(dirname "${{BASH_SOURCE[0]}}")" && pwd)"
VENV="${{COURSE_VENV:-/opt/course-venv}}"
TORCH_INDEX="${{COURSE_TORCH_INDEX_URL-{torch_index}}}"
ok() {{ "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; }}
PY="${{COURSE_PYTHON:-}}"
if [ -z "$PY" ]; then
  for c in python3.13 python3.12 python3.11 python3; do
    if command -v "$c" >/dev/null && ok "$(command -v "$c")"; then
      PY="$(command -v "$c")"; break
    fi
  done
fi
if [ -z "$PY" ] && command -v apt-get >/dev/null; then
  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
    python3.11 python3.11-venv bubblewrap util-linux
  PY="$(command -v python3.11)"
fi
ok "$PY" || {{
  echo "setup.sh: Python 3.11 or newer is needed (found: ${{PY:-none}})" >&2; exit 1
}}
if command -v apt-get >/dev/null && ! command -v bwrap >/dev/null && [ "$(id -u)" = 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q bubblewrap || true
fi
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip || true
if [ -n "$TORCH_INDEX" ]; then
  "$VENV/bin/python" -m pip install --quiet "torch=={torch}" --index-url "$TORCH_INDEX"
else
  "$VENV/bin/python" -m pip install --quiet "torch=={torch}"
fi
"$VENV/bin/python" -m pip install --quiet -r "$HERE/requirements-grading.txt" \
  -c "$HERE/constraints.txt"
# the bundle's course_lib is never installed: only the trusted grader has it on its path
PYTHONPATH="$HERE/course" "$VENV/bin/python" -c "import course_lib, autograder, torch, nbformat, \
IPython; print('grading environment ready:', torch.__version__)"
"""


def write_bundle(chapter: Chapter, dest: Path, allow_dirty: bool = False,
                 settings: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write the chapter's grading bundle into ``dest``: ``course/``, ``setup.sh``,
    ``requirements-grading.txt``, ``constraints.txt``, ``bundle.json``; return bundle.json.

    Raises:
        BundleError: the working tree differs from its commit in a bundled path and
            ``allow_dirty`` is False, or the repository is not a git checkout.
    """
    paths = [*BUNDLED, f"solutions/{chapter.slug}", f"chapters/{chapter.slug}"]
    try:
        commit = _git("rev-parse", "HEAD").strip()
        dirty = [line[3:] for line in _git("status", "--porcelain", "--", *paths).splitlines()
                 if line.strip()]
    except (OSError, subprocess.CalledProcessError) as err:
        raise BundleError(f"the bundle pins the course's git commit: {err}") from None
    if dirty and not allow_dirty:
        shown = ", ".join(dirty[:8]) + (" ..." if len(dirty) > 8 else "")
        raise BundleError(f"the working tree differs from commit {commit[:12]} in {shown}: "
                          "commit first (the bundle pins the commit), or pass --allow-dirty")
    dest.mkdir(parents=True, exist_ok=True)
    course = dest / "course"
    if course.exists():
        shutil.rmtree(course)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", ".ipynb_checkpoints")
    for name in BUNDLED:
        shutil.copytree(REPO / name, course / name, ignore=ignore)
    for side, src in (("solutions", chapter.source), ("chapters", chapter.release)):
        if src.exists():
            (course / side / chapter.slug).mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, course / side / chapter.slug / src.name)
    pins = pinned_versions(GRADING_PACKAGES)
    (dest / "requirements-grading.txt").write_text(
        "".join(f"{n}=={pins[n]}\n" if n in pins else f"{n}\n" for n in GRADING_PACKAGES))
    constraints = [line for line in (REPO / "requirements-dev.txt").read_text().splitlines()
                   if "==" in line and not line.lstrip().startswith("#")]
    (dest / "constraints.txt").write_text("\n".join(constraints) + "\n")
    info = {"chapter": chapter.slug, "stem": chapter.stem, "commit": commit,
            "dirty": sorted(dirty), "torch": TORCH_VERSION, "created": time.strftime(
                "%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "settings": {"cell_timeout": 60.0, "notebook_timeout": 300.0, "memory_mb": 3072,
                         **(settings or {})}}
    (dest / "bundle.json").write_text(json.dumps(info, indent=1) + "\n")
    setup = dest / "setup.sh"
    setup.write_text(SETUP_SH.format(chapter=chapter.slug, commit=commit[:12] + (
        "+dirty" if dirty else ""), torch=TORCH_VERSION, torch_index=TORCH_INDEX))
    setup.chmod(0o755)
    return info


# --------------------------------------------------------------------------- the runners

def bubblewrap_works() -> bool:
    """Whether bubblewrap can create the sandbox's namespaces here (Docker's default profile,
    Gradescope's and PrairieLearn's containers often refuse them)."""
    bwrap = bwrap_path()
    if bwrap is None:
        return False
    cmd = [bwrap, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
           "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
           "--tmpfs", "/tmp", "true"]
    if os.geteuid() != 0:
        cmd[1:1] = ["--unshare-user"]
    try:
        return subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def choose_runner() -> str:
    """``"bubblewrap"`` or ``"fallback"``: ``$AUTOGRADER_PLATFORM_RUNNER`` when it names one,
    else bubblewrap where it works."""
    wanted = os.environ.get(RUNNER_ENV, "auto").strip().lower()
    if wanted in ("bubblewrap", "fallback"):
        return wanted
    return "bubblewrap" if bubblewrap_works() else "fallback"


@dataclass
class HostSandbox(Sandbox):
    """The fallback runner: the sandbox's runner without namespaces, for containers where
    bubblewrap cannot create them.

    Kept: student code runs as an unprivileged uid of its own (``setpriv``: no capabilities,
    ``no_new_privs``, no supplementary groups) in a private, empty working folder (mode 0700),
    with a cleared environment, the stripped course_lib on its path, the same ``RLIMIT``s
    (address space, tasks, file size, no core) and cgroup where one can be made, the same time
    limits; every process of that uid is killed when the sandbox ends (daemons and ``setsid``
    children too). Lost (the container is the sandbox): the private mount, PID, network, IPC and
    UTS namespaces -- student code sees the container's world-readable files and processes and
    may reach the network if the container can.
    """

    scratch: Path | None = None
    runner: Path | None = None
    site: Path | None = None
    home: Path | None = field(default=None, init=False)

    def start(self) -> None:
        uid = slot_uid(self.slot)
        root = os.geteuid() == 0
        if root and not reap_uid(uid):
            raise SandboxDied("processes of an earlier sandbox of this slot would not die")
        self.cgroup = cgroups.sandbox_cgroup(f"slot{self.slot}", self.limits.memory_bytes,
                                             self.limits.cpus, self.limits.tasks)
        self.home = Path(tempfile.mkdtemp(prefix=f"box{self.slot}-", dir=self.scratch))
        (self.home / "records").mkdir()
        if root:
            for p in (self.home, self.home / "records"):
                os.chown(p, uid, uid)
        self.home.chmod(0o700)
        env = {
            "PATH": "/usr/bin:/bin", "HOME": str(self.home),
            "TMPDIR": str(self.home),
            "PYTHONPATH": os.pathsep.join([str(self.course_dir), str(self.site or "")]),
            "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0",
            "COURSE_GRADING_MODE": "record",
            "COURSE_GRADING_RECORD_DIR": str(self.home / "records"),
            "COURSE_LIB_QUICK": "1",
            "COURSE_GRADING_INPUT_DIR": str(self.course_dir / INPUTS_FOLDER),
            "COURSE_DEVICE": "cpu", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "OPENBLAS_NUM_THREADS": "1", "MPLBACKEND": "Agg",
            "MPLCONFIGDIR": str(self.home / ".mpl"),
            "CUDA_VISIBLE_DEVICES": "", "LANG": "C.UTF-8",
        }
        def command(cmd_r: int, rep_w: int) -> list[str]:
            args = [environment.sandbox_python(), *environment.python_flags(),
                    str(self.runner or RUNNER), str(cmd_r), str(rep_w)]
            if root:
                args = ["/usr/bin/setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                        "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", *args]
            return args

        self._spawn(command, env=env, cwd=self.home)

    def kill(self, grace: float = 0.0) -> int | None:
        code = super().kill(grace)
        if self.home is not None:
            shutil.rmtree(self.home, ignore_errors=True)
            self.home = None
        return code


# --------------------------------------------------------------------------- grading one file

def find_notebook(folder: Path, slug: str) -> tuple[Path | None, str]:
    """The submitted notebook in ``folder`` whatever its name: ``(path, note)``, or
    ``(None, reason)``. Links are never followed; among several notebooks the one named like
    the chapter (``seq2seq (1).ipynb`` counts) wins, then the newest.

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp())
        >>> _ = (d / "seq2seq (1).ipynb").write_text("{}")
        >>> find_notebook(d, "seq2seq")[0].name
        'seq2seq (1).ipynb'
    """
    found: list[Path] = []
    others: list[str] = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames[:] = [d for d in dirnames if not d.startswith((".", "__MACOSX"))]
        for name in filenames:
            p = Path(dirpath) / name
            if name.lower().endswith(".ipynb") and not name.startswith("."):
                found.append(p)
            else:
                others.append(str(p.relative_to(folder)))
        if len(found) + len(others) > 10000:
            break
    if not found:
        listed = ", ".join(sorted(others)[:10]) or "nothing"
        return None, f"no .ipynb notebook was submitted (found: {listed})"
    if len(found) == 1:
        return found[0], ""
    named = [p for p in found if slug.lower() in p.name.lower()]
    pool = named or found

    def mtime(p: Path) -> float:
        try:
            return os.lstat(p).st_mtime
        except OSError:
            return 0.0
    best = max(pool, key=lambda p: (mtime(p), p.name))
    return best, (f"{len(found)} notebooks were submitted; graded {best.name!r} (named like the "
                  f"chapter)" if named else f"{len(found)} notebooks were submitted; graded the "
                  f"newest, {best.name!r}")


@dataclass
class Graded:
    """One graded file: the grader's result (as in ``results/<student>.json``) and how."""

    result: GradeResult
    spec: ChapterSpec
    runner: str
    seconds: float
    bundle: dict[str, Any]
    memory: dict[str, float] = field(default_factory=dict)


def _lock(paths: list[Path]) -> None:
    """Make ``paths`` (folders or files) unreadable to everyone but root: owned by root (when
    this process is root), mode 0700 on folders, 0600 on files, recursively; links are left
    alone (never followed).

    The Gradescope runner locks ``/autograder/source`` and ``/autograder/submission_metadata.json``
    (earlier submissions' scores and results, hidden feedback included) this way.
    """
    root = os.geteuid() == 0
    for top in paths:
        if top.is_symlink() or not top.exists():
            continue
        for p in [top, *(top.rglob("*") if top.is_dir() else [])]:
            if p.is_symlink():
                continue
            if root:
                os.chown(p, 0, 0, follow_symlinks=False)
            p.chmod(0o700 if p.is_dir() else 0o600)


def _read(notebook: Path | None, missing_reason: str, result: GradeResult) -> NotebookNode | None:
    """The validated notebook, or ``None`` with ``result`` failed for the reason."""
    if notebook is None:
        result.fail(missing_reason)
        return None
    try:
        nb, notes, digest = load_notebook(notebook)
    except InvalidSubmission as err:
        result.fail(str(err)).sha256 = err.digest
        return None
    except Exception as err:  # noqa: BLE001 - never a crash of the harness
        result.fail(f"the file could not be read ({type(err).__name__})")
        return None
    result.sha256 = digest
    result.notes += notes
    return nb


def _limits(bundle: dict[str, Any]) -> Limits:
    """The sandbox's limits written into ``bundle.json``."""
    settings = bundle.get("settings", {})
    return Limits(memory_bytes=int(settings.get("memory_mb", 3072)) << 20,
                  cell_timeout=float(settings.get("cell_timeout", 60.0)),
                  notebook_timeout=float(settings.get("notebook_timeout", 300.0)))


def _fallback_factory(work: Path, lock: list[Path]) -> SandboxFactory:
    """The fallback runner's sandboxes: the bundle locked first, a private home per slot, and
    a copy of the runner script the sandbox's uid may read."""
    _lock(lock)  # the source and the real course_lib: root's alone from now
    homes = work / "homes"
    homes.mkdir()
    homes.chmod(0o711)
    runner_copy = work / "runner.py"
    shutil.copyfile(RUNNER, runner_copy)
    runner_copy.chmod(0o644)
    site = sandbox_site(work / "site")
    if os.environ.get(PLATFORM_CONTAINER_ENV) and os.geteuid() == 0:
        lock_other_packages()

    def factory(course: Path, slot: int, lim: Limits) -> Sandbox:
        return HostSandbox(course, slot, lim, scratch=homes, runner=runner_copy, site=site)
    return factory


#: Set by the platforms' run scripts (the container is thrown away after one submission): the
#: fallback runner may then lock the packages the sandbox must not reach.
PLATFORM_CONTAINER_ENV = "COURSE_PLATFORM_CONTAINER"


def sandbox_site(dest: Path) -> Path:
    """A folder of links to the allowed distributions' entries alone
    (:func:`autograder.run.environment.site_entries`): the fallback runner's ``PYTHONPATH``, as
    ``/opt/site`` is bubblewrap's."""
    dest.mkdir(parents=True, exist_ok=True)
    dest.chmod(0o755)
    for name, path in environment.site_entries().items():
        link = dest / name
        if not link.exists():
            link.symlink_to(path)
    return dest


def lock_other_packages() -> list[str]:
    """In a platform's throw-away container, as root: make every installed entry that the
    allow-list does not name readable by root alone (mode 0700), in every folder of packages, so
    that student code running as another uid cannot reach it by path (``sys.path.append``).
    The trusted process (root) still imports them. Returns what was locked."""
    allowed = {path.resolve() for path in environment.site_entries().values()}
    locked = []
    for folder in environment.package_folders():
        for entry in Path(folder).iterdir():
            if entry.resolve() in allowed or entry.is_symlink():
                continue
            try:
                entry.chmod(0o700)
                locked.append(str(entry))
            except OSError:
                continue
    return locked


def _run_one(spec: ChapterSpec, nb: NotebookNode, result: GradeResult, bundle: dict[str, Any],
             lock: list[Path], runner: str) -> None:
    """Prepare the sandbox course and every reference, then grade ``nb`` into ``result``."""
    work = Path(tempfile.mkdtemp(prefix="autograder-platform-"))
    slots, fds = acquire_slots(1)
    try:
        work.chmod(0o711)  # the sandbox's uid may pass through, not list
        judge = Judge(spec.answers)
        prepare_sandbox_course(spec, work / "sandbox-course", judge)
        for ex in spec.exercises:  # every reference now: nothing trusted is read later
            for k in range(len(judge.cases(ex.exercise_id))):
                judge.expected(ex.exercise_id, k)
        # bubblewrap: the bundle is not in the sandbox's file system at all
        factory = _fallback_factory(work, lock) if runner == "fallback" else Sandbox
        grade_notebook(Workspace(spec, judge, work / "sandbox-course", work / "records",
                                 slots[0], _limits(bundle), factory), nb, result)
    finally:
        for fd in fds:
            os.close(fd)
        shutil.rmtree(work, ignore_errors=True)


def grade_file(course_root: Path, bundle: dict[str, Any], notebook: Path | None,
               missing_reason: str = "", lock: list[Path] | None = None,
               runner: str | None = None) -> Graded:
    """Grade one submitted notebook with the hardened engine (see the module docstring).

    Args:
        course_root: the bundle's ``course/`` folder (on ``sys.path`` already).
        bundle: its ``bundle.json``.
        notebook: the submitted file, or None (then ``missing_reason`` says why).
        missing_reason: why there is no notebook.
        lock: folders made unreadable to student code before it runs (fallback runner only:
            the bubblewrap sandbox does not hold them, and reads its runner script from there).
        runner: ``"bubblewrap"`` or ``"fallback"`` (default: :func:`choose_runner`).

    Returns:
        The result (0 and the reason for a file that cannot be graded) and how it was graded.
    """
    t0 = time.time()
    chapter = find_chapter(bundle["chapter"], course_root)
    spec = load_chapter_spec(chapter.slug, chapter.exercises, chapter.source, chapter.release)
    points = {ex.exercise_id: ex.points for ex in spec.exercises}
    runner = runner or choose_runner()
    result = GradeResult.new("submission", notebook.name if notebook else "", "",
                             spec.source_sha, "hardened", spec.max_total)
    nb = _read(notebook, missing_reason, result)
    if nb is None:
        return Graded(result.finish(points), spec, runner, time.time() - t0, bundle)
    _run_one(spec, nb, result, bundle, list(lock or []), runner)
    if result.status != "graded":  # the cells could not be matched to the exercises
        return Graded(result.finish(points), spec, runner, time.time() - t0, bundle)
    result.seconds = round(time.time() - t0, 2)
    return Graded(result.finish(points), spec, runner, time.time() - t0, bundle, peak_rss_mb())


def peak_rss_mb() -> dict[str, float]:
    """Peak resident memory in MiB of this (trusted) process and of its largest finished child
    process (the student's kernel); their sum bounds what the two held at once."""
    grader = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    kernel = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return {"grader": round(grader, 1), "kernel": round(kernel, 1),
            "sum": round(grader + kernel, 1)}


def feedback_text(result: GradeResult, exercise_id: str, max_chars: int = 20000) -> str:
    """One exercise's feedback as plain text: the same content as the feedback page (the
    judge's messages, notes on repairs, the student's cells' outputs and errors, the visible
    tests' output), never the hidden test code or inputs."""
    r = result.exercises.get(exercise_id) or ExerciseOutcome(exercise_id, 0.0, 0.0, "")
    lines = [f"{r.points:g} / {r.max_points:g} points: {r.status}"]
    lines += [f"Note: {n}" for n in r.notes]
    if r.messages:
        lines += ["Hidden tests:", *[f"  {m}" for m in r.messages]]
    elif r.status == "passed":
        lines.append("All hidden test cases passed.")
    for log in r.logs:
        if log.output or log.error:
            lines.append(f"--- {log.label}")
            if log.output:
                lines.append(log.output.rstrip())
            if log.error:
                lines.append(f"Error: {log.error}")
    text = "\n".join(lines)
    return text if len(text) <= max_chars else text[:max_chars] + "\n[... cut]"


def visible_test_log(result: GradeResult, exercise_id: str) -> tuple[bool, str]:
    """``(passed, text)`` of an exercise's visible tests (what the student's own notebook
    shows them): the visible test cell's output and error."""
    r = result.exercises.get(exercise_id) or ExerciseOutcome(exercise_id, 0.0, 0.0, "")
    for log in r.logs:
        if log.label == "visible tests":
            text = (log.output or "").rstrip()
            if log.error:
                text = (text + "\n" if text else "") + f"Error: {log.error}"
            return log.error is None, text or "The visible tests passed."
    # never the exercise's messages here: they may hold the hidden tests' verdict, and this
    # text is shown before the grades are published
    return False, ("The visible tests were not run; why comes with the exercise's points "
                   "and hidden tests' results.")


def general_text(graded: Graded, total: bool = True) -> str:
    """The submission-wide text: could-not-grade reason, repairs, the bundle's commit, and
    with ``total`` the points (Gradescope's visible text passes ``total=False``: the total
    would tell the hidden tests' outcome before the grades are published)."""
    r = graded.result
    lines = []
    if r.status != "graded":
        lines.append(f"Could not grade this file: {r.reason}")
    lines += [f"Note: {n}" for n in r.notes]
    where = (f"{graded.bundle.get('chapter')}, course commit "
             f"{str(graded.bundle.get('commit', ''))[:12]}, {graded.runner} runner")
    lines.append(f"Graded: {r.total:g} / {r.max_total:g} points ({where})." if total
                 else f"Graded ({where}).")
    return "\n".join(lines)


def read_bundle(course_root: Path) -> dict[str, Any]:
    """The ``bundle.json`` beside the bundle's ``course/`` folder."""
    return json.loads((course_root.parent / "bundle.json").read_text(encoding="utf-8"))


def sha256_file(path: Path) -> str:
    """The hex sha256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()
