"""`make test` shares expensive fixtures through xdist groups: the check that they are shared.

`pytest -n 2 --dist loadgroup` must send every test of an ``xdist_group`` to one worker, so that a
session fixture of the group (the book build, one grading run per chapter) is built once. With
pytest 9 and pytest-xdist 3.8 the groups are silently split and the book is built twice, by two
workers at once into the same folder (requirements-dev.txt pins pytest 8 for that reason).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CONFTEST = '''
import os
import pytest


@pytest.fixture(scope="session")
def built():
    with open(os.environ["BUILD_LOG"], "a") as log:
        log.write(f"{os.getpid()}\\n")
'''

MODULE = '''
import pytest

pytestmark = [pytest.mark.xdist_group("shared")]


@pytest.mark.parametrize("n", range(4))
def test_uses_the_shared_fixture(built, n):
    pass


@pytest.mark.parametrize("n", range(4))
def test_{name}_ungrouped(n):
    pass
'''


def test_a_group_runs_on_one_worker_and_builds_its_fixture_once(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    for name in ("a", "b"):
        (tmp_path / f"test_{name}.py").write_text(MODULE.format(name=name))
    log = tmp_path / "built.log"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "2", "--dist", "loadgroup",
                           "-p", "no:cacheprovider", "-o", "addopts=", str(tmp_path)],
                          cwd=tmp_path, env={"BUILD_LOG": str(log), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "16 passed" in done.stdout
    builders = log.read_text().split()
    assert len(builders) == 1, f"the grouped session fixture was built {len(builders)} times"
