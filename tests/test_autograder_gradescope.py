"""The Gradescope autograder (``python -m autograder gradescope``), run as Gradescope runs it.

A fresh root (bubblewrap: an empty tmpfs with read-only /usr, /etc and the Python installation,
no network, its own PID namespace, Docker's default capabilities only, so that, as in a
Gradescope container, bubblewrap cannot create namespaces inside and the grader must pick its
fallback runner) holds ``/autograder/source`` (the unzipped zip), ``/autograder/submission``,
``/autograder/submission_metadata.json`` (earlier submissions' scores and hidden feedback, with a
marker that must never come back) and ``/autograder/results``; ``/autograder/run_autograder`` runs
for five submissions of chapter 1 (solution, blank release, partial, a Colab download named
``seq2seq (1).ipynb``, a truncated file), and each results.json must validate against
Gradescope's documented layout, carry exactly the points ``python -m autograder grade`` (the
hardened engine, bubblewrap) gives the same file, and show nothing before publication that tells a
hidden test's outcome or a total (:func:`assert_nothing_hidden_is_visible`; the fast test checks
the same over every chapter). A partial submission that reads the metadata file gets a
permission error (fallback runner) or no such file (bubblewrap runner). The slow ``setup.sh``
test builds the grading environment into a fresh virtual environment (the local torch wheel,
pip's cache, no network) and grades with it.
"""

from __future__ import annotations

