"""Every chapter's Colab copy run top to bottom on the runtime Colab gives students.

Colab's runtime (googlecolab/backend-info, since 2026-08-25): Python 3.13 with torch 2.11.0,
numpy 2.1.3, matplotlib 3.10.0, scipy 1.16.3, IPython 7.34.0 and ipykernel 6.17.1. The test
builds that runtime once per machine as a virtualenv of the machine's Python 3.13 (pyenv's, or
``COLAB_PYTHON``) under ``<cache>/colab-runtime/<key>/``, ``<key>`` hashing the interpreter's
version and the pins (a stamp file marks it complete, so later runs reuse it). Its wheels, about 3
GB with torch's CUDA libraries, are downloaded from the package index into ``<cache>/colab-wheels/``
when missing and installed from there (``--no-index --find-links``). ``<cache>`` is the user's cache
folder, ``$XDG_CACHE_HOME/attention-course`` (``~/.cache/attention-course``), outside the clone, so
a fresh clone on the same machine reuses the runtime as pip reuses its cache; ``COURSE_COLAB_CACHE``
names another folder.

Nothing else is preinstalled: ``course_lib``'s other dependencies (tqdm, regex) come in only
through its own declaration in pyproject.toml, so a dependency it forgets to declare fails here.
Each test session layers a throwaway virtualenv over the cached runtime (its site-packages added
by a ``.pth`` file): the setup cell's ``pip install`` of course_lib, from a ``git+file://`` clone of
this working tree (``COURSE_LIB_URL``), lands there, and the cached runtime stays as Colab ships.

Per chapter, one module-scoped execution of each copy, shared by the assertions below:

* blank (as released): no cell raises, the setup cell reports Colab's torch, every test cell says
  "not attempted yet";
* solved (solution cells filled in from ``solutions/``): no cell raises, every visible test passes.

Both run in quick mode (``COURSE_LIB_QUICK=1``), on CPU.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from tests.adversarial.generate import solved_release
from tests.conftest import (
    ROOT,
    cell_errors,
    chapter_slugs,
    nbgrader_meta,
    release_notebook,
    source_notebook,
)

SLUGS = chapter_slugs()
#: Colab's runtime: the interpreter's minor version and the packages the chapters rely on.
COLAB_PYTHON = "3.13"
COLAB_PINS = ("torch==2.11.0", "numpy==2.1.3", "matplotlib==3.10.0", "scipy==1.16.3",
              "ipython==7.34.0", "ipykernel==6.17.1")
#: Where the wheels and the built runtime are kept: ``COURSE_COLAB_CACHE``, else the user's cache
#: folder (outside the clone: fresh clones on one machine share them).
USER_CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
CACHE = Path(os.environ.get("COURSE_COLAB_CACHE") or USER_CACHE / "attention-course")
WHEELS = CACHE / "colab-wheels"
RUNTIMES = CACHE / "colab-runtime"
KERNEL = "colab-runtime"

pytestmark = [pytest.mark.slow]


def colab_notebook(slug: str) -> Path:
    """The Colab copy of chapter ``slug`` (what the launch button opens)."""
    return ROOT / "colab" / slug / release_notebook(slug).name


# --------------------------------------------------------------------------------------------
# The runtime, built once per machine
# --------------------------------------------------------------------------------------------


def find_python(version: str = COLAB_PYTHON) -> Path | None:
    """The machine's Python ``version``: ``COLAB_PYTHON``, else pyenv's newest, else PATH's.

    A candidate counts only if it runs (pyenv's shim for a version not selected does not).
    """
    pyenv = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv")) / "versions"
    installed = sorted(pyenv.glob(f"{version}.*/bin/python"), reverse=True,
                       key=lambda p: [int(x) for x in p.parts[-3].split(".") if x.isdigit()])
    on_path = shutil.which(f"python{version}")
    candidates = [Path(os.environ["COLAB_PYTHON"])] if os.environ.get("COLAB_PYTHON") else \
        [*installed, *([Path(on_path)] if on_path else [])]
    for python in candidates:
        probe = subprocess.run([str(python), "-c", "import sys; print(sys.version_info[:2])"],
                               capture_output=True, text=True)
        wanted = str(tuple(map(int, version.split("."))))
        if probe.returncode == 0 and probe.stdout.strip() == wanted:
            return python
    return None


def runtime_key(python: Path) -> str:
    """What the cached runtime depends on: the interpreter's full version and the pins."""
    version = subprocess.run([str(python), "-c", "import sys; print(sys.version)"],
                             capture_output=True, text=True, check=True).stdout.strip()
    text = "\n".join([version, *COLAB_PINS])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _pip(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m pip ARGS``, quietly, its output captured."""
    return subprocess.run([str(python), "-m", "pip", *args, "-q", "--disable-pip-version-check"],
                          capture_output=True, text=True)


def _install_pins(venv_python: Path, python: Path) -> None:
    """The pins into ``venv_python``, from the wheel folder (downloaded into it when missing)."""
    offline = _pip(venv_python, "install", "--no-index", "--find-links", str(WHEELS), *COLAB_PINS)
    if offline.returncode == 0:
        return
    WHEELS.mkdir(parents=True, exist_ok=True)
    fetched = _pip(python, "download", "--dest", str(WHEELS), *COLAB_PINS)
    assert fetched.returncode == 0, f"downloading Colab's wheels: {fetched.stderr[-3000:]}"
    done = _pip(venv_python, "install", "--no-index", "--find-links", str(WHEELS), *COLAB_PINS)
    assert done.returncode == 0, f"installing Colab's wheels: {done.stderr[-3000:]}"


def cached_runtime(python: Path) -> Path:
    """The virtualenv holding Colab's packages, built once per machine (locked while built)."""
    folder = RUNTIMES / runtime_key(python)
    venv, stamp = folder / "venv", folder / "installed"
    RUNTIMES.mkdir(parents=True, exist_ok=True)
    with open(RUNTIMES / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not stamp.is_file():
            shutil.rmtree(venv, ignore_errors=True)
            subprocess.run([str(python), "-m", "venv", str(venv)], check=True)
            _install_pins(venv / "bin" / "python", python)
            stamp.write_text("\n".join([str(python), *COLAB_PINS]) + "\n")
    return venv


def _site_packages(venv: Path) -> Path:
    """The folder ``venv``'s pip installs pure-Python packages into."""
    out = subprocess.run([str(venv / "bin" / "python"), "-c",
                          "import sysconfig; print(sysconfig.get_path('purelib'))"],
                         capture_output=True, text=True, check=True).stdout.strip()
    return Path(out)


def overlay(runtime: Path, dest: Path) -> Path:
    """A fresh virtualenv that sees ``runtime``'s packages and installs into itself."""
    base_python = Path(os.path.realpath(runtime / "bin" / "python"))
    subprocess.run([str(base_python), "-m", "venv", str(dest)], check=True)
    (_site_packages(dest) / "colab_runtime.pth").write_text(
        f"import site; site.addsitedir({str(_site_packages(runtime))!r})\n")
    return dest / "bin" / "python"


def _clone_of_the_working_tree(dest: Path) -> Path:
    """A git repository holding this working tree's course_lib and packaging (committed there)."""
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(dest)], check=True)
    for name in ("course_lib", "pyproject.toml", "README.md"):
        target = dest / name
        if target.is_dir():
            shutil.rmtree(target)
        src = ROOT / name
        if src.is_dir():
            shutil.copytree(src, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copyfile(src, target)
    git = ["git", "-C", str(dest), "-c", "user.name=test", "-c", "user.email=test@localhost"]
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "working tree"], check=True)
    return dest


