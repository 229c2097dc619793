"""Unit tests of the grading pipeline's pieces: mapping, validation, rebuild, stripping, judge."""

from __future__ import annotations

import json
import os
from pathlib import Path

import nbformat
import numpy as np
import pytest

from autograder.chapter_spec import load_chapter_spec
from autograder.paths import REPO, Chapter
from autograder.rebuild import helper_statements, plan_submission
from autograder.strip import strip_source
from autograder.submissions import InvalidSubmission, discover, load_notebook, read_roster

FIXTURES = REPO / "tests" / "fixtures"


@pytest.fixture(scope="module")
def spec():
    ch = Chapter("00-fixture", FIXTURES / "solutions", FIXTURES / "no-release")
    return load_chapter_spec(ch.name, ch.exercise_chapter, ch.source, None)


def test_spec_reads_exercises_points_and_hidden_calls(spec) -> None:
    assert [e.exercise_id for e in spec.exercises] == ["fixture.masked_softmax", "fixture.attention"]
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
    roster.write_text("student_id,name,email\ns001,Bob Stone,bob@uni.edu\ns002,Ann Lee,ann@uni.edu\n")
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
           'def other(x):\n    return ref(x)\n\nclass M:\n    def forward(self, x):\n        return x\n')
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

    from autograder.submissions import extract_zip

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
        assert colab_transform(json.dumps(nb).encode(), "fixture.ipynb") == (colab / name).read_bytes()


def test_references_used_to_build_case_inputs_are_not_stripped() -> None:
    from course_lib.grading import Case, Exercise

    from autograder.strip import needed_by_cases

    def ref_a(n: int) -> list[int]:
        return list(range(n))

    def ref_b(n: int) -> int:
        return n

    ex_a = Exercise("t.a", ref_a, lambda: [Case("c", lambda: {"n": 2})], 1)
    ex_b = Exercise("t.b", ref_b, lambda: [Case("c", lambda: {"n": len(ref_a(3))})], 1)
    assert needed_by_cases([ex_a, ex_b], [ref_a, ref_b]) == [ref_a]


def test_sandbox_mounts_tmp_before_binding_a_virtualenv_that_lives_under_tmp(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A CI checkout under /tmp: its virtualenv must be bound on top of the sandbox's fresh /tmp,
    not hidden by it (the kernel then fails to start with status 127)."""
    import sys

    from autograder import sandbox

    monkeypatch.setattr(sandbox, "bwrap_path", lambda: "/usr/bin/bwrap")
    monkeypatch.setattr(sys, "prefix", "/tmp/ci-checkout/.venv")
    args = sandbox.bwrap_command(tmp_path, 0, sandbox.Limits(), 3, 4)
    tmpfs = args.index("--tmpfs")
    assert args[tmpfs + 1] == "/tmp"
    binds = [i for i, a in enumerate(args) if a == "--ro-bind" and args[i + 2] == sys.prefix]
    assert binds and binds[0] > tmpfs


def test_judge_computes_a_reference_without_deadlock_from_several_threads() -> None:
    """Regression: ``expected`` called ``cases`` while holding the same (non-reentrant) lock, so
    the first reference computed hung every grading run."""
    import threading

    from autograder.judge import Judge

    judge = Judge()
    got: list[object] = []
    threads = [threading.Thread(target=lambda: got.append(judge.expected("seq2seq.masked_softmax", 0)),
                                daemon=True) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not any(t.is_alive() for t in threads), "Judge.expected deadlocked"
    assert len(got) == 3 and all(g is got[0] for g in got)  # computed once, shared