import csv
import json
import os
import re
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
#: In the fake ``submission_metadata.json`` (an earlier submission's hidden feedback): never in a
#: results.json.
METADATA_MARKER = "EARLIER-SUBMISSION-HIDDEN-FEEDBACK-7f3a"
#: Prepended to a solution cell: reads Gradescope's submission metadata from student code.
SNOOP = """try:
    _leak = open('/autograder/submission_metadata.json').read()
    print('METADATA READ', _leak)
except Exception as _err:
    print('METADATA BLOCKED', type(_err).__name__)
"""
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
    write_metadata(root / "submission_metadata.json")
    (root / "results").mkdir()
    proc = subprocess.run(fresh_root_command({"/autograder": root}, venv,
                                             ["bash", "/autograder/run_autograder"], env,
                                             docker_caps=docker_caps),
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    out = root / "results" / "results.json"
    assert out.exists(), proc.stdout[-2000:] + proc.stderr[-3000:]
    return json.loads(out.read_text())


def write_metadata(path: Path) -> None:
    """A ``submission_metadata.json`` as Gradescope writes it (world-readable here): the
    student, the assignment and an earlier submission with its score and full results."""
    path.write_text(json.dumps({
        "id": 123456, "created_at": "2026-11-27T10:00:00Z", "assignment": {
            "id": 42, "title": "01-seq2seq", "due_date": "2026-12-01T23:59:00Z",
            "total_points": "18.0"},
        "users": [{"email": "student@example.edu", "id": 7, "name": "A Student"}],
        "previous_submissions": [{"submission_time": "2026-11-26T09:00:00Z", "score": "7.0",
                                  "results": {"score": 7.0, "tests": [{
                                      "name": "greedy_decode", "score": 0, "max_score": 3,
                                      "visibility": "after_published",
                                      "output": f"case 2: wrong shape {METADATA_MARKER}"}]}}],
    }))
    path.chmod(0o644)


def visible_fields(data: dict) -> list[tuple[str, object]]:
    """``(where, value)`` of every field of a results.json that a student sees before the
    grades are published (Gradescope's documented visibility: a test's own ``visibility``, else
    the top level's, default ``visible``; ``stdout`` only with ``stdout_visibility: visible``).
    ``extra_data`` (stored, not shown) is counted as well, to be strict."""
    top = data.get("visibility", "visible")
    out: list[tuple[str, object]] = []
    if top == "visible":
        out += [(k, v) for k, v in data.items() if k != "tests"]
    for i, t in enumerate(data.get("tests", [])):
        if t.get("visibility", top) == "visible":
            out += [(f"tests[{i}].{k}", v) for k, v in t.items()]
    return out


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def hidden_outcomes(data: dict) -> list[str]:
    """What the scored (hidden tests') entries say that only publication may show: each
    exercise's points line (``3 / 3 points: passed``) and the hidden tests' messages."""
    found = []
    for t in data["tests"]:
        if t["max_score"] == 0:
            continue
        lines = t["output"].splitlines()
        found.append(lines[0])
        if "All hidden test cases passed." in lines:
            found.append("All hidden test cases passed.")
        if "Hidden tests:" in lines:
            for line in lines[lines.index("Hidden tests:") + 1:]:
                if not line.startswith("  "):
                    break
                found.append(line.strip())
    return found


def assert_nothing_hidden_is_visible(data: dict, hidden: list[str] | None = None,
                                     when: str = "after_published") -> None:
    """No field visible before publication holds a total or a hidden test's outcome: no
    top-level ``score``, visible tests worth 0 of 0, the scored tests all ``when``, the stdout
    hidden, and no visible text holds the total, an exercise's points or a hidden message
    (``hidden``: more strings known to be hidden, such as the judge's messages)."""
    scored = [t for t in data["tests"] if t["max_score"] > 0]
    if data.get("extra_data", {}).get("status", "graded") != "graded" or not scored:
        return  # could not grade: 0 everywhere and the reason, nothing hidden ran
    assert {t["visibility"] for t in scored} == {when}, [t["name"] for t in scored]
    assert data.get("stdout_visibility") == "hidden"
    assert "score" not in data, "a top-level score is the total, shown before publication"
    total = sum(t["score"] for t in scored)
    top = sum(t["max_score"] for t in scored)
    secrets = [s for s in [*hidden_outcomes(data), *(hidden or [])] if len(s) >= 8]
    patterns = [re.compile(rf"(?<![\d.]){re.escape(f'{total:g}')}\s*(/|of|out of)\s*"
                           rf"{re.escape(f'{top:g}')}(?![\d.])"),
                re.compile(r"(?i)\bgraded:\s*\d"),
                re.compile(r"(?i)\btotal\b[^\n]*\d+(\.\d+)?\s*points?\b")]
    for where, value in visible_fields(data):
        if where.startswith("tests[") and where.endswith((".score", ".max_score")):
            assert value == 0, (where, value)  # a visible test adds nothing to the total
        for text in _strings(value):
            for secret in secrets:
                assert secret not in text, (where, secret)
            for pattern in patterns:
                assert not pattern.search(text), (where, pattern.pattern, text[:300])


def check_against(name: str, data: dict, expected: dict, spec) -> None:
    """results.json of Gradescope validates, carries exactly the hardened engine's points and
    shows nothing hidden before publication."""
    from autograder.gradescope import RESULTS_SCHEMA, total_score

    jsonschema.validate(data, RESULTS_SCHEMA)
    assert total_score(data) == expected["total"], (name, data["output"])
    assert METADATA_MARKER not in json.dumps(data)
    assert_nothing_hidden_is_visible(data)
    scored = [t for t in data["tests"] if t["max_score"] > 0]
    assert [t["name"] for t in scored] == [ex.name for ex in spec.exercises]
    got = {ex.exercise_id: t["score"] for ex, t in zip(spec.exercises, scored)}
    assert got == expected["points"], (name, [t["output"][:300] for t in scored])
    for ex, t in zip(spec.exercises, scored):
        hidden = ex.hidden_test.strip()
        assert hidden not in t["output"], "the hidden test code leaked into the feedback"
        assert t["status"] == ("passed" if t["score"] == t["max_score"] else "failed")
    if expected["status"] == "graded":
        assert {t["visibility"] for t in scored} == {"after_published"}
        assert {t["visibility"] for t in data["tests"] if t["max_score"] == 0} == {"visible"}
        assert len(data["tests"]) == 2 * len(spec.exercises)
    else:
        assert total_score(data) == 0 and "Could not grade" in data["output"]
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


def partial_graded(chapter, hidden_marker: str = "HIDDEN-VERDICT"):
    """A :class:`platform_common.Graded` of a partial submission of ``chapter``, made up
    without running anything: even exercises pass, odd ones pass their visible tests but fail
    hidden cases (messages holding ``hidden_marker``), the last one never ran (no visible
    log, a message only); ``(graded, the hidden messages)``."""
    from autograder.chapter_spec import load_chapter_spec
    from autograder.platform_common import Graded
    from autograder.results import CellLog, ExerciseOutcome, GradeResult

    spec = load_chapter_spec(chapter.slug, chapter.exercises, chapter.source, chapter.release)
    result = GradeResult.new("submission", chapter.release.name, "0" * 64, spec.source_sha,
                             "hardened", spec.max_total)
    result.notes.append("the notebook's format was upgraded")
    messages = []
    last = len(spec.exercises) - 1
    for i, ex in enumerate(spec.exercises):
        logs = [CellLog("your cell 3 (solution)", "def f(): ...", f"printed by cell {i}", None)]
        if i != last:
            logs.append(CellLog("visible tests", ex.visible_test, f"visible {i} ok", None))
        if i % 2 == 0 and i != last:
            out = ExerciseOutcome(ex.exercise_id, ex.points, ex.points, "passed", [], [], logs)
        else:
            msg = [f"case {i + 2} (hidden case {i}): largest error 0.37 at (1, 2) "
                   f"{hidden_marker}-{i}"]
            messages += msg
            out = ExerciseOutcome(ex.exercise_id, 0.0, ex.points, "failed", msg,
                                  [f"your cell 3 (solution): note {i}"], logs)
        result.exercises[ex.exercise_id] = out
    result.finish({ex.exercise_id: ex.points for ex in spec.exercises})
    assert 0 < result.total < result.max_total
    bundle = {"chapter": chapter.slug, "stem": chapter.stem, "commit": "c0ffee" * 7,
              "settings": {}}
    return Graded(result, spec, "fallback", 12.5, bundle, {"grader": 300.0}), messages


@pytest.mark.parametrize("when", ["after_published", "after_due_date"])
def test_nothing_visible_before_publication_tells_hidden_outcomes_or_a_total(when: str) -> None:
    """Every chapter, a partial submission: every field a student sees before the grades are
    published (or before the due date, with ``--hidden-tests after_due_date``) is free of the
    total and of every hidden test's outcome; the visible tests' entries say what the visible
    tests did, even where the hidden ones failed."""
    from autograder.gradescope import RESULTS_SCHEMA, results_json, total_score
    from coursebook.chapters import all_chapters

    for chapter in all_chapters():
        graded, messages = partial_graded(chapter)
        data = results_json(graded, when)
        jsonschema.validate(data, RESULTS_SCHEMA)
        assert total_score(data) == graded.result.total
        assert_nothing_hidden_is_visible(data, messages, when)
        dump = json.dumps([v for _, v in visible_fields(data)])
        assert "HIDDEN-VERDICT" not in dump and "printed by cell" not in dump
        assert "HIDDEN-VERDICT" in json.dumps(data)  # the scored entries keep them
        spec = graded.spec
        last = len(spec.exercises) - 1
        for i, ex in enumerate(spec.exercises):
            visible = next(t for t in data["tests"] if t["name"] == f"{ex.name}: visible tests")
            assert visible["visibility"] == "visible"
            assert visible["status"] == ("failed" if i == last else "passed"), chapter.slug
            if i != last:
                assert f"visible {i} ok" in visible["output"]
        when_text = {"after_published": "publishes the grades",
                     "after_due_date": "after the due date"}[when]
        assert when_text in data["output"]


def test_the_checker_catches_what_it_must() -> None:
    """The visibility check itself fails on the leaks it is there for (the old layout)."""
    from autograder.gradescope import results_json

    graded, messages = partial_graded(find_chapter(CHAPTER))
    good = results_json(graded)
    r = graded.result
    leaks = {
        "total in the output": lambda d: d.update(
            output=d["output"] + f"\nGraded: {r.total:g} / {r.max_total:g} points"),
        "top-level score": lambda d: d.update(score=r.total),
        "scored test visible": lambda d: d["tests"][0].update(visibility="visible"),
        "hidden message in a visible test": lambda d: d["tests"][3].update(
            output=d["tests"][3]["output"] + "\n" + messages[0]),
        "stdout shown": lambda d: d.update(stdout_visibility="visible"),
        "visible test scored": lambda d: d["tests"][1].update(score=1.0, max_score=1.0),
    }
    for name, leak in leaks.items():
        data = json.loads(json.dumps(good))
        leak(data)
        try:
            assert_nothing_hidden_is_visible(data, messages)
        except AssertionError:
            continue
        pytest.fail(f"the check missed: {name}")
    assert_nothing_hidden_is_visible(good, messages)


def test_hidden_tests_after_the_due_date_is_an_option_of_the_zip(tmp_path: Path,
                                                                 monkeypatch) -> None:
    """``--hidden-tests after_due_date`` is stored in bundle.json and ``run`` uses it; the
    bundle and ``submission_metadata.json`` are what the runner locks."""
    from autograder import platform_common
    from autograder.cli import main
    from autograder.gradescope import run

    out = tmp_path / "zip"
    assert main(["gradescope", CHAPTER, "--out", str(out), "--allow-dirty",
                 "--hidden-tests", "after_due_date"]) == 0
    root = tmp_path / "autograder"
    with zipfile.ZipFile(out / f"{CHAPTER}-gradescope.zip") as z:
        z.extractall(root / "source")
    assert json.loads((root / "source" / "bundle.json").read_text())["settings"][
        "hidden_tests"] == "after_due_date"
    (root / "submission").mkdir()
    (root / "submission" / "seq2seq (1).ipynb").write_text("{}")
    graded, messages = partial_graded(find_chapter(CHAPTER))
    seen = {}

    def fake_grade_file(course, bundle, notebook, missing_reason="", lock=None, runner=None):
        seen.update(notebook=notebook, lock=lock)
        return graded
    monkeypatch.setattr(platform_common, "grade_file", fake_grade_file)
    monkeypatch.syspath_prepend(str(root / "source" / "course"))
    assert run(root) == 0
    data = json.loads((root / "results" / "results.json").read_text())
    assert_nothing_hidden_is_visible(data, messages, "after_due_date")
    assert seen["notebook"].name == "seq2seq (1).ipynb"
    assert seen["lock"] == [root / "source", root / "submission_metadata.json"]
    with pytest.raises(SystemExit):
        main(["gradescope", CHAPTER, "--out", str(out), "--hidden-tests", "visible"])


@pytest.mark.skipif(os.geteuid() != 0, reason="the lock changes owners: root only")
def test_the_fallback_locks_the_submission_metadata_from_the_sandbox_uid() -> None:
    """Gradescope's ``submission_metadata.json`` (world-readable, another owner): after the
    fallback runner's lock, the sandbox's uid cannot read it, nor the bundle."""
    import tempfile

    tmp_path = Path(tempfile.mkdtemp(prefix="gs-lock-", dir="/tmp"))  # pytest's is 0700
    try:
        _check_the_lock(tmp_path)
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)