class ColabKernel(NamedTuple):
    """A kernel on Colab's runtime: the environment to start it in, and where pip installs."""

    env: dict[str, str]
    site_packages: Path


@pytest.fixture(scope="module")
def colab_kernel(tmp_path_factory: pytest.TempPathFactory) -> ColabKernel:
    """A kernel on Colab's runtime that has no course_lib yet."""
    python = find_python()
    if python is None:
        pytest.fail(f"no Python {COLAB_PYTHON} on this machine (pyenv install {COLAB_PYTHON}, "
                    f"or name one in COLAB_PYTHON)")
    base = tmp_path_factory.mktemp("colab-runtime")
    py = overlay(cached_runtime(python), base / "venv")
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    probe = subprocess.run([str(py), "-c", "import course_lib"], capture_output=True, cwd=base,
                           env=clean)
    assert probe.returncode != 0, "course_lib is already installed in the Colab runtime"
    kernels = base / "kernels"
    subprocess.run([str(py), "-m", "ipykernel", "install", "--prefix", str(kernels),
                    "--name", KERNEL], check=True, capture_output=True)
    repo = _clone_of_the_working_tree(base / "repo")
    env = {"JUPYTER_PATH": str(kernels / "share" / "jupyter"),
           "COURSE_LIB_URL": f"git+{repo.as_uri()}", "COURSE_LIB_QUICK": "1"}
    return ColabKernel(env, _site_packages(base / "venv"))


def run_all(kernel_env: dict[str, str], nb: Any, cwd: Path) -> Any:
    """Run All of ``nb`` in the Colab-runtime kernel, every cell even after an error."""
    import nbclient

    backup = dict(os.environ)
    os.environ.update(kernel_env)
    for var in ("PYTHONPATH", "VIRTUAL_ENV", "NBGRADER_EXECUTION", "COURSE_GRADING_MODE",
                "MPLBACKEND"):
        os.environ.pop(var, None)
    try:
        client = nbclient.NotebookClient(nb, timeout=600, kernel_name=KERNEL, allow_errors=True,
                                         resources={"metadata": {"path": str(cwd)}})
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(backup)
    return nb


