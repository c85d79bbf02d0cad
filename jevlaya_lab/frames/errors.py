"""The exception of table runs (``jevlaya_lab.frames``)."""

from __future__ import annotations

from jevlaya_lab.errors import JevlayaError

__all__ = ["FrameError"]


class FrameError(JevlayaError, ValueError):
    """A table that a table run cannot read: a missing column, a state that is not a string, an
    empty frame, an index that cannot key a journal. The message names the column or the row
    (by its index label) and what to change."""
