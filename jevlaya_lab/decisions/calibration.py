"""From option logits to calibrated answers: temperatures, confidences and ``min_confidence``.

Temperatures come from the checkpoint config: ``temperature_by_options["<type>:<band>"]`` when
present, else ``temperature[type]``; every applied value is clamped to [0.5, 5.0], numeric
strings count as numbers, and bools, other strings, NaN and infinities become 1.0, all listed in
one ``RuntimeWarning`` when the table is built (Laya 0.4.15's rules). Bands group questions by
option count: ``2``, ``3-5``, ``6-10``, ``11+`` (a one-option question uses band ``2``). The same
buckets key ``min_confidence`` maps.

``min_confidence`` compares an answer's ``answer_confidence`` (max p) with the threshold of its
bucket (or ``"default"``, else 0.0) and records that threshold on the answer; see
:func:`apply_min_confidence`.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, TypeGuard

from jevlaya_lab.decisions.questions import QUESTION_TYPES, Question

TEMPERATURE_MIN = 0.5
TEMPERATURE_MAX = 5.0
BANDS: tuple[str, ...] = ("2", "3-5", "6-10", "11+")
BUCKETS: tuple[str, ...] = tuple(f"{t}:{b}" for t in QUESTION_TYPES for b in BANDS)
GATING_FIELDS = ("abstention", "abstention_threshold", "low_confidence")
GATE_STATES = ("passed", "abstained", "unevaluated")


def option_band(k: int) -> str:
    """The band of a question with ``k`` options."""
    if k <= 2:
        return "2"
    if k <= 5:
        return "3-5"
    if k <= 10:
        return "6-10"
    return "11+"


def bucket(question_type: str, k: int) -> str:
    """``"<type>:<band>"``, the key of temperature and ``min_confidence`` maps."""
    return f"{question_type}:{option_band(k)}"


def clamp_temperature(value: Any) -> tuple[float, bool]:
    """``(applied, replaced)``: the temperature that applies to a configured value.

    As in Laya 0.4.15: numbers and numeric strings are clamped to [0.5, 5.0] (so zero and
    negative values become 0.5); bools, other strings, NaN and infinities become 1.0.
    ``replaced`` says whether the value was changed on the way (worth a warning).
    """
    number: float | None = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            number = None
    if number is None or not math.isfinite(number):
        return 1.0, True
    applied = min(TEMPERATURE_MAX, max(TEMPERATURE_MIN, number))
    return applied, applied != number


class TemperatureTable:
    """The temperature applied to each (type, option count), resolved and clamped once.

    Every replaced or clamped entry is listed in one ``RuntimeWarning`` when the table is built;
    keys of ``temperature_by_options`` that are not buckets are listed there too and not used.
    """

    def __init__(self, temperature: Sequence[Any], by_options: Mapping[str, Any] | None = None) -> None:
        values = list(temperature) if isinstance(temperature, (list, tuple)) else []
        if len(values) != len(QUESTION_TYPES):
            raise ValueError(f"temperature = {temperature!r} must list 3 values [choice, score, noul]")
        issues: list[str] = []

        def applied(where: str, value: Any) -> float:
            result, replaced = clamp_temperature(value)
            if replaced:
                issues.append(f"{where}={value!r} -> {result:g}")
            return result

        self.by_type = {t: applied(f"temperature[{i}] ({t})", v)
                        for i, (t, v) in enumerate(zip(QUESTION_TYPES, values))}
        self.by_bucket: dict[str, float] = {}
        for key, value in (by_options or {}).items():
            if key not in BUCKETS:
                issues.append(f"temperature_by_options key {key!r} is not a bucket (not used)")
                continue
            self.by_bucket[key] = applied(key, value)
        if issues:
            warnings.warn("rl_agent_config.json has temperatures that are not finite numbers in "
                          f"[{TEMPERATURE_MIN}, {TEMPERATURE_MAX}]: " + "; ".join(issues)
                          + ". Confidence from these entries is not calibrated; fix the config.",
                          RuntimeWarning, stacklevel=3)

    def get(self, question_type: str, k: int) -> float:
        return self.by_bucket.get(bucket(question_type, k), self.by_type[question_type])

    def __repr__(self) -> str:
        return f"TemperatureTable(by_type={self.by_type}, by_bucket={self.by_bucket})"

    def write(self, path: str | os.PathLike[str], model_id: str, config: Any) -> None:
        """Write this table as a calibration file (Laya's version-2 JSON layout) of checkpoint
        ``model_id`` with its ``CheckpointConfig`` (its temperatures left out: they are this table)."""
        payload = {
            "version": CALIBRATION_VERSION,
            "temperature": [self.by_type[t] for t in QUESTION_TYPES],
            "temperature_by_options": dict(self.by_bucket),
            "model_id_or_path": model_id,
            "subfolder": None,
            "config": {k: v for k, v in config.to_dict().items()
                       if k not in ("temperature", "temperature_by_options")},
        }
        Path(path).write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> TemperatureTable:
        """The temperatures of a calibration file (ours or Laya's); a ``ValueError`` names the file."""
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"calibration={os.fspath(path)!r} cannot be read as JSON ({exc})") from None
        if not isinstance(data, dict) or "temperature" not in data:
            raise ValueError(f"calibration={os.fspath(path)!r} has no 'temperature'; write it with "
                             "agent.save_calibration(path)")
        return cls(data["temperature"], data.get("temperature_by_options") or {})


def parse_min_confidence(value: Any) -> dict[str, float] | None:
    """Validate ``min_confidence``: ``None``, a number in [0, 1], or a map bucket -> number."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        out = {}
        for key, threshold in value.items():
            if key != "default" and key not in BUCKETS:
                raise ValueError(f"min_confidence key {key!r} is not a bucket; use 'default' or "
                                 f"'<type>:<band>' with bands {list(BANDS)}, e.g. 'choice:3-5'")
            out[key] = _threshold(f"min_confidence[{key!r}]", threshold)
        return out
    return {"default": _threshold("min_confidence", value)}


def _threshold(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise ValueError(f"{name} = {value!r} must be a number in [0, 1], e.g. 0.6")
    return float(value)


def _usable(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value)


def apply_min_confidence(answers: dict[Any, dict[str, Any]], questions: Sequence[Question],
                         thresholds: Mapping[str, float]) -> None:
    """Gate each answer in place, as Laya 0.4.15 does.

    The threshold is the answer's bucket's, else ``"default"``, else 0.0 (gate nothing); it is
    written to ``abstention_threshold``. The gate compares ``answer_confidence`` (max p, what
    calibration describes), or ``confidence`` when that is absent: below the threshold the
    answer is ``abstained`` with ``low_confidence: True``, otherwise ``passed``; an answer with
    neither number (e.g. a hand-made cached result) is ``unevaluated``. Stale gating fields are
    replaced, so a reused result never carries another call's verdict.
    """
    for q in questions:
        answer = answers.get(q.id)
        if not isinstance(answer, dict):
            continue
        for name in GATING_FIELDS:
            answer.pop(name, None)
        limit = thresholds.get(bucket(q.type, q.n_options), thresholds.get("default", 0.0))
        value = answer.get("answer_confidence", answer.get("confidence"))
        if not _usable(value):
            answer["abstention"] = "unevaluated"
        elif value < limit:
            answer["low_confidence"] = True
            answer["abstention"] = "abstained"
        else:
            answer["abstention"] = "passed"
        answer["abstention_threshold"] = limit


def confidence(probs: Sequence[float]) -> float:
    """1 - normalised entropy; 1.0 with fewer than two options."""
    k = len(probs)
    if k < 2:
        return 1.0
    entropy = -sum(p * math.log(p) for p in probs if p > 0)
    return max(0.0, 1.0 - entropy / math.log(k))


def decode_answer(question: Question, slot_probs: Sequence[float], act_probability: float) -> dict[str, Any]:
    """Build one answer from tempered slot probabilities (slot order, as in the row)."""
    probs = [0.0] * question.n_options
    for slot, option in enumerate(question.option_order):
        probs[option] = float(slot_probs[slot])
    answer: dict[str, Any] = {"type": question.type}
    if question.type == "choice":
        best = max(range(len(probs)), key=probs.__getitem__)
        answer["choice"] = question.labels[best]
        answer["probabilities"] = {label: round(p, 4) for label, p in zip(question.labels, probs)}
        conf = confidence(probs)
    elif question.type == "score":
        answer["score"] = round(sum(i * p for i, p in enumerate(probs)), 4)
        answer["legend"] = {str(i): text for i, text in enumerate(question.legend)}
        answer["probabilities"] = {str(i): round(p, 4) for i, p in enumerate(probs)}
        conf = confidence(probs)
    else:
        answer["noul"] = round(probs[1], 4)
        conf = max(probs[1], 1.0 - probs[1])
        if question.words:  # the question's own yes/no words (labels=...), so results read as asked
            answer["label"] = question.words[1 if probs[1] >= 0.5 else 0]
            answer["labels"] = {"false": question.words[0], "true": question.words[1]}
    answer["confidence"] = round(conf, 4)
    answer["answer_confidence"] = round(max(probs), 4)
    answer["action"] = {"act_probability": round(float(act_probability), 4)}
    return answer


# -- fitting temperatures from labelled records (Laya's ``fit_temperatures`` / calibration files) --
CALIBRATION_VERSION = 2
MIN_BUCKET_RECORDS = 50
"""A bucket gets its own temperature only with this many records (and its type has 2+ buckets)."""


def _nll(records: Sequence[tuple[Sequence[float], Sequence[float]]], temperature: float) -> float:
    total = 0.0
    for logits, target in records:
        scaled = [x / temperature for x in logits]
        top = max(scaled)
        log_norm = top + math.log(sum(math.exp(x - top) for x in scaled))
        total -= sum(t * (x - log_norm) for x, t in zip(scaled, target) if t)
    return total / max(1, len(records))


def fit_one_temperature(records: Sequence[tuple[Sequence[float], Sequence[float]]]) -> float:
    """The temperature in [0.5, 5] minimising the mean cross-entropy of ``(logits, target)``
    pairs (golden-section search over log T; the loss is unimodal in T for fixed logits)."""
    low, high = math.log(TEMPERATURE_MIN), math.log(TEMPERATURE_MAX)
    ratio = (math.sqrt(5) - 1) / 2
    a, b = low + (1 - ratio) * (high - low), low + ratio * (high - low)
    fa, fb = _nll(records, math.exp(a)), _nll(records, math.exp(b))
    for _ in range(60):
        if fa <= fb:
            high, b, fb = b, a, fa
            a = low + (1 - ratio) * (high - low)
            fa = _nll(records, math.exp(a))
        else:
            low, a, fa = a, b, fb
            b = low + ratio * (high - low)
            fb = _nll(records, math.exp(b))
    return math.exp((low + high) / 2)


def fit_temperatures(records: Sequence[tuple[Any, Sequence[float], Sequence[float], int]],
                     base: Sequence[float] = (1.0, 1.0, 1.0)) -> dict[str, Any]:
    """Per-type (and, with enough records, per-bucket) temperatures from labelled records.

    ``records`` are Laya's ``(qtype, logits, target, k)``: qtype 0/1/2 (or the type name), the
    raw option logits, a target distribution over the options, the option count. A type without
    records keeps its ``base`` temperature. Returns ``temperature``, ``temperature_by_options``,
    ``n_by_bucket`` and ``temperature_clamped`` (fits that hit a bound), like Laya's.
    """
    by_type: dict[str, list[Any]] = {t: [] for t in QUESTION_TYPES}
    by_bucket: dict[str, list[Any]] = {}
    for index, record in enumerate(records):
        try:
            qtype, logits, target, k = record
            name = qtype if qtype in QUESTION_TYPES else QUESTION_TYPES[int(qtype)]
            pair = ([float(x) for x in list(logits)[:int(k)]], [float(x) for x in list(target)[:int(k)]])
        except (TypeError, ValueError, IndexError) as exc:
            raise ValueError(f"records[{index}] = {record!r:.80} is not (qtype, logits, target, k) with "
                             f"qtype 0/1/2 or a type name ({exc})") from None
        by_type[name].append(pair)
        by_bucket.setdefault(bucket(name, int(k)), []).append(pair)
    temperature = [float(t) for t in base]
    clamped: dict[str, float] = {}
    for i, name in enumerate(QUESTION_TYPES):
        if by_type[name]:
            temperature[i] = fit_one_temperature(by_type[name])
    by_options: dict[str, float] = {}
    for key, pairs in by_bucket.items():
        name = key.split(":")[0]
        siblings = [k for k in by_bucket if k.startswith(name + ":") and len(by_bucket[k]) >= MIN_BUCKET_RECORDS]
        if len(pairs) >= MIN_BUCKET_RECORDS and len(siblings) >= 2:
            by_options[key] = fit_one_temperature(pairs)
    for key, value in [*zip(QUESTION_TYPES, temperature), *by_options.items()]:
        if math.isclose(value, TEMPERATURE_MIN, rel_tol=1e-3) or math.isclose(value, TEMPERATURE_MAX, rel_tol=1e-3):
            clamped[key] = value
    return {"temperature": temperature, "temperature_by_options": by_options,
            "n_by_bucket": {k: len(v) for k, v in sorted(by_bucket.items())},
            "temperature_clamped": clamped}
