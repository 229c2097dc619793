"""course_lib is a normal package: it installs with `pip install .` and from a git URL, and its
metadata gives ranges (never a torch pin) so that Colab's own torch is accepted."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.conftest import ROOT

pytestmark = pytest.mark.xdist_group("packaging")


def _requirements() -> dict[str, Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {Requirement(r).name: Requirement(r) for r in project["dependencies"]}


def test_torch_is_a_range_that_accepts_colab_and_this_machine() -> None:
    torch_req = _requirements()["torch"]
    assert not any(spec.operator in ("==", "===") for spec in torch_req.specifier)
    # the floor is the oldest torch a test runs: Colab's 2.11.0 (tests/test_colab_runtime.py)
    for version in ("2.11.0", "2.13.0", "2.20.0"):
        assert torch_req.specifier.contains(version), version
    assert not torch_req.specifier.contains("2.10.0"), "a torch no test runs is not admitted"


def test_wheel_contains_the_library_and_its_exercises(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "-w", str(tmp_path), str(ROOT)], check=True)
    (wheel,) = tmp_path.glob("course_lib-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for module in ROOT.glob("course_lib/**/*.py"):
        assert module.relative_to(ROOT).as_posix() in names, module
    assert not any(n.startswith(("tests/", "autograder/", "solutions/")) for n in names)


def test_installs_from_a_git_url(tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-build-isolation", "--target", str(target),
                    f"course-lib @ git+file://{ROOT}"], check=True)
    code = "import course_lib, course_lib.grading; print(course_lib.__file__)"
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(str(target))


def test_docstring_examples_run_and_none_is_skipped() -> None:
    """`pytest` collects course_lib's doctests (pyproject: --doctest-modules); none is skipped."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "course_lib" in config["testpaths"] and "--doctest-modules" in config["addopts"]
    skipped = [str(p.relative_to(ROOT)) for p in (ROOT / "course_lib").rglob("*.py")
               if "doctest: +SKIP" in p.read_text(encoding="utf-8")]
    assert not skipped, f"skipped docstring examples in {skipped}"
    examples = sum(p.read_text(encoding="utf-8").count(">>> ")
                   for p in (ROOT / "course_lib").rglob("*.py"))
    assert examples >= 100, f"only {examples} docstring examples"
