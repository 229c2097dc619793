"""The Gradescope autograder (``python -m autograder gradescope``), run as Gradescope runs it.

A fresh root (bubblewrap: an empty tmpfs with read-only /usr, /etc and the Python installation,
no network, its own PID namespace, Docker's default capabilities only, so that, as in a
Gradescope container, bubblewrap cannot create namespaces inside and the grader must pick its
fallback runner) holds ``/autograder/source`` (the unzipped zip), ``/autograder/submission`` and
``/autograder/results``; ``/autograder/run_autograder`` runs for five submissions of chapter 1
(solution, blank release, partial, a Colab download named ``seq2seq (1).ipynb``, a truncated
file), and each results.json must validate against Gradescope's documented layout and carry
exactly the points ``python -m autograder grade`` (the hardened engine, bubblewrap) gives the same
file. The slow ``setup.sh`` test builds the grading environment into a fresh virtual environment
(the local torch wheel, pip's cache, no network) and grades with it.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import jsonschema
import pytest

from autograder.run.sandbox import _mount_parents, system_tops
from coursebook.chapters import REPO, find_chapter

CHAPTER = "01-seq2seq"
SUBMISSIONS = ("solution", "blank", "partial", "colab", "truncated")
#: Docker's default capabilities (Gradescope's and PrairieLearn's containers): no CAP_SYS_ADMIN,
#: so no namespaces for a nested bubblewrap.
DOCKER_CAPS = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
               "CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
               "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"]

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None or os.geteuid() != 0,
                                 reason="the platform layouts are built with bubblewrap as root")


def submissions(tmp: Path) -> dict[str, tuple[str, bytes]]:
    """``name -> (file name, bytes)`` of the five submissions of chapter 1."""
    from autograder.chapter_spec import load_chapter_spec
    from tests.test_autograder_chapters import _copies

    chapter = find_chapter(CHAPTER)
    spec = load_chapter_spec(chapter.slug, chapter.exercises, chapter.source,
                             chapter.release)
    copies = _copies(chapter, spec)
    slug = chapter.stem
    solution = copies["solution"][0].encode()
    return {"solution": (f"{slug}.ipynb", solution),
            "blank": (f"{slug}.ipynb", copies["blank"][0].encode()),
            "partial": (f"{slug}.ipynb", copies["partial"][0].encode()),
            "colab": (f"{slug} (1).ipynb", copies["colab"][0].encode()),
            "truncated": (f"{slug}.ipynb", solution[: len(solution) // 2])}


def hardened_grades(tmp: Path, subs: dict[str, tuple[str, bytes]]) -> dict[str, dict]:
    """``name -> {"total", "status", exercise name -> points}`` from ``python -m autograder
    grade`` on the same files (one folder per student)."""
    folder = tmp / "grade-subs"
    for name, (fname, data) in subs.items():
        (folder / name).mkdir(parents=True)
        (folder / name / fname).write_bytes(data)
    out = tmp / "grade-out"
    proc = subprocess.run([sys.executable, "-m", "autograder", "grade", CHAPTER, str(folder),
                           "--out", str(out), "--no-progress", "--workers", "2"], cwd=REPO,
                          capture_output=True, text=True, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    with open(out / "grades.csv", newline="") as f:
        rows = {row["student_id"]: row for row in csv.DictReader(f)}
    grades = {}
    for name in subs:
        r = json.loads((out / "results" / f"{name}.json").read_text())
        grades[name] = {"total": float(rows[name]["total"]), "status": r["status"],
                        "points": {eid: e["points"] for eid, e in r["exercises"].items()}}
    return grades


def fresh_root_command(mounts: dict[str, Path], venv: Path, command: list[str],
                       env: dict[str, str] | None = None, writable_venv: bool = False,
                       docker_caps: bool = True) -> list[str]:
    """bubblewrap command line of a fresh root: the system read-only, ``mounts`` (path inside
    -> folder here) writable, ``venv`` at its own path, no network."""
    args = ["bwrap", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net",
            "--die-with-parent", "--ro-bind", "/usr", "/usr", *system_tops()]
    slots = Path("/tmp/autograder-slots")
    slots.mkdir(mode=0o700, exist_ok=True)
    args += ["--ro-bind", "/etc", "/etc", "--proc", "/proc", "--dev", "/dev",
             "--ro-bind", "/sys", "/sys", "--tmpfs", "/tmp",
             "--bind", str(slots), str(slots)]  # the uid slots of every grading run here
    made: set[str] = {"/tmp"}

    def parents(dest: str) -> list[str]:  # world-readable parents, as in a container image
        return _mount_parents(dest, made)
    base = os.path.realpath(sys.base_prefix)
    if not base.startswith("/usr"):
        args += parents(base) + ["--ro-bind", base, base]
    args += parents(str(venv)) + ["--bind" if writable_venv else "--ro-bind", str(venv), str(venv)]
    for inside, here in mounts.items():
        args += parents(inside) + ["--bind", str(here), inside]
    if docker_caps:
        args += ["--cap-drop", "ALL"]
        for cap in DOCKER_CAPS:
            args += ["--cap-add", cap]
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8",
           "COURSE_VENV": str(venv), **(env or {})}
    args += ["--clearenv"]
    for k, v in env.items():
        args += ["--setenv", k, v]
    return args + command


def run_gradescope(zip_path: Path, tmp: Path, name: str, fname: str, data: bytes,
                   venv: Path, env: dict[str, str] | None = None, docker_caps: bool = True) -> dict:
    """One submission through ``/autograder/run_autograder`` in a fresh root; its results.json."""
    root = tmp / f"gs-{name}"
    (root / "source").mkdir(parents=True)
    with zipfile.ZipFile(zip_path) as z:
        z.extractall(root / "source")
    for info in zipfile.ZipFile(zip_path).infolist():  # zipfile drops modes; Gradescope keeps them
        mode = (info.external_attr >> 16) & 0o777
        if mode:
            (root / "source" / info.filename).chmod(mode)
    shutil.copy2(root / "source" / "run_autograder", root / "run_autograder")
    (root / "submission").mkdir()
    (root / "submission" / fname).write_bytes(data)
    (root / "results").mkdir()
    proc = subprocess.run(fresh_root_command({"/autograder": root}, venv,
                                             ["bash", "/autograder/run_autograder"], env,
                                             docker_caps=docker_caps),
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    out = root / "results" / "results.json"
    assert out.exists(), proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


def check_against(name: str, data: dict, expected: dict, spec) -> None:
    """results.json of Gradescope validates and carries exactly the hardened engine's points."""
    from autograder.gradescope import RESULTS_SCHEMA

    jsonschema.validate(data, RESULTS_SCHEMA)
    assert data["score"] == expected["total"], (name, data["output"])
    scored = [t for t in data["tests"] if t["max_score"] > 0]
    assert [t["name"] for t in scored] == [ex.name for ex in spec.exercises]
    got = {ex.exercise_id: t["score"] for ex, t in zip(spec.exercises, scored)}
    assert got == expected["points"], (name, [t["output"][:300] for t in scored])
    assert sum(t["score"] for t in data["tests"]) == data["score"]
    for ex, t in zip(spec.exercises, scored):
        hidden = ex.hidden_test.strip()
        assert hidden not in t["output"], "the hidden test code leaked into the feedback"
        assert t["status"] == ("passed" if t["score"] == t["max_score"] else "failed")
    if expected["status"] == "graded":
        assert {t["visibility"] for t in scored} == {"after_published"}
        assert {t["visibility"] for t in data["tests"] if t["max_score"] == 0} == {"visible"}
        assert len(data["tests"]) == 2 * len(spec.exercises)
    else:
        assert data["score"] == 0 and "Could not grade" in data["output"]
        assert all(t["visibility"] == "visible" for t in data["tests"])


