"""``decide(df, questions, ...)``: typed decisions over every row of a pandas or Dask DataFrame.

The rows are read in batches of ``batch_size``; each batch is one ``predict_batch`` call, so the
hooks of the Agent or Router run for every row as usual while a timeline of a table run shows one
span per batch rather than one line per row. The result keeps the input's index and has, per
question, its answer column and ``<question>.p``:

- a choice: a ``category`` column whose categories are the question's labels, in order;
- a yes/no (``noul``): a nullable ``boolean`` column, true when P(yes) >= 0.5;
- a score: a ``float64`` column, the expected level (as ``predict`` returns it);
- ``<question>.p``: the probability of the answer shown (``answer_confidence``: the chosen label's,
  the most likely level's, or the larger of P(yes) and P(no)), kept on abstained rows too, so
  ``df["q.p"] < min_confidence`` is exactly the rows that abstained;
- with a Router, ``checkpoint``: the checkpoint that answered the row.

Where ``min_confidence`` abstains the answer is missing (``pd.NA`` / ``NaN``).

On a ``dask.dataframe.DataFrame`` the same call returns a lazy Dask DataFrame with a declared
``meta``; each partition is answered on a worker by a model that worker process loaded once and
keeps (a per-process cache keyed by the checkpoint source), so no torch module is ever pickled
into a task. That is why the Dask form takes ``checkpoint=`` (a source every worker can load) or a
picklable ``router=`` factory rather than a loaded Agent.
"""

from __future__ import annotations

import atexit
import gc
import hashlib
import math
import os
import pickle
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd

from jevlaya_lab.frames.errors import FrameError

__all__ = ["decide", "worker_models"]

DEFAULT_BATCH_SIZE = 64

# -- the per-process model cache (what a Dask worker keeps between tasks) ------------------------
_CACHE_LOCK = threading.Lock()
_CACHE: dict[tuple[Any, ...], Any] = {}
_LOADS: dict[str, int] = {}
_exit_step_registered = False


def _cached(key: tuple[Any, ...], label: str, make: Callable[[], Any]) -> Any:
    """The model for ``key`` in this process, made by ``make()`` the first time only."""
    with _CACHE_LOCK:  # a worker may run several tasks at once in threads: load once
        found = _CACHE.get(key)
        if found is None:
            _register_the_exit_step()
            found = _CACHE[key] = make()
            _LOADS[label] = _LOADS.get(label, 0) + 1
        return found


def _register_the_exit_step() -> None:
    """:func:`_leave_without_a_last_collection` as an exit step, once, in a Dask worker process."""
    global _exit_step_registered
    if not _exit_step_registered and _on_dask_worker():
        atexit.register(_leave_without_a_last_collection)
        _exit_step_registered = True


def _on_dask_worker() -> bool:
    if "distributed" not in sys.modules:
        return False
    try:
        sys.modules["distributed"].get_worker()
    except ValueError:  # not in a worker's task
        return False
    return True


def _leave_without_a_last_collection() -> None:
    """At a Dask worker's exit: ``gc.freeze()``, so the interpreter's last collections skip what was
    live when the exit began.

    A worker's nanny kills the worker process if it is still alive 4 s after it was asked to
    stop, and the kill prints a warning in the cell that closed the cluster. A process that loaded a
    checkpoint holds torch and transformers, about 200,000 objects the collector walks again at
    interpreter teardown: 1.6-2.0 s of an idle 2-core machine's time, over 4 s on a busy one; frozen,
    the teardown takes 0.35-0.4 s (``bench/frames.py`` prints the cluster's close time). Nothing this
    skips must run: what has to be closed at exit (a worker's Broker and its journal) is closed by its
    own exit step, explicitly, not by the collector; memory is the operating system's to reclaim.
    Registered once, by the first model a worker process loads."""
    gc.freeze()


def worker_models() -> dict[str, Any]:
    """What this process loaded for table runs: ``{"pid": ..., "loads": {source: times}}``.

    Run it on every Dask worker with ``client.run(worker_models)`` to see that each worker process
    loaded each checkpoint once however many partitions it answered."""
    with _CACHE_LOCK:
        return {"pid": os.getpid(), "loads": dict(_LOADS)}


