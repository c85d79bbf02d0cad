"""The user-question benchmark's data (``tests/data/user_questions``, read by ``bench/user_questions.py``):
enough questions of both kinds in both halves, gold that can be scored, and a split that holds — no
locked statement, option name or instruction (nor a close paraphrase) is in the training data, the
training aliases, the presets or the dev half, and nothing in the package reads the benchmark."""

from __future__ import annotations

import ast
import functools
import json
import re
import sys
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from bench import user_questions as uq  # noqa: E402
from jevlaya_lab.decisions import presets  # noqa: E402
from jevlaya_lab.decisions.training.intents import load_intents  # noqa: E402

TRAINING = ROOT / "jevlaya_lab" / "decisions" / "training"
STOP = set("a an the this that these those is are was were be been it its of to in on for with by from at as "
           "or and not no any some about their them they there he she his her our us we you your i me my "
           "something someone has have had do does did can could would will should".split())


def _strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in _strings(k) + _strings(v)]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v)]
    return []


def _training_texts() -> list[str]:
    """Every text the training reads as a label, statement, description or alias: intents.json,
    bank.json, bank_multi.json, the string constants of the training modules and the presets."""
    texts = []
    for name in ("intents.json", "bank.json", "bank_multi.json"):
        texts += _strings(json.loads((TRAINING / "data" / name).read_text(encoding="utf-8")))
    for path in list(TRAINING.glob("*.py")) + [ROOT / "jevlaya_lab" / "decisions" / "presets.py"]:
        texts += [n.value for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                  if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    for make in presets.PRESETS.values():
        texts += _strings(make())
    return texts


def _words(text: str) -> list[str]:
    return re.findall(r"[^\W_]+", text.lower())


def _content(text: str) -> set[str]:
    return {w for w in _words(text) if w not in STOP}


def _runs(text: str, n: int = 5) -> set[tuple[str, ...]]:
    w = _words(text)
    return {tuple(w[i:i + n]) for i in range(len(w) - n + 1)}


def _question_texts(q: uq.UserQuestion) -> list[str]:
    """The wording a user wrote for ``q``: statement or instructions, option names and descriptions,
    translations."""
    raw = q.raw
    texts = [raw.get("statement") or raw["instructions"]]
    if q.kind == "choice":
        texts += [v[0] for v in raw["options"].values()]
        texts += [v[1] for v in raw["options"].values() if q.source == "states" and v[1]]
    for value in raw.get("translations", {}).values():
        texts += [value] if q.kind == "yesno" else [value[0], *value[1].values()]
    return texts


class _Index:
    """Texts indexed for :meth:`repeats`: normalised forms, 5-word runs and content-word sets."""

    def __init__(self, texts: list[str]) -> None:
        self.norm = {" ".join(_words(t)): t for t in texts}
        self.runs = {r: t for t in texts for r in _runs(t)}
        self.by_word: dict[str, list[tuple[set[str], str]]] = {}
        for t in texts:
            content = _content(t)
            if len(content) >= 3:
                for w in content:
                    self.by_word.setdefault(w, []).append((content, t))

    def repeats(self, text: str) -> str | None:
        """The indexed text that ``text`` repeats: equal up to case and punctuation, sharing a 5-word
        run, or (both 3+ content words) sharing at least 60% of their content words."""
        norm = " ".join(_words(text))
        if norm in self.norm:
            return self.norm[norm]
        for r in _runs(text):
            if r in self.runs:
                return self.runs[r]
        content = _content(text)
        if len(content) >= 3:
            for w in content:
                for other, t in self.by_word.get(w, ()):
                    if len(content & other) / len(content | other) >= 0.6:
                        return t
        return None


@functools.cache
def _training_index() -> _Index:
    return _Index(_training_texts())


def test_enough_questions_of_each_kind_in_both_halves():
    every = uq.load_questions(uq.HALVES)
    counts = Counter((q.kind, q.half) for q in every)
    assert counts[("yesno", "dev")] + counts[("yesno", "locked")] >= 40
    assert counts[("choice", "dev")] + counts[("choice", "locked")] >= 15
    assert min(counts.values()) >= 7 and len(counts) == 4
    assert len({q.id for q in every}) == len(every)
    for q in every:
        if q.kind == "choice":
            assert 3 <= len(q.option_keys) <= 8, q.id
    described = [q for q in every if q.kind == "choice" and isinstance(q.agent_question()["criteria"], dict)]
    assert described and len(described) < counts[("choice", "dev")] + counts[("choice", "locked")]
    # statements about properties of a message (tone, sender, content, request), not only intents
    assert sum(q.kind == "yesno" and q.source == "states" for q in every) >= 20
    assert sum(q.kind == "yesno" and q.source == "datasets" for q in every) >= 10


def test_default_reads_only_the_dev_half_and_bad_halves_are_refused():
    assert {q.half for q in uq.load_questions()} == {"dev"}
    with pytest.raises(ValueError, match="halves"):
        uq.load_questions(("test",))


def test_gold_on_the_hand_written_states_is_scorable():
    every = uq.load_questions(uq.HALVES)
    en, multi = uq.load_states("en"), uq.load_states("multi")
    tags = {q.raw["tag"] for q in every if q.kind == "yesno" and q.source == "states"}
    assert {t for s in en for t in s["tags"]} <= tags
    for q in every:
        if q.source != "states":
            continue
        for group in ("en", "multi") if q.languages() else ("en",):
            golds = [g for _, _, g in uq.gold_rows(q, group)]
            if q.kind == "yesno":
                assert sum(golds) >= 4 and len(golds) - sum(golds) >= 4, (q.id, group)
            else:
                assert len(set(golds)) >= 3, (q.id, group)
    assert len({s["lang"] for s in multi}) >= 5
    translated = {t for q in every if q.kind == "yesno" and q.languages() for t in [q.raw["tag"]]}
    assert {t for s in multi for t in s["tags"]} <= translated
    for q in every:
        if q.languages():
            assert set(q.languages()) == set(uq.LANGS), q.id


def test_a_negating_statement_holds_where_its_tag_is_not_listed():
    """A statement marked ``negates`` ("the writer doesn't ask us anything") is gold exactly where
    its tag's own statement is not, on every state, and both halves' readers use that gold."""
    every = {q.id: q for q in uq.load_questions(uq.HALVES)}
    negating = [q for q in every.values() if q.kind == "yesno" and q.raw.get("negates")]
    assert len(negating) >= 10 and {q.half for q in negating} == {"dev"}
    from bench import adapt

    adapted = {t["id"]: t for t in adapt.tasks("dev", None, 0)[0]}
    for q in negating:
        (plain,) = [p for p in every.values() if p.kind == "yesno" and p.raw.get("tag") == q.raw["tag"]
                    and not p.raw.get("negates")]
        for group in ("en", "multi") if q.languages() else ("en",):
            mine, theirs = uq.gold_rows(q, group), uq.gold_rows(plain, group)
            assert [t for _, t, _ in mine] == [t for _, t, _ in theirs]
            assert [g for *_, g in mine] == [not g for *_, g in theirs], (q.id, group)
        assert [g for _, g in adapted[q.id]["items"]] == [g for *_, g in uq.gold_rows(q, "en")]


def test_dataset_gold_names_real_intents():
    intents = load_intents()
    for q in uq.load_questions(uq.HALVES):
        if q.source != "datasets":
            continue
        ids = q.raw["intents"] if q.kind == "yesno" else [i for v in q.raw["options"].values() for i in v[1]]
        assert ids and set(ids) <= set(intents), q.id
        if q.kind == "yesno":
            assert {i.split("/")[0] for i in ids} <= set(q.raw["datasets"]), q.id
        else:
            assert len(ids) == len(set(ids)), q.id  # an intent is the gold of one option only


def test_locked_wording_is_not_trained_on_aliased_preset_or_in_the_dev_half():
    training = _training_index()
    dev = _Index([t for q in uq.load_questions(("dev",)) for t in _question_texts(q)])
    for q in uq.load_questions(("locked",)):
        for text in _question_texts(q):
            assert training.repeats(text) is None, (q.id, text, training.repeats(text))
            assert dev.repeats(text) is None, (q.id, text, dev.repeats(text))


def test_dev_wording_is_not_training_wording_either():
    training = _training_index()
    for q in uq.load_questions(("dev",)):
        for text in _question_texts(q):
            assert training.repeats(text) is None, (q.id, text, training.repeats(text))


def test_the_overlap_check_catches_a_paraphrase_and_a_copied_run():
    index = _Index(["The customer wants their money back for an order."])
    assert index.repeats("the customer wants their money back!") is not None
    assert index.repeats("Customer wants money back for the order") is not None  # same content words
    assert index.repeats("A sum of money is written in the message.") is None


def test_nothing_in_the_package_reads_the_benchmark():
    """Training and calibration may only read what the package names; the benchmark's folder is
    not among it (a tuning decision may read the dev half through bench/, never the locked one)."""
    for path in (ROOT / "jevlaya_lab").rglob("*.py"):
        assert "user_questions" not in path.read_text(encoding="utf-8"), path


def test_the_statement_lines_bench_refits_a_shared_offset_and_knows_its_ceiling() -> None:
    """``bench/statement_lines.py`` (the README's "where each statement's line falls"): statements whose
    log-odds all sit 2 too low read "no" to most true rows at 0.5; a refit on the other statements
    finds the shared offset and reaches each one's own best line, and the own line is a ceiling."""
    import random

    import torch

    sys.path.insert(0, str(ROOT))
    from bench import statement_lines

    rng = random.Random(0)
    statements = []
    for name in "abcde":
        gold = [rng.random() < 0.3 for _ in range(60)]
        answers = torch.tensor([(1.0 if g else -1.0) + rng.gauss(0, 0.6) - 2.0 for g in gold])
        statements.append((name, answers, (answers - answers.mean()) / answers.std(), gold))
    got = statement_lines.lines(statements)
    assert set(got) == {"shipped", "refit", "z", "refit+z", "own line"}
    mean = {k: sum(v) / len(v) for k, v in got.items()}
    assert mean["shipped"] < 0.75 < mean["refit"]
    assert all(r <= o + 1e-9 for r, o in zip(got["refit"], got["own line"]))
    assert mean["own line"] - mean["refit"] < 0.05
    assert statement_lines.balanced([2.0, -1.0, 0.5, -3.0], [True, True, False, False]) == 0.5


def test_the_line_fit_moves_an_offset_line_and_is_fit_on_the_other_statements() -> None:
    """``statement_lines.line_fit`` (``--fit-line``): standardised answers whose true rows sit above 1
    read "yes" to far too many rows at 0; the line fit on the other statements moves the threshold
    near 1 for each, and the line fit on all of them puts it there too."""
    import random

    import torch

    from bench import statement_lines

    rng = random.Random(1)
    statements = []
    for name in "abcdef":
        x = [rng.gauss(0, 1) for _ in range(80)]
        gold = [v + rng.gauss(0, 0.3) > 1.0 for v in x]
        statements.append((name, torch.tensor(x), gold))
    got, (scale, bias) = statement_lines.line_fit(statements)
    n = len(statements)
    as_is, left_out = got["as is"][:n], got["left out"][:n]
    assert sum(left_out) / n > sum(as_is) / n + 0.05
    assert scale > 0 and abs(-bias / scale - 1.0) < 0.3
    assert len(got["left out"]) == 2 * n  # balanced accuracies, then ECEs


def test_the_identity_line_copy_reads_mini_ens_open_part_against_the_reference(tmp_path) -> None:
    """``statement_lines._identity_line_copy``: the copy's open part answers an unseen statement with
    its blended answer standardised against the reference texts, so on those texts themselves the
    log-odds have mean 0 and spread 1 (the statement is far from every training text); the shipped
    checkpoint's answers there do not."""
    import statistics

    from bench import statement_lines
    from jevlaya_lab.decisions import bundled
    from jevlaya_lab.decisions.agent import Agent

    reference = statement_lines.reference_texts(24, 0)
    statement = {"type": "noul", "instructions": "The writer mentions a pet animal by its name."}
    temperature = statement_lines._identity_line_copy("mini-en", reference, tmp_path / "ck")
    copy = statement_lines.log_odds(Agent(str(tmp_path / "ck")), reference, statement)
    assert abs(statistics.mean(copy)) < 0.05 and abs(statistics.stdev(copy) - 1.0) < 0.05, (temperature, copy[:4])
    shipped = statement_lines.log_odds(Agent(str(bundled.checkpoint_dir("mini-en"))), reference, statement)
    assert abs(statistics.mean(shipped)) > 0.2 or abs(statistics.stdev(shipped) - 1.0) > 0.2


def test_the_folded_fallback_answers_an_unseen_statement_through_the_fitted_line(tmp_path) -> None:
    """``statement_lines.folded_fallback`` (``--fit-fallback --ship``): a tiny checkpoint whose unseen
    statement is answered by its fallback gives log-odds ``L``; with the folded fallback written into
    its config it gives ``w * L + c`` (up to the statement's small trained share)."""
    import torch

    from bench import statement_lines
    from jevlaya_lab.decisions.agent import Agent
    from jevlaya_lab.decisions.checkpoint import save_checkpoint
    from jevlaya_lab.decisions.testing import fixed_prior_parts

    statement = {"type": "noul", "instructions": "The writer attaches a photograph."}
    prior = {"rank": 0, "reference": 3, "anchors": 2, "gate": [0.9, 60.0], "fallback": [1.5, 0.25, 0.0]}
    parts = fixed_prior_parts(prior, anchors=("The customer asks for money back.", "refund"),
                              unseen=(statement["instructions"],))
    parts.config.temperature = [0.8, 1.2, 1.7]  # the noul temperature, the third, is the one folded in
    path = save_checkpoint(tmp_path / "ck", *parts)
    states = ["my invoice is wrong", "the app crashes at login", "hi, please refund me", "where is my parcel"]
    before = torch.tensor(statement_lines.log_odds(Agent(path), states, statement))
    config_path = path / "rl_agent_config.json"
    config = json.loads(config_path.read_text())
    w, c = 1.6, 0.7
    config["similarity_prior"]["fallback"] = statement_lines.folded_fallback(
        config["similarity_prior"]["fallback"], w, c, float(config["temperature"][2]))
    config_path.write_text(json.dumps(config))
    after = torch.tensor(statement_lines.log_odds(Agent(path), states, statement))
    assert torch.allclose(after, w * before + c, atol=0.02), (before, after)
    assert not torch.allclose(after, before, atol=0.3)


def test_the_five_language_adapt_bench_asks_each_wording_over_every_language() -> None:
    """``bench/adapt.py --languages``: each translated question of the half once per language, in that
    language's wording, over the states of all five languages, each state with its gold answer."""
    from bench import adapt

    states = uq.load_states("multi")
    for half in uq.HALVES:
        found = adapt.language_tasks(half)
        translated = [q for q in uq.load_questions((half,)) if q.languages()]
        assert translated and len(found) == len(translated) * len(uq.LANGS)
        for q in translated:
            for lang in uq.LANGS:
                (t,) = [t for t in found if t["id"] == f"{lang}/{q.id}"]
                assert t["kind"] == q.kind and t["question"] == q.agent_question(lang)
                texts = [x for x, _ in t["items"]]
                assert {s["lang"] for s in states if s["text"] in texts} == set(uq.LANGS)
                if q.kind == "yesno":
                    assert t["question"]["instructions"] == q.raw["translations"][lang]
                    assert t["items"] == [(s["text"], uq.holds(q.raw, s)) for s in states]
                else:
                    names = q.raw["translations"][lang][1]
                    assert t["items"] == [(s["text"], names[s[q.raw["field"]]]) for s in states
                                          if s.get(q.raw["field"]) is not None]


def test_the_statement_lines_bench_rewords_any_statement_keeping_its_sense() -> None:
    """``--negation`` and ``--rewordings`` put a statement inside a longer sentence: its first letter
    is lowered except for "I" and an acronym, its full stop kept once; the writer rewording makes the
    subject "The writer" and first-person words third-person."""
    from bench import statement_lines as sl

    assert sl.negated("A sum of money is written in the message.") == \
        "It is not true that a sum of money is written in the message."
    assert sl.said_worded("I'm trying to get a card.") == "The message says that I'm trying to get a card."
    assert sl.said_worded("SMS codes never arrive") == "The message says that SMS codes never arrive."
    assert sl.writer_worded("They're happy with something we did.") == "The writer is happy with something we did."
    assert sl.writer_worded("My card got refused.") == "The writer's card got refused."
    assert sl.writer_worded("The bank wants proof of who I am.") == "The bank wants proof of who they are."
    assert sl.writer_worded("A file is attached.") == "A file is attached."
