"""Questions: a prediction or a conceptual choice, answered by a letter, written once here.

A question is one declaration in its chapter's exercise module::

    Question(id="transformer.ffn_share", choices="abcd",
             hint="count both blocks: attention has four d x d projections; ...")

The student writes a function with no argument that returns a letter. What every question shares
is here: its one case (:func:`answer_case`), the call that checks the answer's form
(:func:`choice`, which also runs in the grading sandbox) and the verdict, which never says which
letter is right: a letter outside ``choices`` is named as such, any other wrong letter gets the
hint.

The answer is not in course_lib, the package students install. It is written in the source
notebook's hidden test, the instructor-only part that the release drops::

    grading.check("<chapter>.<name>", <name>, answer="<letter>")

In the kernel (plain nbgrader, nbval) :func:`course_lib.grading.check` compares with it; the
hardened grader reads it from the source notebook (``autograder/chapter_spec.py``), sends the
sandbox the call without it, and its trusted judge compares the sandbox's record with it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from course_lib.grading.exercise import Case, Exercise, GradingError


def answer_case() -> list[Case]:
    """The one case of a question: the student's function takes no input.

    Example:
        >>> [(case.name, case.inputs()) for case in answer_case()]
        [('your answer', {})]
    """
    return [Case("your answer", dict)]


def choice(fn: Callable[[], Any], inputs: dict[str, Any]) -> Any:
    """``Exercise.call`` of a question: the answer as one lower-case letter.

    Raises:
        AssertionError: when the answer is not one letter in a string.

    Example:
        >>> choice(lambda: " B ", {})
        'b'
    """
    answer = fn(**inputs)
    if type(answer) is not str or len(answer.strip()) != 1:
        raise AssertionError(f"return one letter as a string, e.g. 'a'; got {answer!r}")
    return answer.strip().lower()


@dataclass(frozen=True)
class Question(Exercise):
    """A multiple-choice question: the letters offered and a hint for a wrong answer.

    Attributes:
        choices: the letters the statement offers, in order (``"abcd"``).
        hint: what a student with a wrong letter reads: a way to reason it out, naming no
            letter.

    Example:
        >>> q = Question(id="toy.q", choices="abc", hint="count the parameters of both blocks")
        >>> q.verdict("b", q.expected("b")) is None
        True
        >>> q.verdict("a", q.expected("b"))
        'that is not the right answer; count the parameters of both blocks'
        >>> q.verdict("e", q.expected("b"))
        "answer with one of the letters a, b, c; got 'e'"
    """

    reference: Callable[..., Any] | None = None
    cases: Callable[[], Sequence[Case]] = answer_case
    call: Callable[[Callable[..., Any], dict[str, Any]], Any] | None = choice
    choices: str = "abcd"
    hint: str = ""

    def __post_init__(self) -> None:
        letters = self.choices
        if len(letters) < 2 or len(set(letters)) != len(letters) or not (
                letters.isalpha() and letters.islower() and letters.isascii()):
            raise GradingError(f"{self.id}: choices must be two or more distinct lower-case "
                               f"letters; got {letters!r}")
        if not self.hint.strip():
            raise GradingError(f"{self.id}: a question needs a hint for a wrong answer")
        if (self.reference, self.cases, self.call, self.slips) != (None, answer_case, choice, ()):
            raise GradingError(f"{self.id}: a question has no reference or slips (its answer is "
                               "in the source notebook's hidden test) and keeps its own cases and "
                               "call")

    def expected(self, answer: Any) -> str:
        """The right letter, as the hidden test gives it, checked against the choices.

        Raises:
            GradingError: when the hidden test gives no answer, or one not among ``choices``.
        """
        if answer is None:
            raise GradingError(f"{self.id} is a question: its hidden test gives the answer, "
                               f'grading.check("{self.id}", {self.name}, answer="<letter>")')
        if type(answer) is not str or len(answer) != 1 or answer not in self.choices:
            raise GradingError(f"{self.id}: the answer must be one of the letters "
                               f"{', '.join(self.choices)}; the hidden test gives {answer!r}")
        return answer

    def verdict(self, got: Any, expected: str) -> str | None:
        """``None`` for the right letter; else why the answer is wrong, never the right letter."""
        if type(got) is str and got == expected:
            return None
        if type(got) is not str or len(got) != 1 or got not in self.choices:
            return (f"answer with one of the letters {', '.join(self.choices)}; "
                    f"got {repr(got)[:80]}")
        return f"that is not the right answer; {self.hint}"