def _check_the_lock(tmp_path: Path) -> None:
    from autograder.platform_common import _lock
    from autograder.run.sandbox import slot_uid

    tmp_path.chmod(0o755)
    meta = tmp_path / "submission_metadata.json"
    write_metadata(meta)
    os.chown(meta, 1234, 1234)
    source = tmp_path / "source"
    (source / "course").mkdir(parents=True)
    (source / "course" / "secret.txt").write_text("solutions")
    for p in (source, source / "course"):
        p.chmod(0o755)
    (source / "course" / "secret.txt").chmod(0o644)
    uid = slot_uid(0)

    def read_as_sandbox(path: Path) -> subprocess.CompletedProcess:
        return subprocess.run(["/usr/bin/setpriv", f"--reuid={uid}", f"--regid={uid}",
                               "--clear-groups", "cat", str(path)], capture_output=True,
                              text=True, timeout=30)
    assert METADATA_MARKER in read_as_sandbox(meta).stdout  # readable before: the hole
    _lock([source, meta])
    for path in (meta, source / "course" / "secret.txt"):
        proc = read_as_sandbox(path)
        assert proc.returncode != 0 and "Permission denied" in proc.stderr, path
        assert METADATA_MARKER not in proc.stdout
    assert meta.stat().st_uid == 0 and meta.stat().st_mode & 0o777 == 0o600