def _source_key(source: Any) -> Any:
    if isinstance(source, tuple):
        return tuple(_source_key(part) for part in source)
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    raise TypeError(f"checkpoint={source!r}: expected a bundled name, a checkpoint directory, a hub id "
                    f"or (directory_or_repo, subfolder), got {type(source).__name__}")


def _factory_key(factory: Callable[[], Any]) -> Any:
    qualname = getattr(factory, "__qualname__", "")
    if qualname and "<" not in qualname:
        return (getattr(factory, "__module__", ""), qualname)
    try:  # a lambda or a local function: key it by its pickled form (the same on every worker)
        import cloudpickle

        return hashlib.sha256(cloudpickle.dumps(factory)).hexdigest()
    except Exception:  # noqa: BLE001 - no cloudpickle: plain pickle, or this object only
        try:
            return hashlib.sha256(pickle.dumps(factory)).hexdigest()
        except Exception:  # noqa: BLE001
            return ("object", id(factory))


class _Model:
    """What answers the rows: an Agent or a Router, given, or made (once per process)."""

    def __init__(self, *, agent: Any = None, router: Any = None, checkpoint: Any = None) -> None:
        given = [name for name, value in (("agent", agent), ("router", router), ("checkpoint", checkpoint))
                 if value is not None]
        if len(given) != 1:
            raise TypeError("decide(): pass exactly one of agent=, router= or checkpoint= "
                            f"(got {', '.join(given) if given else 'none'}); e.g. checkpoint='mini-en'")
        self.agent, self.router_factory, self.router, self.checkpoint = agent, None, None, checkpoint
        if router is not None:
            if hasattr(router, "predict_batch") and hasattr(router, "route"):
                self.router = router
            elif callable(router):
                self.router_factory = router
            else:
                raise TypeError(f"router={router!r}: expected a Router or a function returning one "
                                "(router=Router)")
        if agent is not None and not hasattr(agent, "predict_batch"):
            raise TypeError(f"agent={agent!r}: expected an Agent (jevlaya_lab.load('mini-en')); "
                            "to load one by name pass checkpoint='mini-en'")
        if checkpoint is not None:
            self.checkpoint_key = _source_key(checkpoint)

    @property
    def routed(self) -> bool:
        return self.router is not None or self.router_factory is not None

    def for_workers(self) -> _Model:
        """This model as it travels to Dask workers: a source or a factory, never loaded weights."""
        if self.agent is not None or self.router is not None:
            what = "agent" if self.agent is not None else "router"
            raise TypeError(f"decide(dask_df, {what}=...): a loaded {what.capitalize()} would be pickled "
                            "into every task; pass checkpoint=<its source> (e.g. checkpoint='mini-en' or "
                            "a checkpoint directory every worker can read) or router=Router (a function "
                            "each worker calls once)")
        return self

    def resolve(self) -> Any:
        """The Agent or Router to call, loaded in this process at most once per source."""
        if self.agent is not None:
            return self.agent
        if self.router is not None:
            return self.router
        if self.router_factory is not None:
            factory = self.router_factory
            label = f"router:{getattr(factory, '__qualname__', repr(factory))}"
            return _cached(("router", _factory_key(factory)), label, factory)
        from jevlaya_lab.decisions.agent import load

        source = self.checkpoint
        key = self.checkpoint_key
        return _cached(("checkpoint", key), str(key), lambda: load(source))


# -- input checks ------------------------------------------------------------------------------
def _is_dask(df: Any) -> bool:
    return type(df).__module__.startswith("dask") and hasattr(df, "map_partitions")


def _check_columns(columns: Sequence[Any], fields: str | dict[str, Any], call: str) -> None:
    wanted = [fields] if isinstance(fields, str) else list(fields.values())
    known = list(columns)
    for column in wanted:
        if column not in known:
            raise FrameError(f"{call}(state=...): the frame has no column {column!r}; its columns are "
                             f"{known}; name one of them (state={known[0]!r})" if known else
                             f"{call}(state=...): the frame has no column {column!r} (it has no columns)")