@pytest.fixture(scope="module")
def chapter_spec():
    from autograder.chapter_spec import load_chapter_spec

    chapter = find_chapter(CHAPTER)
    return load_chapter_spec(chapter.slug, chapter.exercises, chapter.source,
                             chapter.release)


@pytest.fixture(scope="module")
def gradescope_zip(tmp_path_factory) -> Path:
    from autograder.cli import main

    out = tmp_path_factory.mktemp("gradescope")
    assert main(["gradescope", CHAPTER, "--out", str(out), "--allow-dirty"]) == 0
    return out / f"{CHAPTER}-gradescope.zip"


# ----------------------------------------------------------------------------------- fast

def test_the_zip_holds_setup_run_autograder_and_the_pinned_bundle(gradescope_zip: Path) -> None:
    with zipfile.ZipFile(gradescope_zip) as z:
        names = set(z.namelist())
        modes = {i.filename: (i.external_attr >> 16) & 0o777 for i in z.infolist()}
        bundle = json.loads(z.read("bundle.json"))
        setup = z.read("setup.sh").decode()
        requirements = z.read("requirements-grading.txt").decode()
    assert {"setup.sh", "run_autograder", "bundle.json", "requirements-grading.txt",
            "constraints.txt", "course/course_lib/__init__.py", "course/autograder/run/hardened.py",
            "course/coursebook/chapters.py",
            "course/solutions/01-seq2seq/seq2seq.ipynb", "course/chapters/01-seq2seq/seq2seq.ipynb"
            } <= names
    assert modes["setup.sh"] & 0o111 and modes["run_autograder"] & 0o111
    assert not any("__pycache__" in n or n.startswith(("course/solutions/02", "course/tests"))
                   for n in names)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                          text=True).stdout.strip()
    assert bundle["commit"] == head and bundle["chapter"] == CHAPTER
    assert '"torch==2.13.0"' in setup and "download.pytorch.org/whl/cpu" in setup
    pins = dict(line.split("==") for line in requirements.split())
    assert {"numpy", "nbformat", "ipython", "scipy", "matplotlib"} <= set(pins)


