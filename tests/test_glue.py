"""Tests of course_lib.book.glue: the output it displays is myst-nb's glue format."""

from __future__ import annotations

import pytest


@pytest.fixture()
def shown(monkeypatch: pytest.MonkeyPatch) -> list:
    import IPython.display

    calls: list = []
    monkeypatch.setattr(IPython.display, "display",
                        lambda obj, raw=False, metadata=None: calls.append((obj, raw, metadata)))
    return calls


@pytest.mark.parametrize("display, prefix", [(True, ""), (False, "application/papermill.record/")])
def test_glue_emits_a_named_scrapbook_output(shown: list, display: bool, prefix: str) -> None:
    from course_lib.book import glue

    glue("acc", 0.992, display=display)
    ((bundle, raw, metadata),) = shown
    assert raw is True
    assert bundle == {prefix + "text/plain": "0.992"}
    assert metadata["scrapbook"] == {"name": "acc", "mime_prefix": prefix}


def test_glue_matches_myst_nb(shown: list, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same bundle and metadata as myst-nb's own glue (the peer the book reads it with)."""
    import myst_nb.ext.glue as peer

    from course_lib.book import glue

    monkeypatch.setattr(peer, "ipy_display",
                        lambda obj, raw=False, metadata=None: shown.append((obj, raw, metadata)))
    glue("n", 3)
    peer.glue("n", 3)
    assert shown[0] == shown[1]
