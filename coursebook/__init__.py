"""The repository's own model of the course: its chapters and its notebooks.

Every layer that needs to know what a chapter is (the autograder, publishing, the website's
extension, the tests, the benchmarks) asks :mod:`coursebook.chapters`, and every layer that reads
or writes a notebook file goes through :mod:`coursebook.notebooks`. Nothing here is shipped to
students: ``course_lib`` is the installable package, ``coursebook`` only lives in the repository.
"""

from coursebook.chapters import REPO, Chapter, UnknownChapter, all_chapters, find_chapter

__all__ = ["REPO", "Chapter", "UnknownChapter", "all_chapters", "find_chapter"]
