"""The one error publishing raises: what it cannot make, and why, naming the file to fix."""

from __future__ import annotations


class ReleaseError(RuntimeError):
    """A release, Colab copy or drift check cannot be made.

    nbgrader refused the source (bad metadata, duplicate grade ids), a hand-edited file names
    another repository than ``_config.yml`` does, a MyST construct has no plain-Jupyter form, or
    a measured-values file is malformed. The message names the chapter and the file.
    """
