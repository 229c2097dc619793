"""The report stage of grading: what the instructor and the students read.

* :mod:`~autograder.report.tables`: ``grades.csv``, ``grades_long.csv``, ``report.csv``;
* :mod:`~autograder.report.lms`: the Canvas and Moodle grade imports;
* :mod:`~autograder.report.gradebook`: nbgrader's gradebook;
* :mod:`~autograder.report.plot`: the score distribution;
* :mod:`~autograder.report.feedback` and :mod:`~autograder.report.summary`: the HTML pages,
  rendered from Jinja2 templates with every value escaped (:mod:`~autograder.report.pages`);
* :mod:`~autograder.report.similarity`: solutions that look copied (never changes a grade);
* :mod:`~autograder.report.csvsafe`: no CSV cell a spreadsheet runs as a formula.

Every CSV cell goes through :mod:`~autograder.report.csvsafe`; every HTML value is escaped.
"""