def test_the_bubblewrap_sandbox_holds_no_autograder_folder(tmp_path: Path) -> None:
    """The bubblewrap runner's command line binds nothing of ``/autograder`` (the bundle, the
    submission metadata) into the sandbox, whatever the grading environment."""
    from autograder.run.sandbox import Limits, bwrap_command

    course = tmp_path / "sandbox-course"
    course.mkdir()
    args = bwrap_command(course, 0, Limits(), 3, 4)
    binds = {"--bind", "--ro-bind", "--bind-try", "--ro-bind-try", "--dev-bind",
             "--dev-bind-try", "--file", "--bind-data", "--ro-bind-data"}
    for i, arg in enumerate(args[:-1]):
        if arg in binds:
            src, dest = args[i + 1], args[i + 2]
            for path in (src, dest):
                assert not path.startswith("/autograder"), (arg, src, dest)
    assert all(not a.startswith("/autograder") for a in args)


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
    assert "score" not in data and data["tests"]
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
    assert "Error" not in data["output"]  # the details go to the (hidden) stdout only


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
@pytest.mark.parametrize("runner", ["fallback", "bubblewrap"])
def test_student_code_cannot_read_the_submission_metadata(gradescope_zip: Path, chapter_spec,
                                                          tmp_path: Path, runner: str) -> None:
    """A partial submission whose first solution cell reads
    ``/autograder/submission_metadata.json`` and prints it: the fallback runner has made it
    root's before the cell runs (permission denied), the bubblewrap sandbox has no
    ``/autograder`` at all (no such file); the points are the partial file's, and nothing of
    the metadata comes back."""
    from autograder.gradescope import total_score
    from tests.test_autograder_chapters import _copies

    text, points = _copies(find_chapter(CHAPTER), chapter_spec)["partial"]
    nb = json.loads(text)
    first = chapter_spec.exercises[0]
    assert points[first.exercise_id] > 0  # solved in the partial file: its cell runs
    cell = next(c for c in nb["cells"]
                if c.get("metadata", {}).get("nbgrader", {}).get("grade_id")
                == first.solution_grade_id)
    source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
    cell["source"] = SNOOP + source
    data = run_gradescope(gradescope_zip, tmp_path, f"snoop-{runner}", "seq2seq.ipynb",
                          json.dumps(nb).encode(), Path(sys.prefix),
                          docker_caps=runner == "fallback")
    assert data["extra_data"]["runner"] == runner
    dump = json.dumps(data)
    assert METADATA_MARKER not in dump and "METADATA READ" not in dump
    error = "PermissionError" if runner == "fallback" else "FileNotFoundError"
    assert f"METADATA BLOCKED {error}" in dump, [t["output"][:500] for t in data["tests"]]
    scored = [t for t in data["tests"] if t["max_score"] > 0]
    assert {ex.exercise_id: t["score"] for ex, t in zip(chapter_spec.exercises, scored)} == points
    assert total_score(data) == sum(points.values())
    assert_nothing_hidden_is_visible(data)


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


