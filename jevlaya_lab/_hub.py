"""The Hugging Face hub rules shared by decisions and local models: what a hub id looks like and
whether the hub is switched off.

Decision the spec leaves open: a hub id is ``"org/name"`` (letters, digits, ``_ . -``; the org
starts with a letter or digit); anything else is a path. The hub counts as switched off when
``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` is ``1``, ``true``, ``yes`` or ``on``.
"""

from __future__ import annotations

import os
import re

__all__ = ["HUB_ID", "hub_offline", "is_hub_id"]

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
_OFFLINE_VALUES = {"1", "true", "yes", "on"}


def is_hub_id(text: str) -> bool:
    """Whether ``text`` has the shape of a hub id (it may still name an existing local path)."""
    return HUB_ID.match(text) is not None


def hub_offline() -> bool:
    """Whether the user switched the hub off, so nothing may be downloaded."""
    return any(os.environ.get(var, "").strip().lower() in _OFFLINE_VALUES for var in _OFFLINE_VARIABLES)
