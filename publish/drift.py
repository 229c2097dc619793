"""``python -m publish check``: has a generated notebook drifted from its source?

A committed release (``chapters/``) or Colab copy (``colab/``) is in sync when its bytes are what
``python -m publish release`` would write now, from the source and the committed measured values.
The check also reports a glued number of the prose without a committed value, and a hand-edited
file whose repository address is not ``_config.yml``'s. It writes nothing.
"""

from __future__ import annotations

from pathlib import Path

from coursebook import Chapter, notebooks
from publish.release import colab_copy, generate_release, hand_edited, unmeasured
from publish.repository import repository_url, stale_urls
from publish.site import SITE, Site


def _differs(path: Path, expected: str) -> bool:
    """Whether the file at ``path`` holds other text than ``expected``."""
    return path.read_text(encoding="utf-8") != expected


def chapter_drift(chapter: Chapter, site: Site = SITE) -> list[str]:
    """What of a chapter's generated notebooks differs from what ``release`` would write, and why.

    Raises:
        ReleaseError: the chapter cannot be released (nbgrader, the conversion, a malformed
            measured-values file), naming it.
    """
    drifted = []
    expected = generate_release(chapter.source, chapter.slug)
    if not chapter.release.exists():
        drifted.append(f"{chapter.slug}: {chapter.release} is missing")
    elif _differs(chapter.release, notebooks.dumps(expected)):
        drifted.append(f"{chapter.slug}: {chapter.release} differs from the release of "
                       f"{chapter.source}")
    if not chapter.colab.exists():
        drifted.append(f"{chapter.slug}: its Colab copy {chapter.colab} is missing")
    elif _differs(chapter.colab, notebooks.dumps(colab_copy(chapter, expected, site))):
        drifted.append(f"{chapter.slug}: {chapter.colab} differs from the Colab copy of its "
                       f"release and {chapter.measured.relative_to(chapter.root)}")
    why = unmeasured(chapter, expected)
    return drifted + ([why] if why else [])


def drifted(chapters: list[Chapter], site: Site = SITE) -> list[str]:
    """Every generated notebook of ``chapters`` that drifted, every glued value without a
    measured value, and every line of a hand-edited file naming another repository.

    Returns:
        One line each, naming the chapter or the file (empty when everything is in sync).

    Raises:
        ReleaseError: as :func:`chapter_drift`.
    """
    url = repository_url(site.config)
    lines = [f"{s.path}:{s.line}: names {s.found}, not _config.yml's repository.url git+{url}"
             for s in stale_urls(hand_edited(chapters, site), url)]
    for chapter in chapters:
        lines += chapter_drift(chapter, site)
    return lines

