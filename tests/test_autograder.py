"""Unit tests of the grading pipeline's pieces: mapping, validation, rebuild, stripping, judge."""

from __future__ import annotations

import json
import os
from pathlib import Path

import nbformat
import numpy as np
import pytest

from autograder.chapter_spec import load_chapter_spec
from autograder.ingest import InvalidSubmission, discover, load_notebook, read_roster
from autograder.rebuild import helper_statements, plan_submission
from autograder.strip import strip_source
from coursebook.chapters import REPO
from tests.adversarial.chapters import FIXTURE

FIXTURES = REPO / "tests" / "fixtures"


@pytest.fixture(scope="module")
def spec():
    return load_chapter_spec(FIXTURE.slug, FIXTURE.exercises, FIXTURE.source, None)


def test_spec_reads_exercises_points_and_hidden_calls(spec) -> None:
    assert [e.exercise_id for e in spec.exercises] == ["fixture.masked_softmax",
                                                       "fixture.attention"]
    assert [e.points for e in spec.exercises] == [2.0, 3.0]
    assert spec.max_total == 5.0
    assert "grading.check" in spec.exercises[0].hidden_test
    assert "grading.check" not in spec.exercises[0].visible_test
    assert "seed_everything(0)" in spec.setup[0]
    assert spec.setup[1] == "from course_lib import attention\n"  # what the demo cell imports


def test_mapping_folders_flat_names_roster_and_duplicates(tmp_path: Path) -> None:
    (tmp_path / "alice").mkdir()
    (tmp_path / "alice" / "Copy of seq2seq.ipynb").write_text("{}")
    (tmp_path / "bob_123_seq2seq.ipynb").write_text("{}")
    (tmp_path / "seq2seq (1).ipynb").write_text("{}")
    (tmp_path / "Copy of seq2seq.ipynb").write_text("{}")
    os.utime(tmp_path / "alice" / "Copy of seq2seq.ipynb", (1e9, 1e9))
    (tmp_path / "alice" / "seq2seq.ipynb").write_text("{}")
    files = {f.rel: f for f in discover(tmp_path, "seq2seq", None)}
    assert files["alice/seq2seq.ipynb"].student == "alice"
    assert files["alice/Copy of seq2seq.ipynb"].student is None
    assert "superseded" in files["alice/Copy of seq2seq.ipynb"].problem
    assert files["bob_123_seq2seq.ipynb"].student == "bob"
    assert files["seq2seq (1).ipynb"].student is None and files["seq2seq (1).ipynb"].problem
    assert files["Copy of seq2seq.ipynb"].student is None
    roster = tmp_path / "roster.csv"
    roster.write_text("student_id,name,email\n"
                      "s001,Bob Stone,bob@uni.edu\n"
                      "s002,Ann Lee,ann@uni.edu\n")
    r = read_roster(roster)
    files = {f.rel: f for f in discover(tmp_path, "seq2seq", r)}
    assert files["bob_123_seq2seq.ipynb"].student == "s001"
    assert files["alice/seq2seq.ipynb"].student is None  # alice is not on the roster


def test_validation_reasons(tmp_path: Path) -> None:
    empty = tmp_path / "e.ipynb"
    empty.write_bytes(b"")
    with pytest.raises(InvalidSubmission, match="empty"):
        load_notebook(empty)
    bad = tmp_path / "b.ipynb"
    bad.write_text('{"cells": [')
    with pytest.raises(InvalidSubmission, match="not valid JSON"):
        load_notebook(bad)
    other = tmp_path / "o.ipynb"
    other.write_text('{"a": 1}')
    with pytest.raises(InvalidSubmission, match="not a Jupyter notebook"):
        load_notebook(other)
    big = tmp_path / "big.ipynb"
    big.write_bytes(b" " * 2048)
    with pytest.raises(InvalidSubmission, match="limit"):
        load_notebook(big, max_bytes=1024)
    v3 = tmp_path / "v3.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x = 1")])
    v3.write_text(nbformat.writes(nbformat.convert(nb, 3), version=3))
    loaded, notes, _ = load_notebook(v3)
    assert loaded.nbformat == 4 and loaded.cells[0].source == "x = 1"
    assert "upgraded" in notes[0]