def state_fields(columns: Sequence[Any], state: Any, call: str = "decide") -> str | dict[str, Any]:
    """``state`` checked against the frame's columns: a column name, or a map state field -> column.

    Without ``state`` a frame of one column uses it; any other frame must say which column(s) the
    questions read, since guessing among several text columns would answer the wrong text."""
    known = list(columns)
    if state is None:
        if len(known) == 1 and isinstance(known[0], str):
            return known[0]
        raise FrameError(f"{call}(state=...): the frame has columns {known}; name the column the questions "
                         "read (state='text') or map state fields to columns "
                         "(state={'subject': 'subject', 'body': 'body'})")
    if isinstance(state, str):
        fields: str | dict[str, Any] = state
    elif isinstance(state, Mapping):
        if not state:
            raise FrameError(f"{call}(state={{}}): map at least one state field to a column")
        fields = {str(field): column for field, column in state.items()}
    else:
        raise TypeError(f"{call}(state={state!r}): expected a column name or a dict state field -> column, "
                        f"got {type(state).__name__}")
    _check_columns(known, fields, call)
    return fields


def _strings(df: pd.DataFrame, column: Any, call: str) -> list[Any]:
    values = df[column].tolist()
    bad = [i for i, value in enumerate(values) if not isinstance(value, str)]
    if bad:
        value = values[bad[0]]
        missing = value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))
        what = f"a missing value ({value!r})" if missing else f"{type(value).__name__} {value!r}"
        raise FrameError(f"{call}(): row {df.index[bad[0]]!r} holds {what} in column "
                         f"{column!r}, not a string ({len(bad)} row(s) like it); convert or fill them first, "
                         f"e.g. df[{column!r}] = df[{column!r}].fillna('').astype(str), or drop them")
    return values


def states_of(df: pd.DataFrame, fields: str | dict[str, Any], call: str = "decide") -> list[Any]:
    """The state of every row: the column's text, or a dict state field -> that column's text."""
    if isinstance(fields, str):
        return _strings(df, fields, call)
    columns = {field: _strings(df, column, call) for field, column in fields.items()}
    return [dict(zip(columns, values)) for values in zip(*columns.values())]


def _check_batch_size(batch_size: Any) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size={batch_size!r}: must be a positive int, e.g. {DEFAULT_BATCH_SIZE}")
    return batch_size


def _parse(questions: Any) -> tuple[Any, ...]:
    from jevlaya_lab.decisions.questions import parse_questions

    if not isinstance(questions, Mapping) or not questions:
        raise TypeError(f"decide(questions={questions!r}): expected a non-empty dict question_id -> definition "
                        "(e.g. jevlaya_lab.presets.triage_questions())")
    return parse_questions(questions)


# -- results -> columns ----------------------------------------------------------------------------
def _p_column(qid: Any) -> str:
    return f"{qid}.p"


def empty_frame(parsed: Sequence[Any], routed: bool, index: pd.Index | None = None) -> pd.DataFrame:
    """The result's columns with their dtypes and no rows (the Dask ``meta``)."""
    return answers_frame([], pd.RangeIndex(0) if index is None else index[:0], parsed, routed)


def answers_frame(results: Sequence[Mapping[str, Any]], index: pd.Index, parsed: Sequence[Any],
                  routed: bool) -> pd.DataFrame:
    """One row per result, the columns described in the module docstring."""
    nan = math.nan
    data: dict[str, Any] = {}
    for q in parsed:
        answers = [(result.get("answers") or {}).get(q.id) for result in results]
        kept = [a if isinstance(a, Mapping) and not a.get("low_confidence") else None for a in answers]
        probs = [float(a["answer_confidence"]) if isinstance(a, Mapping) and a.get("answer_confidence") is not None
                 else nan for a in answers]
        name = str(q.id) if not isinstance(q.id, str) else q.id
        if q.type == "choice":
            data[name] = pd.Categorical([None if a is None else a.get("choice") for a in kept],
                                        categories=list(q.labels))
        elif q.type == "noul":
            data[name] = pd.array([pd.NA if a is None else float(a.get("noul", 0.0)) >= 0.5 for a in kept],
                                  dtype="boolean")
        else:
            data[name] = pd.array([nan if a is None else float(a.get("score", nan)) for a in kept], dtype="float64")
        data[_p_column(name)] = pd.array(probs, dtype="float64")
    if routed:
        data["checkpoint"] = pd.array([_checkpoint_of(result) for result in results], dtype="string")
    return pd.DataFrame(data, index=index)