@needs_bwrap
@pytest.mark.slow
@pytest.mark.xdist_group("platform-gradescope")
def test_the_fallback_runner_grades_a_memory_rule(tmp_path: Path) -> None:
    """In Gradescope's container (no CAP_SYS_RESOURCE: the grader cannot prlimit the student's
    uid) the memory probe's limit is set by the sandbox's runner on itself before any student
    code runs: chapter 8's solution earns every point, and the answer that forms B A (with the
    in-kernel meter off, tests/adversarial/memory.py) loses lora_forward in the rule's words."""
    import nbformat

    from autograder.cli import main
    from autograder.gradescope import total_score
    from tests.adversarial import memory

    chapter = find_chapter("08-fine-tuning")
    assert main(["gradescope", chapter.slug, "--out", str(tmp_path / "zip"),
                 "--allow-dirty"]) == 0
    zip_path = tmp_path / "zip" / f"{chapter.slug}-gradescope.zip"
    source = chapter.source.read_bytes()
    solved = run_gradescope(zip_path, tmp_path, "solution", chapter.source.name, source,
                            Path(sys.prefix))
    assert solved["extra_data"]["runner"] == "fallback"
    assert total_score(solved) == solved["extra_data"]["max_total"], solved["tests"]
    nb = nbformat.reads(source.decode(), as_version=4)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "lora_forward":
            cell.source = memory.NAIVE["fine_tuning.lora_forward"]
    naive = run_gradescope(zip_path, tmp_path, "naive", chapter.source.name,
                           nbformat.writes(nb).encode(), Path(sys.prefix))
    lora = next(t for t in naive["tests"] if t["name"] == "lora_forward")
    assert lora["score"] == 0 and "more memory than" in lora["output"], lora
    assert total_score(naive) == total_score(solved) - lora["max_score"]
