"""matplotlib's drawing fonts read from memory (report.figures.fonts_from_memory; issue 23 item 5): no seek and
read system call per glyph, and the same figure."""

from __future__ import annotations

import io
import os

import pytest

pytest.importorskip("matplotlib")


def _svg() -> bytes:
    import matplotlib

    from medvlm_audit.report.figures import new_figure

    fig = new_figure(3, 2)
    ax = fig.add_subplot()
    ax.plot([0, 1, 2], [1, 0, 2], label="Ölçü – résumé")
    ax.set_title("Grounding: CGR 12.5% (n = 1,234)")
    ax.legend()
    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.hashsalt": "fonts"}):  # the SVG ids: the same in both drawings
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def test_draw_fonts_come_from_memory_and_draw_the_same(monkeypatch) -> None:
    from matplotlib import font_manager

    from medvlm_audit.report import figures

    assert isinstance(font_manager.ft2font, figures._FontFiles)  # installed when the figure helpers load
    path = font_manager.findfont(font_manager.FontProperties())
    font_manager._get_font.cache_clear()
    font = font_manager.get_font(path)
    assert isinstance(font.fname, io.BytesIO)  # FreeType reads it from memory
    in_memory = _svg()
    # the same figure drawn from the font files themselves
    monkeypatch.setattr(font_manager, "ft2font", font_manager.ft2font._module)
    font_manager._get_font.cache_clear()
    assert isinstance(font_manager.get_font(path).fname, (str, bytes, os.PathLike))
    from_files = _svg()
    font_manager._get_font.cache_clear()
    assert in_memory == from_files and b"<svg" in in_memory


def test_fonts_opened_to_be_listed_keep_their_path() -> None:
    from matplotlib import font_manager

    import medvlm_audit.report.figures  # noqa: F401

    path = font_manager.findfont(font_manager.FontProperties())
    assert font_manager.ft2font.FT2Font(path).fname == path  # as addfont opens a font: FontEntry.fname a path
