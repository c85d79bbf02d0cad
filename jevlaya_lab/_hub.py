"""The Hugging Face hub rules shared by decisions and local models: what a hub id looks like and
whether the hub is switched off.

A hub id is ``"org/name"`` (letters, digits, ``_ . -``; the org
starts with a letter or digit); anything else is a path. The hub counts as switched off when
``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` is ``1``, ``true``, ``yes`` or ``on``.

A ``revision`` (branch, tag or commit) or ``token`` is ``None`` or a string; a blank string counts
as not given (as Laya 0.4.15 reads a blank revision: a configuration line never filled in).
Anything else is a ``TypeError`` naming the field, before any download is tried.
"""

from __future__ import annotations

import os
import re

__all__ = ["HUB_ID", "check_revision", "check_token", "hub_offline", "is_hub_id"]

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
_OFFLINE_VALUES = {"1", "true", "yes", "on"}


def is_hub_id(text: str) -> bool:
    """Whether ``text`` has the shape of a hub id (it may still name an existing local path)."""
    return HUB_ID.match(text) is not None


def hub_offline() -> bool:
    """Whether the user switched the hub off, so nothing may be downloaded."""
    return any(os.environ.get(var, "").strip().lower() in _OFFLINE_VALUES for var in _OFFLINE_VARIABLES)


def _optional_text(value: object, field: str, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{field}: expected {what} as a str (or None), got {type(value).__name__} {value!r}")
    return value.strip() or None


def check_revision(value: object, field: str = "revision") -> str | None:
    """A hub revision (branch, tag or commit SHA) or ``None``; blank counts as ``None``."""
    return _optional_text(value, field, "a hub revision (branch, tag or commit SHA)")


def check_token(value: object, field: str = "token") -> str | None:
    """A Hugging Face access token or ``None``; blank counts as ``None``. Never echoed back."""
    if value is not None and not isinstance(value, str):
        raise TypeError(f"{field}: expected a Hugging Face access token as a str (or None), "
                        f"got {type(value).__name__}")
    return _optional_text(value, field, "a Hugging Face access token")
