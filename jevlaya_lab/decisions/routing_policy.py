"""How a request becomes a routing decision: the precedence chain and the request checks.

:class:`RoutingPolicy` walks the chain (explicit ``model`` > ``task`` > workflow (opt-in) >
``lang`` > ``lang_guess`` (per call, then the Router's) > detection) and writes a
:class:`Decision` whose ``reason`` is a sentence a person understands. It never loads a model;
the :class:`~jevlaya_lab.decisions.router.Router` fires ``on_route`` around it.

How the chain decides:
- Detection sends non-Latin text, Latin text that reads as another language (or surely not as
  English, even when the language itself is undecided) and states with a foreign segment (one
  Spanish field in an English ticket) to the multilingual checkpoint; English to the English
  one; no letters or an undecided language without such evidence to the default.
- When the Router has no checkpoint registered under its ``english`` / ``multilingual`` names,
  those routes fall back to the default, and the reason says so.
- ``lang`` / ``lang_guess`` take BCP-47-like tags (``"pt-BR"``, ``"en_US"``); only the primary
  subtag matters. A guesser returning ``None`` abstains and the next rule applies.
- Workflows are declared by the user (``workflows={"triage": question_ids}`` plus
  ``tasks={"triage": "<model>"}``; :meth:`Router.laya` declares Laya's four). As in Laya, a
  question-id set matches a workflow only when it is exactly that workflow's set; the match is
  recorded in the decision's ``workflow`` whatever decides, and decides only with
  ``auto_task_detection=True``.
- ``task`` names a declared task or, as in Laya, a checkpoint name or alias.
- ``lang="und"`` / ``"mul"`` / ``"zxx"`` (and a guesser returning one of them) decide nothing,
  as in Laya. No letters or an undecided language go to the default: ``Router.laya()`` uses
  Laya's (``multilingual``); the bundled ``Router()`` keeps ``english``, because mini-en reads
  English far better than mini-multi and short English states are often undecided.
- Every decision carries ``repo``: where the chosen checkpoint comes from (hub id with its
  subfolder, directory, or ``bundled:<name>``), as Laya's decisions do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from jevlaya_lab.decisions import detect as detection
from jevlaya_lab.decisions.budget import check_budget
from jevlaya_lab.decisions.registry import Registry
from jevlaya_lab.decisions.results import Decision, decision_card

__all__ = ["REQUEST_KEYS", "Decision", "RoutingPolicy", "decision_card", "primary_subtag"]

REQUEST_KEYS = ("state", "questions", "model", "task", "lang", "lang_guess", "max_len", "head_max_len")
_REQUEST_KEY_SET = frozenset(REQUEST_KEYS)
_ENGLISH_CODES = {"en", "eng", "english"}
LANGUAGE_AGNOSTIC_CODES = frozenset({"und", "mul", "zxx", "c", "posix"})
"""``lang`` / ``lang_guess`` values that name no language (undetermined, multiple, no linguistic
content, the C/POSIX locale): as in Laya 0.4.15 they decide nothing and the next rule applies."""


class RoutingPolicy:
    """The precedence chain of one Router, over its registry (see the module docstring)."""

    def __init__(
        self,
        registry: Registry,
        *,
        default: str | None = None,
        english: str = "english",
        multilingual: str = "multilingual",
        tasks: Mapping[str, str] | None = None,
        workflows: Mapping[str, Iterable[str]] | None = None,
        lang_guess: str | Callable[[Any], str | None] | None = None,
        auto_task_detection: bool = False,
    ):
        self.registry = registry
        if default is None:
            default = english if english in registry else registry.names[0]
        self.default = registry.resolve(default)
        self.english = english
        self.multilingual = multilingual
        self.tasks: dict[str, str] = {}
        for task, model in (tasks or {}).items():
            self.tasks[str(task).casefold()] = registry.resolve(model)
        self.workflows: dict[str, frozenset[str]] = {}
        for name, ids in (workflows or {}).items():
            if str(name).casefold() not in self.tasks:
                raise ValueError(
                    f"workflows[{name!r}]: no checkpoint for this workflow; add "
                    f"tasks={{{name!r}: '<model>'}}"
                )
            self.workflows[str(name)] = frozenset(ids)
        check_lang_guess(lang_guess, "lang_guess")
        self.lang_guess = lang_guess
        self.auto_task_detection = bool(auto_task_detection)
        self._targets: dict[str, tuple[tuple[Any, ...], tuple[str, str]]] = {}  # see _language_target

    def settle(self, chosen: Any, original: Decision) -> Decision:
        """Accept what an ``on_route`` hook left in ``ctx.decision``; aliases become canonical."""
        if isinstance(chosen, str):
            model = self.registry.resolve(chosen)
            return Decision(model=model, source="hook", reason=f"A hook on on_route chose {model!r}.",
                            detection=None, workflow=None, repo=self.registry.repo(model))
        if not isinstance(chosen, Mapping) or "model" not in chosen:
            raise TypeError(
                f"on_route: ctx.decision must be a decision dict with a 'model' key or a "
                f"checkpoint name, got {type(chosen).__name__} {chosen!r}"
            )
        decision = chosen if isinstance(chosen, Decision) else Decision(chosen)
        decision["model"] = self.registry.resolve(decision["model"])
        if decision is not original:
            decision.setdefault("source", "hook")
            decision.setdefault("reason", f"A hook on on_route chose {decision['model']!r}.")
            decision.setdefault("detection", None)
            decision.setdefault("workflow", None)
            decision["repo"] = self.registry.repo(decision["model"])
        return decision

    def decide(self, request: Mapping[str, Any], *,
               explain: bool = False) -> tuple[Decision, list[dict[str, Any]] | None]:
        """Walk the precedence chain; returns the decision and, with ``explain=True``, the steps
        considered (``None`` otherwise: nobody reads them, so they are not written)."""
        get = request.get
        if not explain and self.detects_only and get("model") is None and get("task") is None \
                and get("lang") is None and get("lang_guess") is None:
            return self.by_detection(request["state"], get("questions")), None
        steps: list[dict[str, Any]] | None = [] if explain else None
        matched = self._match_workflow(request.get("questions"))

        model = request.get("model")
        if model is not None:
            canonical = self.registry.resolve(model)
            alias = f" (an alias of {canonical!r})" if canonical != model else ""
            return self._decided(steps, matched, canonical, "model",
                                 f"The caller asked for the {model!r} checkpoint{alias}.")
        if steps is not None:
            steps.append({"step": "model", "outcome": "not given"})

        task = request.get("task")
        if task is not None:
            target = self._task_model(task)
            return self._decided(steps, matched, target, "task",
                                 f"The task {task!r} runs on the {target!r} checkpoint.")
        if steps is not None:
            steps.append({"step": "task", "outcome": "not given"})

        if self.auto_task_detection:
            if matched is not None:
                target = self.tasks[matched.casefold()]
                return self._decided(steps, matched, target, "workflow",
                                     f"The question ids match the {matched!r} workflow, which runs on "
                                     f"the {target!r} checkpoint.")
            if steps is not None:
                steps.append({"step": "workflow", "outcome": "no workflow matches the question ids"})
        elif steps is not None:
            steps.append({"step": "workflow", "outcome": "off (auto_task_detection=False)"})

        lang = request.get("lang")
        if lang is not None and primary_subtag(lang, "lang") not in LANGUAGE_AGNOSTIC_CODES:
            target, why = self._language_target(primary_subtag(lang, "lang"))
            return self._decided(steps, matched, target, "lang", f"The caller said the text is {why}.")
        if steps is not None:
            steps.append({"step": "lang", "outcome": "not given" if lang is None else
                          f"{lang!r} names no language, so it decides nothing"})

        guessed = False
        for where, guesser in _guessers(request.get("lang_guess"), self.lang_guess):
            guessed = True
            code = guesser(request["state"]) if callable(guesser) else guesser
            if code is None or primary_subtag(code, f"lang_guess ({where})") in LANGUAGE_AGNOSTIC_CODES:
                if steps is not None:
                    steps.append({"step": "lang_guess", "outcome": f"the {where}'s guesser abstained"})
                continue
            target, why = self._language_target(primary_subtag(code, f"lang_guess ({where})"))
            return self._decided(steps, matched, target, "lang_guess",
                                 f"The language guesser says the text is {why}.")
        if steps is not None and not guessed:
            steps.append({"step": "lang_guess", "outcome": "not given"})

        found = detection.detect(request["state"])
        target, reason = self._detection_target(found)
        return self._decided(steps, matched, target, "detection", reason, found)

    @property
    def detects_only(self) -> bool:
        """Whether a request that names no ``model``, ``task``, ``lang`` or ``lang_guess`` is
        decided by detection alone (no Router-level guesser, no workflow auto-detection)."""
        return self.lang_guess is None and not self.auto_task_detection

    def by_detection(self, state: Any, questions: Any = None) -> Decision:
        """The decision of the detection rule, for a request that names nothing when
        :attr:`detects_only` (the rules before it cannot apply, so none is walked)."""
        found = detection.detect(state)
        target, reason = self._detection_target(found)
        return self._decided(None, self._match_workflow(questions), target, "detection", reason, found)[0]

    def _decided(self, steps: list[dict[str, Any]] | None, matched: str | None, model: str, source: str, reason: str,
                 found: dict[str, Any] | None = None) -> tuple[Decision, list[dict[str, Any]] | None]:
        """The decision of rule ``source``; ``matched`` is the workflow the question ids match."""
        if steps is not None:
            steps.append({"step": source, "outcome": "decided", "model": model})
        workflow = None if source in ("model", "task") else matched  # as Laya records it
        return Decision(model=model, source=source, reason=reason, detection=found,
                        workflow=workflow, repo=self.registry.repo(model)), steps

    def _task_model(self, task: Any) -> str:
        if isinstance(task, str):
            key = task.strip().casefold()
            for candidate in (key, key.replace("_", "-"), key.replace("-", "_")):
                if candidate in self.tasks:
                    return self.tasks[candidate]
            if task in self.registry:  # as in Laya, a checkpoint name or alias is a task too
                return self.registry.resolve(task)
        known = ", ".join(repr(t) for t in self.tasks) or "none (pass tasks={...} to Router)"
        raise ValueError(f"task: unknown task {task!r}; known tasks: {known}; a checkpoint name "
                         f"or alias works too ({', '.join(map(repr, self.registry.names))})")

    def _match_workflow(self, questions: Any) -> str | None:
        """The workflow whose question-id set is exactly this one (Laya's rule), else ``None``."""
        if questions is None or not self.workflows or not isinstance(questions, Mapping) or not questions:
            return None
        ids = set(questions)
        return next((name for name, known in self.workflows.items() if ids == known), None)

    def _language_target(self, code: str) -> tuple[str, str]:
        """The checkpoint for language ``code`` and the end of a sentence saying why.

        Both depend only on the code, the registry and the policy's names, so they are kept per
        code (at most 256 codes) and made again when the registry (its ``version``) or a name
        changes. A memo of this small function, not of any state's decision.
        """
        stamp = (self.registry.version, self.english, self.multilingual, self.default)
        kept = self._targets.get(code)
        if kept is not None and kept[0] == stamp:
            return kept[1]
        if len(self._targets) >= 256:
            self._targets.clear()
        found = self._find_language_target(code)
        self._targets[code] = (stamp, found)
        return found

    def _find_language_target(self, code: str) -> tuple[str, str]:
        label = f"{detection.language_name(code)} ({code})"
        role, wanted = ("English", self.english) if code in _ENGLISH_CODES else ("multilingual", self.multilingual)
        if wanted in self.registry:
            target = self.registry.resolve(wanted)
            return target, f"{label}, so the {role} checkpoint {target!r} reads it"
        return self.default, (f"{label}; no {wanted!r} checkpoint is registered, so the default "
                              f"{self.default!r} reads it")

    def _detection_target(self, found: dict[str, Any]) -> tuple[str, str]:
        default = self.default
        if found["script"] is None:
            return default, f"The state has no letters to read, so the default checkpoint {default!r} answers."
        mixed = found["mixed_segment"]
        if mixed is not None and mixed["not_english"]:
            language = mixed["language"]
            if language:
                what = detection.language_name(language)
            else:
                what = "not English" if mixed["script"] == "Latin" else f"in {mixed['script']} script"
            target, _ = self._language_target(language or "und")
            return target, (f"Part of the state ({mixed['path']}) is {what}, unlike the rest, so "
                            f"the checkpoint {target!r} reads the whole state.")
        if found["script"] != "Latin":
            language = found["language"]
            target, _ = self._language_target(language or "und")
            named = f" ({detection.language_name(language)})" if language else ""
            return target, (f"The text is written mostly in {found['script']} script{named}, so the "
                            f"checkpoint {target!r} reads it.")
        if found["language"] is None and found["not_english"]:
            target, _ = self._language_target("und")
            evidence = found["evidence"].removesuffix("; not English")
            return target, (f"The text does not read as English ({evidence}), so the "
                            f"checkpoint {target!r} reads it.")
        if found["language"] is None:
            return default, (f"The language could not be decided ({found['evidence']}), so the "
                             f"default checkpoint {default!r} answers.")
        target, why = self._language_target(found["language"])
        return target, f"The text reads as {why}."

    # -- validation ------------------------------------------------------------------------
    def check_requests(self, requests: Any, *, need_questions: bool) -> None:
        if isinstance(requests, (str, bytes, Mapping)) or not isinstance(requests, Sequence):
            raise TypeError(
                f"requests: expected a list of request dicts, got {type(requests).__name__}; "
                f"write [{{'state': ..., 'questions': ...}}, ...] (or use predict for one state)"
            )
        parsed: dict[int, Any] = {}
        for i, request in enumerate(requests):
            self.check_request(request, f"requests[{i}]", need_questions=need_questions, parsed=parsed)

    def check_request(self, request: Any, where: str, *, need_questions: bool,
                      parsed: dict[int, Any] | None = None) -> None:
        """A caller's request: a mapping with known keys (:data:`REQUEST_KEYS`) and valid values."""
        if not isinstance(request, Mapping):
            raise TypeError(f"{where}: expected a dict with 'state' and 'questions', got {type(request).__name__}")
        if request.keys() - _REQUEST_KEY_SET:
            unknown = [k for k in request if k not in REQUEST_KEYS]
            raise ValueError(f"{where}: unknown key(s) {unknown}; a request may have {list(REQUEST_KEYS)}")
        self.check_fields(request, where, need_questions=need_questions, parsed=parsed)

    def check_state(self, state: Any, questions: Any, where: str, *, need_questions: bool,
                    parsed: dict[int, Any] | None = None) -> None:
        """A request's ``state`` and ``questions``."""
        if state is None:
            raise TypeError(f"{where}['state']: missing or None; pass a str, dict or list to decide about")
        if questions is None and need_questions:
            raise TypeError(f"{where}['questions']: missing; pass a dict question_id -> definition")
        if questions is not None:
            if not isinstance(questions, Mapping):
                raise TypeError(f"{where}['questions']: expected a dict question_id -> definition, "
                                f"got {type(questions).__name__}")
            if need_questions:
                validate_questions(questions, where, parsed if parsed is not None else {})

    def check_fields(self, request: Mapping[str, Any], where: str, *, need_questions: bool,
                     parsed: dict[int, Any] | None = None) -> None:
        """The values of a request whose keys are known (a method built it from its own
        arguments); a field that is not given costs one lookup."""
        self.check_state(request.get("state"), request.get("questions"), where,
                         need_questions=need_questions, parsed=parsed)
        model, task, lang = request.get("model"), request.get("task"), request.get("lang")
        if model is not None or task is not None or lang is not None:
            for key, value in (("model", model), ("task", task), ("lang", lang)):
                if value is not None and not isinstance(value, str):
                    raise TypeError(f"{where}['{key}']: expected a string, got {type(value).__name__} {value!r}")
            if model is not None:
                self.registry.resolve(model)
            if task is not None:
                self._task_model(task)
            if lang is not None:
                primary_subtag(lang, f"{where}['lang']")
        if request.get("lang_guess") is not None:
            check_lang_guess(request["lang_guess"], f"{where}['lang_guess']")
        for key in ("max_len", "head_max_len"):
            if request.get(key) is not None:
                check_budget(f"{where}['{key}']", request[key], optional=True)


def _guessers(per_call: Any, router: Any) -> tuple[tuple[str, Any], ...]:
    """The language guessers given, the call's first: ``(where, guesser)`` pairs."""
    return tuple((where, guesser) for where, guesser in (("call", per_call), ("router", router))
                 if guesser is not None)


def check_lang_guess(value: Any, where: str) -> None:
    if value is not None and not callable(value):
        primary_subtag(value, where)


def primary_subtag(code: Any, where: str) -> str:
    """``"en-US"`` → ``"en"``; a ``ValueError`` for what is not a language tag."""
    if not isinstance(code, str):
        raise TypeError(f"{where}: expected a language code like 'en' or 'es', got {type(code).__name__} {code!r}")
    primary = code.strip().replace("_", "-").split("-")[0].split(".")[0].casefold()
    if not primary.isalpha() or not 2 <= len(primary) <= 8:
        raise ValueError(f"{where}: {code!r} is not a language code; pass e.g. 'en', 'es', 'pt-BR'")
    return primary



def validate_questions(questions: Mapping[str, Any], where: str, parsed: dict[int, Any]) -> None:
    """Check question definitions before anything loads (each distinct dict once per call)."""
    if id(questions) in parsed:
        return
    from jevlaya_lab.decisions.questions import parse_questions

    try:
        parse_questions(questions)
    except (TypeError, ValueError) as exc:
        exc.add_note(f"in {where}['questions']")
        raise
    parsed[id(questions)] = questions