def test_helper_statements_keep_defs_imports_constants_only() -> None:
    src = "import math\nEPS = 1e-9\nmodel = train(100)\n@dec\ndef f(x):\n    return x\nprint(1)\n"
    assert helper_statements(src) == "import math\nEPS = 1e-9\n@dec\ndef f(x):\n    return x"
    assert helper_statements("def broken(:\n") == ""


def test_plan_matches_by_def_line_when_metadata_is_gone(spec) -> None:
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("import numpy as np\nresult = np.zeros(3)"),
        nbformat.v4.new_code_cell("def masked_softmax(scores, mask=None):\n    return scores"),
        nbformat.v4.new_markdown_cell("text"),
    ])
    plan = plan_submission(spec, nb)
    assert "fixture.attention" in plan.missing
    cells = plan.groups["fixture.masked_softmax"]
    assert [c.role for c in cells] == ["helper", "solution"]
    assert cells[0].source == "import numpy as np"
    assert any("def masked_softmax(" in n for n in plan.exercise_notes["fixture.masked_softmax"])


def test_strip_removes_bodies_keeps_docstrings_and_other_functions() -> None:
    src = ('def ref(x):\n    """Doc."""\n    return x + 1\n\n'
           'def other(x):\n    return ref(x)\n\n'
           'class M:\n    def forward(self, x):\n        return x\n')
    out, done = strip_source(src, {"ref", "M"})
    ns: dict = {}
    exec(out, ns)
    assert ns["ref"].__doc__ == "Doc."
    with pytest.raises(RuntimeError, match="not available while grading"):
        ns["ref"](1)
    with pytest.raises(RuntimeError):
        ns["M"]().forward(1)
    assert sorted(done) == ["M.forward", "ref"]
    assert "return x + 1" not in out


def test_judge_rejects_oversized_or_non_array_records(tmp_path: Path) -> None:
    from autograder.judge import load_record_safely
    from course_lib import grading

    good = tmp_path / "good.npz"
    grading.save_record(good, output=np.ones(3))
    assert np.array_equal(load_record_safely(good)["output"], np.ones(3))
    import zipfile

    bad = tmp_path / "bad.npz"
    with zipfile.ZipFile(bad, "w") as z:
        z.writestr("__meta__.npy", b"x")
        z.writestr("payload.pkl", b"x")
    with pytest.raises(ValueError, match="other than arrays"):
        load_record_safely(bad)


def test_lms_zip_is_extracted_safely(tmp_path: Path) -> None:
    import zipfile

    from autograder.ingest import extract_zip

    z = tmp_path / "export.zip"
    with zipfile.ZipFile(z, "w") as f:
        f.writestr("export/alice/seq2seq.ipynb", "{}")
        f.writestr("export/bob/Copy of seq2seq.ipynb", "{}")
        f.writestr("../evil.ipynb", "{}")
        f.writestr("/abs/evil2.ipynb", "{}")
    root = extract_zip(z, tmp_path / "x")
    assert root == tmp_path / "x" / "export"
    assert not (tmp_path / "evil.ipynb").exists()
    files = {f.rel: f.student for f in discover(root, "seq2seq", None)}
    assert files == {"alice/seq2seq.ipynb": "alice", "bob/Copy of seq2seq.ipynb": "bob"}


def test_committed_colab_fixtures_match_their_generator() -> None:
    """tests/fixtures/colab/*.ipynb are what transform.py makes of the fixture release."""
    from tests.fixtures.colab.transform import colab_transform

    colab = FIXTURES / "colab"
    for name in ("fixture-solution.ipynb", "fixture-blank.ipynb"):
        nb = json.loads((colab / name).read_text())
        assert nb["nbformat_minor"] == 0 and nb["metadata"]["accelerator"] == "GPU"
        assert "colab" in nb["metadata"]
        assert all("id" not in c and "nbgrader" not in c["metadata"] for c in nb["cells"])
        transformed = colab_transform(json.dumps(nb).encode(), "fixture.ipynb")
        assert transformed == (colab / name).read_bytes()