def _checkpoint_of(result: Mapping[str, Any]) -> str | None:
    routing = result.get("routing")
    model = routing.get("model") if isinstance(routing, Mapping) else getattr(routing, "model", None)
    model = model or result.get("model")
    return None if model is None else str(model)


# -- the pandas run ----------------------------------------------------------------------------
def _predict(model: Any, routed: bool, states: list[Any], questions: Mapping[str, Any],
             options: dict[str, Any]) -> list[dict[str, Any]]:
    if routed:
        return model.predict_batch([{"state": s, "questions": questions} for s in states], **options)
    return model.predict_batch(states, questions, **options)


def decide_partition(df: pd.DataFrame, questions: Mapping[str, Any], model: _Model,
                     fields: str | dict[str, Any], batch_size: int, options: dict[str, Any],
                     progress: bool = False, call: str = "decide") -> pd.DataFrame:
    """Answer every row of one pandas frame (the whole table, or one Dask partition)."""
    parsed = _parse(questions)
    states = states_of(df, fields, call)
    if not states:
        return empty_frame(parsed, model.routed, df.index)
    runner = model.resolve()
    results: list[dict[str, Any]] = []
    bar = _progress(len(states), progress, call)
    try:
        for start in range(0, len(states), batch_size):
            chunk = states[start:start + batch_size]
            results.extend(_predict(runner, model.routed, chunk, questions, options))
            if bar is not None:
                bar.update(len(chunk))
    finally:
        if bar is not None:
            bar.close()
    return answers_frame(results, df.index, parsed, model.routed)


def _progress(total: int, progress: bool, call: str) -> Any:
    if not progress:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="row", desc=call)


def decide(df: Any, questions: Mapping[str, Any], *, agent: Any = None, router: Any = None,
           checkpoint: Any = None, state: Any = None, batch_size: int = DEFAULT_BATCH_SIZE,
           min_confidence: Any = None, progress: bool = True, max_len: int | None = None,
           hooks: Sequence[Any] | None = None) -> Any:
    """Answer ``questions`` about every row of ``df``; a frame with the same index (module docstring).

    Exactly one of ``agent`` (a loaded Agent), ``router`` (a Router, or a function returning one)
    or ``checkpoint`` (any source ``jevlaya_lab.load`` takes, loaded once per process). ``state``
    names the column the questions read, or maps state fields to columns
    (``{"subject": "subj", "body": "text"}`` makes ``{"subject": ..., "body": ...}`` states); a frame
    of one column needs none. ``batch_size`` rows go to one ``predict_batch`` call (one hook span);
    ``min_confidence`` and ``max_len`` are ``predict_batch``'s; ``hooks`` are added for this run.
    ``progress`` shows a ``tqdm.auto`` bar (in a notebook, a widget).

    A Dask DataFrame gives a lazy Dask DataFrame (``.compute()`` it, or ``distributed.progress``
    on its ``.persist()``); its partitions may be empty, the whole frame may not.
    """
    model = _Model(agent=agent, router=router, checkpoint=checkpoint)
    parsed = _parse(questions)
    batch_size = _check_batch_size(batch_size)
    options: dict[str, Any] = {"min_confidence": min_confidence}
    if max_len is not None:
        options["max_len"] = max_len
    if hooks is not None:
        options["hooks"] = list(hooks)
    from jevlaya_lab.decisions.calibration import parse_min_confidence

    parse_min_confidence(min_confidence)  # a bad threshold fails before any row is read
    if _is_dask(df):
        fields = state_fields(df.columns, state)
        meta = empty_frame(parsed, model.routed, df._meta.index)
        return df.map_partitions(decide_partition, dict(questions), model.for_workers(), fields, batch_size,
                                 options, meta=meta, align_dataframes=False)
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"decide(df): expected a pandas or Dask DataFrame, got {type(df).__name__}; "
                        "a list of texts becomes one with pd.DataFrame({'text': texts})")
    if len(df) == 0:
        raise FrameError("decide(df): the frame has no rows; there is nothing to answer "
                         "(check the filter that built it)")
    fields = state_fields(df.columns, state)
    return decide_partition(df, questions, model, fields, batch_size, options, progress=progress)
