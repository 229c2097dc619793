"""The grading sandbox's Python environment, built from an allow-list.

Student code in the sandbox may import torch, numpy and Python's standard library (what every
exercise statement allows: "**You may use:** torch, numpy and Python's standard library"), the
course's grading plumbing (an allow-listed copy of course_lib, :mod:`autograder.strip`) and
nothing else. The environment is *built* from the allow-list below, never the development
environment minus a deny-list:

* the interpreter runs with ``-S -s`` (no ``site``: no site-packages folder, no ``.pth`` file, no
  user site), so ``sys.path`` holds only the standard library and ``PYTHONPATH``;
* ``PYTHONPATH`` is the sandbox's course folder and :data:`SITE`, a folder holding exactly the
  top-level entries (packages, modules, their ``.dist-info``) of the allowed distributions;
* under bubblewrap, every other site-packages or dist-packages folder that the file system of the
  sandbox would show (the base interpreter's, Debian's ``/usr/lib/python3/dist-packages``...) is
  covered by an empty tmpfs, and the development virtualenv is not mounted at all, so no path
  leads to another package (``sys.path.append`` included).

:data:`KERNEL_DISTRIBUTIONS` is what the runner itself needs to run cells as a notebook does
(IPython's shell, with the distributions IPython declares); no package the course's tests or
website use (transformers, peft, entmax, tiktoken, scipy, matplotlib, jupyter-book...) is in
either list.
"""

from __future__ import annotations

import glob
import importlib.metadata as metadata
import os
import re
import sys
import sysconfig
from pathlib import Path

#: The distributions the exercise statements allow, and what torch imports itself: typing_extensions
#: when it loads, sympy and mpmath in its dispatch-mode and symbolic-shape machinery (a
#: ``TorchDispatchMode``, such as the notebooks' allocation meter, imports them).
ALLOWED_DISTRIBUTIONS = ("torch", "numpy", "typing_extensions", "sympy", "mpmath")
#: The runner's shell: IPython runs the student's cells (magics, as a notebook runs them); the
#: distributions IPython declares are added (:func:`kernel_distributions`).
KERNEL_DISTRIBUTIONS = ("ipython",)
#: Where the allowed distributions' entries are in the sandbox (bubblewrap).
SITE = "/opt/site"
#: Names in an allowed distribution's requirements that are never in the sandbox: torch
#: declares them, but its eager use never imports them (graph algorithms, templates, file
#: systems, compilers, packaging tools).
NEVER = frozenset({"networkx", "jinja2", "markupsafe", "fsspec", "filelock", "setuptools",
                   "triton"})
#: The sandbox's own message for a module it does not hold (the runner's last import finder);
#: the hardened engine turns it into a feedback line naming the import.
UNAVAILABLE_MARKER = "is not in the grading environment"


def _canon(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements(name: str) -> list[str]:
    """The distributions ``name`` requires unconditionally (no extra), canonical names."""
    try:
        from packaging.requirements import InvalidRequirement, Requirement
    except ImportError:  # packaging is everywhere pip is; without it: the names alone
        return [_canon(re.split(r"[ ;<>=!~\[(]", r, maxsplit=1)[0])
                for r in metadata.requires(name) or [] if "extra ==" not in r]
    out = []
    for text in metadata.requires(name) or []:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        out.append(_canon(req.name))
    return out


def kernel_distributions() -> list[str]:
    """IPython and every distribution it requires (transitively), canonical names, sorted.

    Example:
        >>> "traitlets" in kernel_distributions() and "torch" not in kernel_distributions()
        True
    """
    seen: set[str] = set()
    todo = [_canon(n) for n in KERNEL_DISTRIBUTIONS]
    while todo:
        name = todo.pop()
        if name in seen or name in NEVER:
            continue
        seen.add(name)
        todo += _requirements(name)
    return sorted(seen)


def sandbox_distributions() -> list[str]:
    """Every distribution whose files the sandbox holds (canonical names, sorted).

    Example:
        >>> {"torch", "numpy", "ipython"} <= set(sandbox_distributions())
        True
        >>> {"transformers", "networkx", "scipy"} & set(sandbox_distributions())
        set()
    """
    return sorted({_canon(n) for n in ALLOWED_DISTRIBUTIONS} | set(kernel_distributions()))


def site_entries() -> dict[str, Path]:
    """Top-level name -> path of every entry of the allowed distributions (their packages,
    modules, compiled libraries and metadata), as this interpreter has them installed.

    Raises:
        RuntimeError: an allowed distribution is not installed, or two share an entry name from
            different folders.
    """
    entries: dict[str, Path] = {}
    for name in sandbox_distributions():
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            raise RuntimeError(f"the grading environment needs {name!r}, which is not "
                               "installed") from None
        base = Path(str(dist.locate_file(""))).resolve()
        tops = {Path(str(f)).parts[0] for f in dist.files or [] if Path(str(f)).parts}
        for top in sorted(tops):
            if top in ("..", "") or top == "__pycache__":
                continue  # scripts in bin/, caches
            path = base / top
            if not path.exists():
                continue
            known = entries.get(top)
            if known is not None and known != path:
                raise RuntimeError(f"two allowed distributions install {top!r}: {known} and "
                                   f"{path}")
            entries[top] = path
    return entries


def sandbox_python() -> str:
    """The interpreter the sandbox runs: the base installation's, not the virtualenv's (whose
    ``pyvenv.cfg`` would bring back its site-packages)."""
    return os.path.realpath(sys.executable)


def python_flags() -> list[str]:
    """``-S -s -B``: no ``site`` (no site-packages, no ``.pth`` files), no user site, no
    bytecode written."""
    return ["-S", "-s", "-B"]


def package_folders() -> list[str]:
    """Every folder of installed packages that a sandbox's file system could show: the base
    interpreter's and the virtualenv's site-packages, and the system's dist-packages. Under
    bubblewrap each one is covered by an empty tmpfs (those under a path that is not mounted
    need nothing)."""
    found: set[str] = set()
    for scheme_vars in ({"base": sys.base_prefix, "platbase": sys.base_exec_prefix},
                        {"base": sys.prefix, "platbase": sys.exec_prefix}):
        paths = sysconfig.get_paths(vars=scheme_vars)
        for key in ("purelib", "platlib"):
            found.add(os.path.realpath(paths[key]))
    for pattern in ("/usr/lib/python3*/dist-packages", "/usr/lib/python3*/site-packages",
                    "/usr/local/lib/python3*/dist-packages",
                    "/usr/local/lib/python3*/site-packages", "/usr/share/pyshared"):
        found.update(os.path.realpath(p) for p in glob.glob(pattern))
    return sorted(p for p in found if os.path.isdir(p))
