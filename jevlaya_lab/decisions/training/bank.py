"""English phrase banks the synthetic generator composes states from.

Each bank maps a gold label to short phrases written for training only. The hand-written evaluation
set under ``tests/data/`` is worded independently, so scores on it measure generalisation rather
than recall of these phrases.

The phrases are data, in ``data/bank.json``; this module only loads them (once, at import, which
happens only when training or its tests run).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

_DATA: dict[str, Any] = json.loads((Path(__file__).with_name("data") / "bank.json").read_text(encoding="utf-8"))

TRIAGE_REQUESTS: dict[str, list[str]] = _DATA["TRIAGE_REQUESTS"]
SENTIMENT_PHRASES: dict[str, list[str]] = _DATA["SENTIMENT_PHRASES"]
URGENCY_PHRASES: list[list[str]] = _DATA["URGENCY_PHRASES"]
PRODUCTS: list[str] = _DATA["PRODUCTS"]
FEATURES: list[str] = _DATA["FEATURES"]
NAMES: list[str] = _DATA["NAMES"]
EMAILS: dict[str, list[str]] = _DATA["EMAILS"]
EMAIL_NEEDS_REPLY: dict[str, bool] = _DATA["EMAIL_NEEDS_REPLY"]
GUARD_INPUTS: dict[str, list[str]] = _DATA["GUARD_INPUTS"]
MODERATION_TEXTS: dict[str, list[str]] = _DATA["MODERATION_TEXTS"]
MODERATION_TOXICITY: dict[str, list[int]] = _DATA["MODERATION_TOXICITY"]
ROUTER_REQUESTS: dict[str, list[str]] = _DATA["ROUTER_REQUESTS"]
ROUTER_COMPLEXITY: dict[str, list[int]] = _DATA["ROUTER_COMPLEXITY"]
ROUTER_NEEDS_TOOLS: dict[str, bool] = _DATA["ROUTER_NEEDS_TOOLS"]
TOPICS: dict[str, list[Any]] = _DATA["TOPICS"]  # topic -> [description, phrases]
EMOTIONS: dict[str, list[str]] = _DATA["EMOTIONS"]
# preset -> label -> other names a user might give the label ("tech support" for technical_issue)
LABEL_ALIASES: dict[str, dict[str, list[str]]] = _DATA["LABEL_ALIASES"]
