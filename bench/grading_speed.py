"""Benchmark: stock ``nbgrader autograde`` against ``python -m autograder grade`` (hardened).

Grades the same 20 mixed submissions of chapter 1 (solutions, blanks, partial solutions, Colab
copies, stripped metadata, helper cells, a reference call; the fixture chapter when chapter 1
does not exist yet) with:

* stock nbgrader: the ``nbgrader autograde`` command line, one call per student as nbgrader's
  docs show, in full mode (the chapter's demos train for real), 600 s cell timeout;
* the hardened engine: one ``python -m autograder grade`` call, one worker per core.

Stock nbgrader needs about a chapter's full run per submission, so ``--stock-sample N`` times N
of the 20 with stock nbgrader and extrapolates linearly to 20 (printed as an estimate).

Run: ``.venv/bin/python bench/grading_speed.py --stock-sample 2`` (a script, not a test);
``--hardened-only`` times the hardened engine alone (to compare two versions of the grader).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from autograder.extra_exercises import register_extra_exercises  # noqa: E402
from coursebook.chapters import Chapter  # noqa: E402
from tests.adversarial.chapters import FIXTURES, first_chapter, released_copy  # noqa: E402
from tests.adversarial.generate import build_suite, load, write_suite  # noqa: E402

MIX = ["solution", "blank", "partial", "calls-reference", "stripped-metadata", "colab",
       "helper-cells", "colab-blank", "deleted-tests", "nbformat-3"]


def pick_chapter(tmp: Path) -> tuple[Chapter, dict[str, str]]:
    """Chapter 1 (else the fixture chapter) released under ``tmp``, and the grading env."""
    env = dict(os.environ)
    original = first_chapter()
    if original.number == 0:
        env["AUTOGRADER_EXTRA_EXERCISES"] = str(FIXTURES / "exercises")
        os.environ["AUTOGRADER_EXTRA_EXERCISES"] = env["AUTOGRADER_EXTRA_EXERCISES"]
    return released_copy(original, tmp / "course"), env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stock-sample", type=int, default=20,
                    help="grade only N of the 20 with stock nbgrader and extrapolate")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--hardened-only", action="store_true",
                    help="time the hardened engine only (to compare two versions of it)")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="grading-speed-"))
    chapter, env = pick_chapter(tmp)
    register_extra_exercises()
    spec = load(chapter)
    base = {s.student: s for s in build_suite(chapter, spec, secret_paths=[], port=9)}
    subs = []
    for i in range(args.n):
        s = base[MIX[i % len(MIX)]]
        s = type(s)(**{**s.__dict__, "student": f"s{i:02d}-{s.student}"})
        subs.append(s)
    write_suite(subs, tmp / "subs")
    py = sys.executable
    bindir = str(Path(py).parent)

    # --- hardened
    t0 = time.time()
    cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    hard_cmd = [py, "-m", "autograder", "grade", chapter.slug, str(tmp / "subs"), "--out",
                str(tmp / "out-hardened"), "--root", str(chapter.root), "--no-progress", "--force"]
    subprocess.run(hard_cmd, cwd=REPO, env=env, check=True, capture_output=True)
    hard = time.time() - t0
    cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    if args.hardened_only:
        # CPU seconds (the grader and every sandbox) compare two versions on a busy machine too.
        print(f"hardened python -m autograder grade: {args.n} submissions of {chapter.slug} in "
              f"{hard:.1f} s wall, {cpu:.1f} CPU s ({hard / args.n:.2f} s and "
              f"{cpu / args.n:.2f} CPU s each; reproduce: .venv/bin/python "
              "bench/grading_speed.py --hardened-only)")
        return 0

    # --- stock nbgrader CLI, full mode
    course = tmp / "stock"
    (course / "source" / chapter.slug).mkdir(parents=True)
    shutil.copyfile(chapter.source, course / "source" / chapter.slug / f"{chapter.stem}.ipynb")
    (course / "nbgrader_config.py").write_text(
        f"c = get_config()\nc.CourseDirectory.root = {str(course)!r}\nc.Execute.timeout = 600\n")
    stock_env = {k: v for k, v in env.items() if k != "COURSE_LIB_QUICK"}
    stock_env["PATH"] = bindir + os.pathsep + stock_env.get("PATH", "")
    if env.get("AUTOGRADER_EXTRA_EXERCISES"):
        import course_lib

        lib = tmp / "lib"
        shutil.copytree(Path(course_lib.__file__).parent, lib / "course_lib")
        for f in Path(env["AUTOGRADER_EXTRA_EXERCISES"]).glob("*.py"):
            shutil.copyfile(f, lib / "course_lib" / "exercises" / f.name)
        stock_env["PYTHONPATH"] = str(lib)
    nbg = [py, "-m", "nbgrader"]
    subprocess.run(nbg + ["generate_assignment", chapter.slug, "--force"], cwd=course,
                   env=stock_env, check=True, capture_output=True)
    sample = subs[: max(1, min(args.stock_sample, len(subs)))]
    t0 = time.time()
    for s in sample:
        d = course / "submitted" / s.student / chapter.slug
        d.mkdir(parents=True)
        (d / f"{chapter.stem}.ipynb").write_bytes(s.content)
        subprocess.run(nbg + ["autograde", chapter.slug, "--student", s.student, "--force"],
                       cwd=course, env=stock_env, capture_output=True)
    stock_sample = time.time() - t0
    import csv
    import sqlite3

    db = sqlite3.connect(course / "gradebook.db")
    stock_totals = {sid: total for sid, total in db.execute(
        "select student.id, sum(grade.auto_score) from grade join submitted_notebook on "
        "grade.notebook_id = submitted_notebook.id join submitted_assignment on "
        "submitted_notebook.assignment_id = submitted_assignment.id join student on "
        "submitted_assignment.student_id = student.id group by student.id")}
    with open(tmp / "out-hardened" / "grades.csv", newline="") as f:
        hard_totals = {row["student_id"]: float(row["total"]) for row in csv.DictReader(f)}
    agree = all(abs((stock_totals.get(s.student) or 0.0) - hard_totals[s.student]) < 1e-9
                for s in sample)
    stock = stock_sample * len(subs) / len(sample)
    est = "" if len(sample) == len(subs) else (
        f" (ESTIMATE: {len(sample)} of {len(subs)} timed, {stock_sample:.1f} s, extrapolated)")
    print(f"chapter {chapter.slug}, {len(subs)} submissions, {os.cpu_count()} cores")
    print(f"stock nbgrader autograde (CLI, full mode): {stock:.1f} s{est}, "
          f"{60 * len(subs) / stock:.1f} submissions/minute")
    print(f"hardened python -m autograder grade:       {hard:.1f} s, "
          f"{60 * len(subs) / hard:.1f} submissions/minute")
    print(f"speed-up: {stock / hard:.1f}x")
    print("totals of the stock-timed submissions, stock vs hardened: " + ", ".join(
        f"{s.student} {stock_totals.get(s.student)} vs {hard_totals[s.student]:g}" for s in sample)
        + (" (agree)" if agree else " (DISAGREE)"))
    print(f"reproduce: {py} bench/grading_speed.py --stock-sample {args.stock_sample}")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
