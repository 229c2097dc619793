"""Grading helpers: the one entry point every hidden test goes through.

A hidden test cell in a solution notebook is a single call::

    from course_lib import grading
    grading.check("seq2seq.additive_score", additive_score)

``check`` looks the exercise up in the registry (``course_lib/exercises/<chapter>.py``), builds
each hidden case's inputs from a fixed seed, runs the student's function on them and then, by
mode (environment variable ``COURSE_GRADING_MODE``):

* ``compare`` (default; plain nbgrader, nbval, a student's own kernel): computes course_lib's
  reference output in the same kernel and raises ``AssertionError`` with a message that says what
  is wrong (shape, dtype, largest error and where, NaN, a non-tensor result) without printing the
  hidden inputs.
* ``record`` (the instructor's hardened ``python -m autograder grade``): the trusted process builds
  every hidden case's inputs (with the grading run's secret mixed into every seed, see
  :mod:`course_lib.exercises._common`) and writes them with :func:`write_case_inputs` into a
  read-only folder of the sandbox (``COURSE_GRADING_INPUT_DIR``); ``check`` runs the student's
  function on them and only records its outputs as plain arrays (``.npz`` files, never pickles)
  under ``COURSE_GRADING_RECORD_DIR``. The trusted process, which runs no student code, computes
  the reference on the same inputs and compares with :func:`compare_plain`, so patching
  assertions inside the student's kernel changes nothing. The sandbox holds no exercise module:
  no reference, slip, diagnosis or case builder is there to call.

A question (a letter to choose, :class:`Question`) has no reference in course_lib: its answer is
in the source notebook's hidden test, ``grading.check(id, fn, answer="<letter>")``.

The modules, one job each:

==============  ==============================================================================
``modes``       the graders' environment variables; :func:`under_grader`
``exercise``    :class:`Exercise`, :class:`Case`, :class:`Slip`, the errors
``questions``   :class:`Question`, :func:`answer_case`, :func:`choice`
``registry``    :func:`get_exercise`, :func:`chapter_exercises`, the objects that answer them
``guard``       the reference guard (:func:`run_guarded`) and its messages
``plain``       :func:`to_plain`, :func:`compare_plain`, :data:`TOLERANCES`
``meter``       :class:`AllocationMeter`
``verdict``     :func:`run_student`, :func:`reference_output`, :func:`judge`: one verdict path
``inputs``      the hidden inputs' files and the call adapters the sandbox may hold
``records``     the sandbox's records of each case (``.npz``)
``visible``     :func:`visible_tests`: a blank exercise does not stop "Run All"
``hidden``      :func:`check`, :func:`evaluate`, :func:`record`, :func:`format_failures`
==============  ==============================================================================
"""

from __future__ import annotations

from course_lib.grading.exercise import (
    Case,
    Exercise,
    GradingError,
    MemoryProbe,
    ReferenceCallError,
    Slip,
)
from course_lib.grading.guard import (
    REFERENCE_CALL_MESSAGE,
    STRIPPED_MARKER,
    code_objects,
    is_reference_call,
    run_guarded,
)
from course_lib.grading.hidden import (
    PROBE_RECORD,
    check,
    evaluate,
    format_failures,
    load_probe,
    record,
    record_probe,
)
from course_lib.grading.inputs import (
    CALL_MODULES,
    call_name,
    case_inputs_path,
    probe_inputs_path,
    read_case_inputs,
    read_probe_inputs,
    resolve_call,
    write_case_inputs,
    write_probe_inputs,
)
from course_lib.grading.meter import AllocationMeter
from course_lib.grading.modes import (
    INPUT_DIR_ENV,
    MODE_ENV,
    NBGRADER_ENV,
    RECORD_DIR_ENV,
    grading_mode,
    under_grader,
)
from course_lib.grading.plain import TOLERANCES, compare_plain, to_plain
from course_lib.grading.questions import Question, answer_case, choice
from course_lib.grading.records import load_record, record_path, save_record
from course_lib.grading.registry import (
    answer_objects,
    chapter_exercises,
    exercise_chapters,
    forbidden_code_objects,
    get_exercise,
)
from course_lib.grading.verdict import CaseResult, explain, judge, reference_output, run_student
from course_lib.grading.verdict import _post as _post  # the tests' (exercise postprocessing)
from course_lib.grading.visible import visible_tests

__all__ = [
    "AllocationMeter", "CALL_MODULES", "Case", "CaseResult", "Exercise", "GradingError",
    "INPUT_DIR_ENV", "MODE_ENV", "NBGRADER_ENV", "Question", "RECORD_DIR_ENV",
    "REFERENCE_CALL_MESSAGE", "ReferenceCallError", "STRIPPED_MARKER", "Slip", "TOLERANCES",
    "answer_case", "answer_objects", "call_name", "case_inputs_path", "chapter_exercises",
    "check", "choice", "code_objects", "compare_plain", "evaluate", "exercise_chapters",
    "explain", "forbidden_code_objects", "format_failures", "get_exercise", "grading_mode",
    "is_reference_call", "judge", "load_record", "read_case_inputs", "record", "record_path",
    "reference_output", "resolve_call", "run_guarded", "run_student", "save_record", "to_plain",
    "under_grader", "visible_tests", "write_case_inputs", "MemoryProbe", "PROBE_RECORD",
    "load_probe", "probe_inputs_path", "read_probe_inputs", "record_probe", "write_probe_inputs",
]