def test_a_dirty_tree_is_refused_without_allow_dirty(tmp_path: Path, monkeypatch) -> None:
    from autograder import platform_common

    monkeypatch.setattr(platform_common, "_git", lambda *a: "abc\n" if a[0] == "rev-parse"
                        else " M course_lib/attention.py\n")
    with pytest.raises(platform_common.BundleError, match="--allow-dirty"):
        platform_common.write_bundle(find_chapter(CHAPTER), tmp_path / "b")
    info = platform_common.write_bundle(find_chapter(CHAPTER), tmp_path / "b", allow_dirty=True)
    assert info["dirty"] == ["course_lib/attention.py"]


def test_the_notebook_is_found_whatever_its_name(tmp_path: Path) -> None:
    from autograder.platform_common import find_notebook

    assert find_notebook(tmp_path, "seq2seq")[0] is None
    (tmp_path / "notes.txt").write_text("x")
    assert "no .ipynb" in find_notebook(tmp_path, "seq2seq")[1]
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "Copy of seq2seq.ipynb").write_text("{}")
    assert find_notebook(tmp_path, "seq2seq")[0].name == "Copy of seq2seq.ipynb"
    (tmp_path / "scratch.ipynb").write_text("{}")
    path, note = find_notebook(tmp_path, "seq2seq")
    assert path.name == "Copy of seq2seq.ipynb" and "2 notebooks" in note
    (tmp_path / "link.ipynb").symlink_to(tmp_path / "scratch.ipynb")
    (tmp_path / "linked").symlink_to(tmp_path / "sub", target_is_directory=True)
    assert find_notebook(tmp_path, "seq2seq")[0].name == "Copy of seq2seq.ipynb"


