"""What :func:`~jevlaya_lab.decisions.adapt.adapt` reports: per question, the labels' scores
zero-shot and cross-validated (:class:`QuestionReport`), and the table of them all
(:class:`AdaptationReport`, ``agent.adaptation_report``), with the scores both are built from.

Balanced accuracy is the mean recall over the answers the labels hold; ECE is the top-1 expected
calibration error in ten equal-width bins; AUC (yes/no only) is the chance that a "yes" state's
log-odds rank above a "no" state's, ties counting half.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html import escape
from typing import Any

import torch


def ece(probs: torch.Tensor, targets: torch.Tensor, bins: int = 10) -> float:
    """Top-1 expected calibration error of ``[n, k]`` probabilities against option indices."""
    conf, top = probs.max(dim=1)
    total = 0.0
    for b in range(bins):
        low, high = b / bins, (b + 1) / bins
        inside = (conf >= low) & ((conf < high) if b < bins - 1 else (conf <= high))
        if inside.any():
            hits = float((top[inside] == targets[inside]).double().mean())
            total += abs(float(conf[inside].mean()) - hits) * int(inside.sum())
    return total / len(targets)


def balanced(probs: torch.Tensor, targets: torch.Tensor) -> float:
    """Mean recall of the argmax over the answers present in ``targets``."""
    top = probs.argmax(dim=1)
    recalls = [float((top[targets == c] == c).double().mean()) for c in sorted(set(targets.tolist()))]
    return sum(recalls) / len(recalls)


def scores(probs: torch.Tensor, targets: torch.Tensor) -> tuple[float, float, float]:
    """``(accuracy, balanced accuracy, ECE)``."""
    accuracy = float((probs.argmax(dim=1) == targets).double().mean())
    return accuracy, balanced(probs, targets), ece(probs, targets)


def auc(lp: torch.Tensor, targets: torch.Tensor) -> float:
    """A yes/no's AUC from its ``[n, 2]`` log-probabilities (``targets`` 1 = "yes"); 0.5 when the
    labels hold one answer only."""
    margin = lp[:, 1] - lp[:, 0]
    yes, no = margin[targets == 1], margin[targets == 0]
    if not len(yes) or not len(no):
        return 0.5
    above = (yes[:, None] > no[None, :]).double() + 0.5 * (yes[:, None] == no[None, :]).double()
    return float(above.mean())


@dataclass
class QuestionReport:
    """One adapted question: how many labels, what was chosen, and how it scores; ``part``: the head
    it was fitted on (``"open"``: a checkpoint's open part, :mod:`.open_questions`; else ``"own"``);
    ``turned``: the yes/no's answer was turned round (its labels show the checkpoint reads the
    statement upside down: :mod:`jevlaya_lab.decisions.adapt`, "A statement read upside down")."""

    id: Any
    type: str
    n: int
    method: str
    zero_shot_accuracy: float
    zero_shot_balanced: float
    zero_shot_ece: float
    cv_accuracy: float
    cv_balanced: float
    cv_ece: float
    cv_log_loss: dict[str, float]
    zero_shot_probs: list[list[float]] = field(repr=False, default_factory=list)
    cv_probs: list[list[float]] = field(repr=False, default_factory=list)
    targets: list[int] = field(repr=False, default_factory=list)
    part: str = "own"
    turned: bool = False

    @property
    def shown_method(self) -> str:
        """The method as the report shows it: ``"turned, linear-0.001"`` for a turned answer."""
        return f"turned, {self.method}" if self.turned else self.method


class AdaptationReport:
    """What :func:`~jevlaya_lab.decisions.adapt.adapt` fitted, on which head, and how it
    cross-validates, per question (``.questions``).

    Shows as a table in a notebook; ``to_frame()`` gives the same rows as a pandas DataFrame."""

    def __init__(self, questions: list[QuestionReport], seconds: float, model_id: str) -> None:
        self.questions = questions
        self.seconds = seconds
        self.model_id = model_id

    def __getitem__(self, qid: Any) -> QuestionReport:
        for row in self.questions:
            if row.id == qid or str(row.id) == str(qid):
                return row
        raise KeyError(qid)

    def rows(self) -> list[dict[str, Any]]:
        return [{"question": str(r.id), "type": r.type, "labels": r.n, "method": r.method, "turned": r.turned,
                 "part": r.part,
                 "zero-shot accuracy": round(r.zero_shot_accuracy, 3),
                 "cv accuracy": round(r.cv_accuracy, 3),
                 "zero-shot balanced": round(r.zero_shot_balanced, 3),
                 "cv balanced": round(r.cv_balanced, 3),
                 "zero-shot ECE": round(r.zero_shot_ece, 3), "cv ECE": round(r.cv_ece, 3)}
                for r in self.questions]

    def to_frame(self) -> Any:
        import pandas as pd

        return pd.DataFrame(self.rows())

    def __repr__(self) -> str:
        lines = [f"AdaptationReport({self.model_id!r}, {len(self.questions)} question(s), {self.seconds:.2f} s)"]
        for r in self.questions:
            lines.append(f"  {str(r.id)!s:<16} {r.type:<6} n={r.n:<3} {r.shown_method:<16} {r.part + ' part':<9} "
                         f"accuracy {r.zero_shot_accuracy:.2f} -> {r.cv_accuracy:.2f} (cv), balanced "
                         f"{r.zero_shot_balanced:.2f} -> {r.cv_balanced:.2f}, "
                         f"ECE {r.zero_shot_ece:.2f} -> {r.cv_ece:.2f}")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        head = ["question", "type", "labels", "method", "part", "accuracy zero-shot → cv", "balanced", "ECE"]
        body = "".join(
            "<tr>" + "".join(f"<td style='padding:0 .6em'>{escape(str(v))}</td>" for v in (
                r.id, r.type, r.n, r.shown_method, r.part, f"{r.zero_shot_accuracy:.2f} → {r.cv_accuracy:.2f}",
                f"{r.zero_shot_balanced:.2f} → {r.cv_balanced:.2f}", f"{r.zero_shot_ece:.2f} → {r.cv_ece:.2f}"))
            + "</tr>" for r in self.questions)
        th = "".join(f"<th style='text-align:left;padding:0 .6em'>{escape(h)}</th>" for h in head)
        note = ("<div style='color:var(--jp-content-font-color2,#666)'>"
                f"adapted {escape(self.model_id)} in {self.seconds:.2f} s; cv: cross-validated on the given "
                "labels</div>")
        return ("<div class='jevlaya' style='border:1px solid var(--jp-border-color2,rgba(128,128,128,.4));"
                "border-radius:4px;padding:.5em;color:var(--jp-content-font-color1,inherit)'>"
                f"<table style='border-collapse:collapse'><tr>{th}</tr>{body}</table>{note}</div>")
