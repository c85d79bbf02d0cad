"""Multilingual phrase banks for training the ``mini-multi`` triage checkpoint.

The same shape as the English banks in :mod:`jevlaya_lab.decisions.training.bank`, per language:
triage requests by intent, sentiment tails, urgency phrases by priority level (0 no rush, 1 this
week, 2 today / blocks work, 3 emergency within the hour) and greetings. The text imitates what real
customers write: mixed register (polite, curt, angry, casual), occasional typos or missing accents,
and English product words where natives use them. Request placeholders are ``{order}`` and
``{amount}`` only (no ``{product}``/``{feature}``, whose English fillers would not fit the grammar).

Written for training only, by hand and independently of the multilingual evaluation set under
``tests/data/``, so scores there measure generalisation, not recall. Languages (ISO 639-1): Spanish,
French, German, Portuguese, Italian, Russian, Ukrainian, Arabic, Hindi, Chinese (Simplified),
Japanese, Korean and Turkish.

The phrases are data, in ``data/bank_multi.json``; this module only loads them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

_DATA: dict[str, Any] = json.loads((Path(__file__).with_name("data") / "bank_multi.json").read_text(encoding="utf-8"))

LANGUAGES: tuple[str, ...] = tuple(_DATA["LANGUAGES"])
TRIAGE_REQUESTS_ML: dict[str, dict[str, list[str]]] = _DATA["TRIAGE_REQUESTS_ML"]
SENTIMENT_PHRASES_ML: dict[str, dict[str, list[str]]] = _DATA["SENTIMENT_PHRASES_ML"]
URGENCY_PHRASES_ML: dict[str, list[list[str]]] = _DATA["URGENCY_PHRASES_ML"]
GREETINGS_ML: dict[str, list[str]] = _DATA["GREETINGS_ML"]