# --------------------------------------------------------------------------------------------
# Each chapter, blank and solved: one execution each, several checks
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module", params=[
    pytest.param(slug, marks=pytest.mark.xdist_group(f"colab-{slug}")) for slug in SLUGS])
def ran(request: pytest.FixtureRequest, colab_kernel: ColabKernel,
        tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The chapter's Colab copy executed blank and solved: ``{"slug", "blank", "solved",
    "installed"}``, the last the distributions the setup cell's pip added to the runtime."""
    import nbformat

    slug = request.param
    blank = nbformat.read(colab_notebook(slug), as_version=4)
    solved = solved_release(blank, nbformat.read(source_notebook(slug), as_version=4))
    cwd = tmp_path_factory.mktemp(f"colab-{slug}")
    return {"slug": slug, "blank": run_all(colab_kernel.env, blank, cwd),
            "solved": run_all(colab_kernel.env, solved, cwd),
            "installed": {d.name.split("-")[0].lower().replace("_", "-")
                          for d in colab_kernel.site_packages.glob("*.dist-info")}}


def _text(cell: Any) -> str:
    """What an executed cell printed (its stream outputs)."""
    return "".join(o.get("text", "") for o in cell.get("outputs", []))


def _test_cells(nb: Any) -> list[Any]:
    """The graded test cells of ``nb`` (nbgrader ``grade``)."""
    return [c for c in nb.cells if nbgrader_meta(c).get("grade")]


def test_blank_copy_runs_all_without_an_error(ran: dict[str, Any]) -> None:
    errors = cell_errors(ran["blank"])
    assert errors == {}, f"{ran['slug']}: Run All on the blank Colab copy: {errors}"


def test_setup_cell_installs_course_lib_and_reports_colabs_torch(ran: dict[str, Any]) -> None:
    """The setup cell ran on Colab's torch (not the development one) and named the device."""
    (setup,) = [c for c in ran["blank"].cells if "setup" in c.metadata.get("tags", [])]
    torch_pin = next(p for p in COLAB_PINS if p.startswith("torch=="))
    line = _text(setup)
    assert f"torch {torch_pin.split('==')[1]}" in line and "running on" in line, line


def test_course_lib_takes_colabs_packages_as_they_are(ran: dict[str, Any]) -> None:
    """pip installed course_lib without replacing any of Colab's packages (its ranges admit
    them)."""
    assert "course-lib" in ran["installed"], ran["installed"]
    replaced = ran["installed"] & {p.split("==")[0] for p in COLAB_PINS}
    assert not replaced, f"{ran['slug']}: course_lib's ranges made pip replace {sorted(replaced)}"


def test_blank_test_cells_say_not_attempted_yet(ran: dict[str, Any]) -> None:
    for i, cell in enumerate(_test_cells(ran["blank"])):
        assert "not attempted yet" in _text(cell), \
            f"{ran['slug']}: blank test cell {i} printed {_text(cell)!r}"


def test_solved_copy_runs_all_with_every_visible_test_passing(ran: dict[str, Any]) -> None:
    errors = cell_errors(ran["solved"])
    assert errors == {}, f"{ran['slug']}: Run All with the solutions: {errors}"
    passed = ["visible tests passed" in _text(c) for c in _test_cells(ran["solved"])]
    assert passed and all(passed), \
        f"{ran['slug']}: visible tests passed in {sum(passed)} of {len(passed)} test cells"


def test_the_runtime_is_colabs_and_holds_no_undeclared_package() -> None:
    """The cached runtime has exactly the pinned versions and none of course_lib's other
    dependencies (which only its pyproject.toml declaration may bring in)."""
    python = find_python()
    assert python is not None
    py = cached_runtime(python) / "bin" / "python"
    code = ("import importlib.metadata as m, sys; print(sys.version_info[:2]);"
            "print(*[m.version(n) for n in sys.argv[1:]])")
    names = [p.split("==")[0] for p in COLAB_PINS]
    out = subprocess.run([str(py), "-c", code, *names], capture_output=True, text=True,
                         check=True).stdout.split("\n")
    assert out[0] == str(tuple(int(x) for x in COLAB_PYTHON.split(".")))
    assert out[1].split() == [p.split("==")[1] for p in COLAB_PINS]
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    for undeclared in ("tqdm", "regex", "course_lib"):
        found = subprocess.run([str(py), "-c", f"import {undeclared}"], capture_output=True,
                               cwd=RUNTIMES, env=clean)
        assert found.returncode != 0, f"{undeclared} is preinstalled in the cached runtime"
