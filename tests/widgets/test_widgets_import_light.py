"""Importing the widgets package, the renderer and analysis stays light: no widget library,
no torch (they load on first use of a view)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def test_widgets_render_and_analysis_import_without_widget_libraries_or_torch() -> None:
    code = ("import sys, jevlaya_lab, jevlaya_lab.widgets, jevlaya_lab.widgets.render, "
            "jevlaya_lab.analysis; "
            "print(sorted(m for m in ('anywidget', 'ipywidgets', 'torch', 'transformers', "
            "'plotly') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         check=True).stdout.strip()
    assert out == "[]"


def test_unknown_view_name_is_an_attribute_error() -> None:
    import jevlaya_lab.widgets as widgets

    with pytest.raises(AttributeError, match="TimelineView"):
        widgets.TimelineView  # noqa: B018
