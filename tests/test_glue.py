"""Tests of course_lib.book.glue: the output it records is myst-nb's glue format."""

from __future__ import annotations

import pytest

PREFIX = "application/papermill.record/"


@pytest.fixture()
def shown(monkeypatch: pytest.MonkeyPatch) -> list:
    import IPython.display

    calls: list = []
    monkeypatch.setattr(IPython.display, "display",
                        lambda obj, raw=False, metadata=None: calls.append((obj, raw, metadata)))
    return calls


@pytest.mark.parametrize("display", [True, False])
def test_glue_records_a_hidden_named_value_and_prints_its_label(shown: list, display: bool,
                                                                capsys) -> None:
    from course_lib.book import glue

    glue("acc", 0.992, display=display)
    ((bundle, raw, metadata),) = shown
    assert raw is True
    assert bundle == {PREFIX + "text/plain": "0.992"}
    assert metadata["scrapbook"] == {"name": "acc", "mime_prefix": PREFIX}
    assert capsys.readouterr().out == ("acc = 0.992\n" if display else "")


def test_glue_matches_myst_nb(shown: list, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same bundle and metadata as myst-nb's own glue with display=False (the peer the book
    reads it with)."""
    import myst_nb.ext.glue as peer

    from course_lib.book import glue

    monkeypatch.setattr(peer, "ipy_display",
                        lambda obj, raw=False, metadata=None: shown.append((obj, raw, metadata)))
    glue("n", 3)
    peer.glue("n", 3, display=False)
    assert shown[0] == shown[1]