def test_sandbox_mounts_tmp_before_binding_an_interpreter_that_lives_under_tmp(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A CI machine whose Python installation lives under /tmp: it must be bound on top of the
    sandbox's fresh /tmp, not hidden by it (the kernel then fails to start with status 127); the
    virtualenv is not bound at all (the sandbox's packages are the allow-list's, at /opt/site)."""
    import sys

    from autograder.run import sandbox

    monkeypatch.setattr(sandbox, "bwrap_path", lambda: "/usr/bin/bwrap")
    monkeypatch.setattr(sys, "base_prefix", "/tmp/ci-python")
    monkeypatch.setattr(sys, "prefix", "/tmp/ci-checkout/.venv")
    args = sandbox.bwrap_command(tmp_path, 0, sandbox.Limits(), 3, 4)
    tmpfs = args.index("--tmpfs")
    assert args[tmpfs + 1] == "/tmp"
    binds = [i for i, a in enumerate(args) if a == "--ro-bind" and args[i + 2] == sys.base_prefix]
    assert binds and binds[0] > tmpfs
    assert not any(a.startswith(sys.prefix) for a in args)
    assert any(a.startswith("/opt/site/torch") for a in args)


def test_judge_computes_a_reference_without_deadlock_from_several_threads() -> None:
    """Regression: ``expected`` called ``cases`` while holding the same (non-reentrant) lock, so
    the first reference computed hung every grading run."""
    import threading

    from autograder.judge import Judge

    judge = Judge()
    got: list[object] = []

    def expect() -> None:
        got.append(judge.expected("seq2seq.masked_softmax", 0))

    threads = [threading.Thread(target=expect, daemon=True) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "Judge.expected deadlocked"
    assert len(got) == 3 and all(g is got[0] for g in got)  # computed once, shared


# --------------------------------------------------------------------------------------------
# Second round (issue 11): bounded parsing, links never followed, one file never stops a batch
# --------------------------------------------------------------------------------------------


def _notebook_bytes(*sources: str) -> bytes:
    return nbformat.writes(nbformat.v4.new_notebook(
        cells=[nbformat.v4.new_code_cell(s) for s in sources])).encode()


def test_links_and_pipes_are_reported_and_never_read(tmp_path: Path) -> None:
    secret = tmp_path / "secret.ipynb"
    secret.write_bytes(_notebook_bytes("SECRET = 1"))
    subs = tmp_path / "subs"
    for student in ("link", "both", "pipe", "folder-link-owner"):
        (subs / student).mkdir(parents=True)
    os.symlink(secret, subs / "link" / "seq2seq.ipynb")
    os.symlink(secret, subs / "both" / "a_link.ipynb")
    (subs / "both" / "seq2seq.ipynb").write_bytes(_notebook_bytes("x = 1"))
    os.utime(subs / "both" / "seq2seq.ipynb", (1e9, 1e9))  # older than the link: still chosen
    os.mkfifo(subs / "pipe" / "seq2seq.ipynb")
    os.symlink(tmp_path, subs / "folder-link")  # a link to a folder: not entered
    os.symlink(secret, subs / "notes.txt")
    files = {f.rel: f for f in discover(subs, "seq2seq", None)}
    assert files["link/seq2seq.ipynb"].student == "link"
    assert "symbolic link" in files["link/seq2seq.ipynb"].irregular
    assert files["both/seq2seq.ipynb"].student == "both"
    assert files["both/a_link.ipynb"].student is None
    assert "symbolic link" in files["both/a_link.ipynb"].problem
    assert "regular file" in files["pipe/seq2seq.ipynb"].irregular
    assert "not followed" in files["folder-link"].problem
    assert "not followed" in files["notes.txt"].problem
    assert not any(rel.startswith("folder-link/") for rel in files)
    with pytest.raises(InvalidSubmission, match="symbolic link"):
        load_notebook(subs / "link" / "seq2seq.ipynb")
    with pytest.raises(InvalidSubmission, match="not a regular file"):
        load_notebook(subs / "pipe" / "seq2seq.ipynb")  # returns at once, never blocks


def test_zip_entries_that_are_links_are_reported_not_extracted(tmp_path: Path) -> None:
    import stat
    import zipfile

    from autograder.ingest import extract_zip

    z = tmp_path / "export.zip"
    with zipfile.ZipFile(z, "w") as f:
        f.writestr("export/alice/seq2seq.ipynb", _notebook_bytes("x = 1"))
        link = zipfile.ZipInfo("export/mallory/seq2seq.ipynb")
        link.create_system = 3
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        f.writestr(link, "/work/main/solutions/01-seq2seq/seq2seq.ipynb")
        f.writestr("export/../../escape.ipynb", "{}")
        f.writestr("export/bob/big.ipynb", b" " * 2048)
    skipped: list = []
    root = extract_zip(z, tmp_path / "x", skipped)
    assert not (root / "mallory").exists() and not (tmp_path / "escape.ipynb").exists()
    assert {s.name: s.link for s in skipped} == {"mallory/seq2seq.ipynb": True,
                                                "../../escape.ipynb": False}
    files = {f.rel: f for f in discover(root, "seq2seq", None, skipped)}
    assert files["mallory/seq2seq.ipynb"].student == "mallory"
    assert files["mallory/seq2seq.ipynb"].path is None
    assert "symbolic link" in files["mallory/seq2seq.ipynb"].irregular
    assert "outside" in files["../../escape.ipynb"].problem


def test_zip_entries_are_extracted_only_up_to_the_size_cap(tmp_path: Path, monkeypatch) -> None:
    import zipfile

    from autograder.ingest import unzip

    monkeypatch.setattr(unzip, "MAX_FILE_BYTES", 1000)
    z = tmp_path / "export.zip"
    with zipfile.ZipFile(z, "w", compression=zipfile.ZIP_DEFLATED) as f:
        f.writestr("bob/seq2seq.ipynb", b" " * 1_000_000)
    root = unzip.extract_zip(z, tmp_path / "x")
    assert (root / "bob" / "seq2seq.ipynb").stat().st_size == 1001
    with pytest.raises(InvalidSubmission, match="larger than"):
        load_notebook(root / "bob" / "seq2seq.ipynb", max_bytes=1000)


def test_discovery_is_bounded_and_names_are_printable(tmp_path: Path, monkeypatch) -> None:
    from autograder.ingest import walk

    deep = tmp_path / "a" / "b" / "c" / "d" / "e"
    deep.mkdir(parents=True)
    (deep / "x.ipynb").write_text("{}")
    odd = tmp_path / os.fsdecode(b"caf\xe9")
    odd.mkdir()
    (odd / "seq2seq.ipynb").write_text("{}")
    files = {f.rel: f for f in discover(tmp_path, "seq2seq", None)}
    assert "a/b/c/d/" in files and "levels deep" in files["a/b/c/d/"].problem
    (student,) = [f.student for f in files.values() if f.student]
    assert student == "caf\\udce9"  # writable as UTF-8 everywhere
    monkeypatch.setattr(walk, "MAX_ENTRIES", 3)
    for i in range(5):
        (tmp_path / f"s{i}.ipynb").write_text("{}")
    files = discover(tmp_path, "seq2seq", None)
    assert any("more than 3 entries" in f.problem for f in files)


def test_deeply_nested_json_is_refused_before_parsing(tmp_path: Path) -> None:
    from autograder.ingest import json_depth

    deep = tmp_path / "deep.ipynb"
    deep.write_bytes(b'{"cells": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    with pytest.raises(InvalidSubmission, match="100001 levels deep"):
        load_notebook(deep)
    assert json_depth(b'{"a": "[[[[{{{{", "b": [[1]]}') == 3  # brackets in strings do not count
    assert json_depth(b'{"a": "\\"[[[["}') == 1


def test_schema_validation_names_the_bad_cell(tmp_path: Path) -> None:
    nb = json.loads(_notebook_bytes("x = 1", "y = 2"))
    nb["cells"].insert(1, {"cell_type": "markdown", "metadata": {}, "source": {"a": 1},
                           "id": "bad"})
    path = tmp_path / "bad.ipynb"
    path.write_text(json.dumps(nb))
    with pytest.raises(InvalidSubmission, match=r"^cell 2 \(markdown cell\).*source must be text"):
        load_notebook(path)
    nb["cells"][1]["source"] = "fine"
    nb["cells"][2]["outputs"] = [{"output_type": "nonsense"}]
    path.write_text(json.dumps(nb))
    with pytest.raises(InvalidSubmission, match=r"^cell 3 \(code cell\).*outputs"):
        load_notebook(path)
    path.write_text(json.dumps({**nb, "nbformat": 7}))
    with pytest.raises(InvalidSubmission, match="format 7"):
        load_notebook(path)


@pytest.mark.parametrize("minor,ids", [(4, True), (4, False), (5, False), (99, True)])
def test_what_jupyter_opens_is_accepted(tmp_path: Path, minor: int, ids: bool) -> None:
    """Cell ids with nbformat_minor 4 (some editors), none with 4.5, a future minor: all read."""
    nb = json.loads(_notebook_bytes("x = 1"))
    nb["nbformat_minor"] = minor
    if not ids:
        del nb["cells"][0]["id"]
    path = tmp_path / "nb.ipynb"
    path.write_text(json.dumps(nb))
    loaded, _, _ = load_notebook(path)
    assert loaded.cells[0].source == "x = 1"


def test_feedback_names_are_distinct_for_distinct_students() -> None:
    from autograder.results import safe_name

    names = [safe_name(s) for s in ("a b", "a_b", "a/b", "..", "s1001")]
    assert len(set(names)) == 5 and names[-1] == "s1001"
    assert all("/" not in n and n not in (".", "..") for n in names)


def test_a_hostile_record_fails_its_case_only(tmp_path: Path) -> None:
    """A record whose JSON nests deeper than the parser goes, or whose output is absurd."""
    import zipfile

    from autograder.judge import Judge
    from course_lib import grading

    judge = Judge()
    folder = tmp_path / "seq2seq.masked_softmax"
    folder.mkdir()
    for k in range(len(judge.cases("seq2seq.masked_softmax"))):
        path = grading.record_path(tmp_path, "seq2seq.masked_softmax", k)
        with zipfile.ZipFile(path, "w") as z:
            buf = __import__("io").BytesIO()
            np.save(buf, np.array("[" * 100_000 + "]" * 100_000))
            z.writestr("__meta__.npy", buf.getvalue())
    verdict = judge.judge("seq2seq.masked_softmax", tmp_path, None)
    assert not verdict.passed and verdict.cases_passed == 0
    assert all("unreadable result" in m or "could not be judged" in m for m in verdict.messages)


def test_summary_lists_common_failures_and_every_ungraded_file(tmp_path: Path, spec) -> None:
    from autograder.report.summary import failure_kind, write_summary
    from autograder.results import ExerciseOutcome, FileRow, GradeResult

    def result(sid, status, msgs):
        other = "passed" if status == "graded" else "not graded"
        r = GradeResult(sid, "", "", "", "hardened", status=status)
        r.exercises = {
            "fixture.masked_softmax": ExerciseOutcome("fixture.masked_softmax", 0.0, 2.0,
                                                      "failed", msgs),
            "fixture.attention": ExerciseOutcome("fixture.attention", 3.0, 3.0, other)}
        return r

    results = [result("a", "graded",
                      ["case 1 (float32): output: largest error 0.5 at index (0, 1)",
                       "case 2 (float64): output: largest error 0.25 at index (1, 1)"]),
               result("b", "graded", ["case 3 (x): output: largest error 7 at index (2, 0)"]),
               result("c", "graded", ["rows do not sum to one\n    (output: largest error 1)"]),
               result("d", "could not grade", ["the file is empty"])]
    rows = [FileRow("d/x.ipynb", "d", status="could not grade",
                    reason="the file is empty (0 bytes)"),
            FileRow("<b>.ipynb", "", status="not mapped", reason="names nobody")]
    write_summary(tmp_path / "summary.html", spec, results, rows)
    page = (tmp_path / "summary.html").read_text()
    assert failure_kind(results[0].exercises["fixture.masked_softmax"].messages[0]) == \
        "output: largest error # at index (#, #)"
    assert "<td>2</td><td>output: largest error # at index (#, #)</td>" in page  # a and b
    assert "<td>1</td><td>rows do not sum to one</td>" in page
    assert "<td>0 / 4</td>" in page and "<td>3 / 4</td>" in page  # pass counts per exercise
    assert "the file is empty (0 bytes)" in page and "&lt;b&gt;.ipynb" in page
    assert "Files that could not be graded (2)" in page