@pytest.mark.parametrize("what", ["truncated", "none", "not-json"])
def test_an_ungradable_file_gives_zero_and_the_reason(tmp_path: Path, gradescope_zip: Path,
                                                      what: str, monkeypatch) -> None:
    """In-process (no kernel is started for a file that cannot be graded)."""
    from autograder.gradescope import RESULTS_SCHEMA, run

    root = tmp_path / "autograder"
    with zipfile.ZipFile(gradescope_zip) as z:
        z.extractall(root / "source")
    (root / "submission").mkdir()
    solution = find_chapter(CHAPTER).source.read_bytes()
    if what == "truncated":
        (root / "submission" / "seq2seq.ipynb").write_bytes(solution[: len(solution) // 2])
    elif what == "not-json":
        (root / "submission" / "seq2seq (1).ipynb").write_bytes(b"\x89PNG\r\n")
    monkeypatch.syspath_prepend(str(root / "source" / "course"))
    assert run(root) == 0
    data = json.loads((root / "results" / "results.json").read_text())
    jsonschema.validate(data, RESULTS_SCHEMA)
    assert data["score"] == 0 and data["tests"]
    assert all(t["score"] == 0 and t["visibility"] == "visible" for t in data["tests"])
    reason = {"truncated": "JSON", "none": "no .ipynb", "not-json": "UTF-8"}[what]
    assert "Could not grade" in data["output"] and reason in data["output"], data["output"]


def test_a_grader_crash_still_writes_results_json(tmp_path: Path) -> None:
    from autograder.gradescope import RESULTS_SCHEMA, run

    root = tmp_path / "autograder"
    (root / "submission").mkdir(parents=True)  # no source/ at all: the grader itself fails
    assert run(root) == 0
    data = json.loads((root / "results" / "results.json").read_text())
    jsonschema.validate(data, RESULTS_SCHEMA)
    assert data["score"] == 0 and "the grader failed" in data["output"]


# ----------------------------------------------------------------------------------- slow

@pytest.fixture(scope="module")
def expected(tmp_path_factory) -> tuple[dict, dict]:
    """The five submissions and the hardened engine's grades of them."""
    tmp = tmp_path_factory.mktemp("gs-expected")
    subs = submissions(tmp)
    return subs, hardened_grades(tmp, subs)


@needs_bwrap
@pytest.mark.slow
@pytest.mark.xdist_group("platform-gradescope")
def test_run_autograder_in_gradescope_layout_gives_the_hardened_points(
        gradescope_zip: Path, expected, chapter_spec, tmp_path: Path) -> None:
    """The repository's virtual environment stands for the image (read-only, nothing of the
    repository inside the root: the zip's bundle alone); bubblewrap cannot nest there, so the
    fallback runner grades, with the hardened engine's exact points."""
    subs, grades = expected
    assert grades["solution"]["total"] > 0 and grades["truncated"]["status"] != "graded"
    assert grades["partial"]["total"] not in (0, grades["solution"]["total"])
    venv = Path(sys.prefix)
    for name in SUBMISSIONS:
        fname, data = subs[name]
        results = run_gradescope(gradescope_zip, tmp_path, name, fname, data, venv)
        check_against(name, results, grades[name], chapter_spec)
        if grades[name]["status"] == "graded":
            assert results["extra_data"]["runner"] == "fallback"


@needs_bwrap
@pytest.mark.slow
@pytest.mark.xdist_group("platform-gradescope")
def test_where_namespaces_can_be_made_the_bubblewrap_runner_grades(
        gradescope_zip: Path, expected, chapter_spec, tmp_path: Path) -> None:
    """A container that lets root create namespaces (all capabilities): the grader's probe
    finds bubblewrap working and the sandbox of `grade` runs the student's code, same points."""
    subs, grades = expected
    for name in ("solution", "partial"):
        fname, data = subs[name]
        results = run_gradescope(gradescope_zip, tmp_path, name, fname, data, Path(sys.prefix),
                                 docker_caps=False)
        check_against(name, results, grades[name], chapter_spec)
        assert results["extra_data"]["runner"] == "bubblewrap"


@needs_bwrap
@pytest.mark.slow
@pytest.mark.xdist_group("platform-gradescope")
def test_setup_sh_into_a_fresh_venv_then_run_autograder(gradescope_zip: Path, expected,
                                                        chapter_spec, tmp_path: Path) -> None:
    """setup.sh once (as Gradescope builds the image), into a fresh virtual environment: the
    local CPU torch wheel and pip's cache and local index (no network); then the solution
    and the partial submission graded with that environment alone."""
    subs, grades = expected
    venv = tmp_path / "course-venv"
    venv.mkdir()
    src = tmp_path / "setup-source"
    with zipfile.ZipFile(gradescope_zip) as z:
        z.extractall(src)
    # No network here: this machine's local index lacks some of the pinned versions (regex's
    # newest), so the grading packages are installed unpinned from it; torch keeps its pin
    # (the local CPU wheel), and the pins themselves are checked by the fast test of the zip.
    requirements = src / "requirements-grading.txt"
    requirements.write_text("".join(line.split("==")[0] + "\n"
                                    for line in requirements.read_text().split()))
    (src / "constraints.txt").write_text("")
    pip_env = {k: v for k, v in os.environ.items() if k.startswith("PIP_")}
    pip_env.update(COURSE_TORCH_INDEX_URL="", COURSE_PYTHON=os.path.realpath(sys.executable),
                   PIP_NO_INPUT="1", PIP_RETRIES="0", PIP_DEFAULT_TIMEOUT="5")
    cache = Path(os.environ.get("PIP_CACHE_DIR", Path.home() / ".cache" / "pip"))
    cache.mkdir(parents=True, exist_ok=True)
    pip_env["PIP_CACHE_DIR"] = str(cache)
    mounts = {"/autograder/source": src, str(cache): cache}
    config = Path.home() / ".config" / "pip"  # this machine's local indexes, if it has some
    if config.is_dir():
        mounts[str(config)] = config
        pip_env["HOME"] = str(Path.home())
    for local in ("/opt/wheels", "/opt/pypi", "/opt/pypi-more"):
        if Path(local).exists():
            mounts[local] = Path(local)
    proc = subprocess.run(fresh_root_command(mounts, venv, ["bash", "/autograder/source/setup.sh"],
                                             pip_env, writable_venv=True, docker_caps=False),
                          capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "grading environment ready: 2.13.0" in proc.stdout
    assert not list(venv.glob("lib/python*/site-packages/course_lib")), \
        "course_lib must stay in the bundle, off the student's path"
    for name in ("solution", "partial"):
        fname, data = subs[name]
        results = run_gradescope(gradescope_zip, tmp_path, name, fname, data, venv)
        check_against(name, results, grades[name], chapter_spec)
