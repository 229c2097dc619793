"""Test-only exercise modules: ``$AUTOGRADER_EXTRA_EXERCISES/<chapter>.py``.

The test suite grades a small fixture chapter whose exercises live in
``tests/fixtures/exercises/``, not in course_lib. When :data:`EXTRA_EXERCISES_ENV` names that
folder, every process that grades registers each module there as
``course_lib.exercises.<chapter>`` (each with an ``EXERCISES`` dict), so that no test-only code
lives in course_lib.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

EXTRA_EXERCISES_ENV = "AUTOGRADER_EXTRA_EXERCISES"


def register_extra_exercises() -> list[str]:
    """Import the modules of ``$AUTOGRADER_EXTRA_EXERCISES`` as ``course_lib.exercises.<name>``.

    Returns:
        The chapter names registered (empty when the variable is unset).
    """
    root = os.environ.get(EXTRA_EXERCISES_ENV)
    if not root:
        return []
    names = []
    for path in sorted(Path(root).glob("*.py")):
        modname = f"course_lib.exercises.{path.stem}"
        if modname not in sys.modules:
            spec = importlib.util.spec_from_file_location(modname, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[modname] = module
            spec.loader.exec_module(module)
        names.append(path.stem)
    return names
