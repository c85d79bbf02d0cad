"""``ask(df, prompt, ...)``: one LLM call per row through a Broker, resumable from its journal.

Every row's call goes through ``broker.ask`` (so pool, failover, cooldowns and ``wait`` budgets
work exactly as for one call) with ``operation`` and a ``trace_id`` made of the operation, a digest
of the row's prompt and the row's index label. The journal therefore holds, for each row, which
attempts were made and what came back; a rerun of the same call on the same journal (after a
kernel restart, Ctrl-C or a killed process) reads the rows already answered from it and asks only
the others. A row whose prompt changed gets a new digest and is asked again.

Resuming needs the answers' text in the journal, which a Broker keeps with ``store_text=True``;
``resume`` defaults to that. A failed row (every model refused, the budget ran out, ...) carries
``"<ErrorType>: <message>"`` in ``error`` and the run goes on; an argument the broker rejects
(a bad ``wait``, an unknown keyword) is the same for every row and stops the run at once.

The result has the input's index and the columns ``answer`` and ``model`` (strings, missing on a
failed row), ``latency`` (seconds of the call, or of the journaled attempt when resumed),
``error`` (missing on an answered row) and ``resumed`` (the answer came from the journal).
"""

from __future__ import annotations

import hashlib
import inspect
import string
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import Any

import pandas as pd

from jevlaya_lab.errors import JevlayaError
from jevlaya_lab.frames.errors import FrameError

__all__ = ["ASK_COLUMNS", "ask", "ask_columns_frame", "render_prompts", "row_trace_id"]

ASK_COLUMNS = ("answer", "model", "latency", "error", "resumed")
DEFAULT_OPERATION = "frames.ask"
MAX_CONCURRENCY = 256


def _label_key(label: Any) -> str:
    """A stable text for an index label: numpy scalars read as the Python value they hold."""
    if isinstance(label, tuple):
        return "(" + ", ".join(_label_key(part) for part in label) + ")"
    item = getattr(label, "item", None)
    if callable(item) and not isinstance(label, (str, bytes)):
        try:
            label = item()
        except (TypeError, ValueError):
            pass
    return repr(label)


def row_trace_id(operation: str, label: Any, prompt: str) -> str:
    """The trace id of one row's call: ``<operation>:<prompt digest>:<index label>``."""
    digest = hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:12]
    return f"{operation}:{digest}:{_label_key(label)}"


def _field_names(template: str) -> list[str]:
    names = []
    for _, field, _, _ in string.Formatter().parse(template):
        if field is None:
            continue
        base = field.split(".", 1)[0].split("[", 1)[0]
        if base == "" or base.isdigit():
            raise FrameError(f"ask(prompt={template!r}): every {{field}} must name a column, e.g. "
                             "'Summarise: {body}'; positional fields like {} or {0} have no column")
        names.append(base)
    return names


def render_prompts(df: pd.DataFrame, prompt: str | Callable[[pd.Series], str]) -> list[str]:
    """Each row's prompt: ``prompt.format(**row)`` for a format string over the columns, or
    ``prompt(row)`` (a ``pd.Series``) for a function."""
    if isinstance(prompt, str):
        columns = {str(column): column for column in df.columns}
        missing = [name for name in _field_names(prompt) if name not in columns]
        if missing:
            raise FrameError(f"ask(prompt=...): the prompt names column {missing[0]!r}, which the frame lacks; "
                             f"its columns are {list(df.columns)}")
        used = list(dict.fromkeys(_field_names(prompt)))
        records = df[[columns[name] for name in used]].to_dict("records") if used else [{}] * len(df)
        return [prompt.format_map({str(k): v for k, v in record.items()}) for record in records]
    if not callable(prompt):
        raise TypeError(f"ask(prompt={prompt!r}): expected a format string over the columns "
                        "('Summarise: {body}') or a function of the row")
    texts = []
    for label, row in df.iterrows():
        text = prompt(row)
        if not isinstance(text, str) or not text:
            raise FrameError(f"ask(prompt=...): for row {label!r} the prompt function returned "
                             f"{type(text).__name__} {text!r}; it must return a non-empty string")
        texts.append(text)
    return texts


def _stores_text(broker: Any) -> bool | None:
    """Whether the broker journals prompt and answer text (``Broker(store_text=True)``)."""
    value = getattr(broker, "store_text", None)
    return value if isinstance(value, bool) else None


def _check_broker(broker: Any) -> None:
    if broker is None or not hasattr(broker, "ask") or not hasattr(broker, "calls"):
        raise TypeError(f"ask(broker={broker!r}): expected a jevlaya_lab.Broker, e.g. "
                        "Broker('journal.db', store_text=True)")
    if inspect.iscoroutinefunction(broker.ask):
        raise TypeError("ask(broker=AsyncBroker): table runs call the broker from worker threads; pass a "
                        "Broker (the same arguments, called without await)")


def _check_concurrency(concurrency: Any) -> int:
    if (isinstance(concurrency, bool) or not isinstance(concurrency, int)
            or not 1 <= concurrency <= MAX_CONCURRENCY):
        raise ValueError(f"concurrency={concurrency!r}: must be an int from 1 to {MAX_CONCURRENCY}, e.g. 8")
    return concurrency


def _check_frame(df: Any, call: str) -> None:
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"{call}(df): expected a pandas DataFrame, got {type(df).__name__}")
    if len(df) == 0:
        raise FrameError(f"{call}(df): the frame has no rows; there is nothing to ask")
    if not df.index.is_unique:
        duplicated = df.index[df.index.duplicated()][0]
        raise FrameError(f"{call}(df): the index label {duplicated!r} appears more than once; the journal keys "
                         "each row's call by its index, so make it unique (df.reset_index())")


def _answered(broker: Any, operation: str) -> dict[str, dict[str, Any]]:
    """trace_id -> the newest answered attempt of ``operation`` in the broker's journal."""
    found: dict[str, dict[str, Any]] = {}
    for row in broker.calls(operation=operation, status="ok"):  # newest first
        trace = row.get("trace_id")
        if trace and trace not in found and row.get("answer_text") is not None:
            found[trace] = row
    return found


def _one(broker: Any, text: str, trace_id: str, operation: str, wait: float | None,
         params: dict[str, Any]) -> tuple[Any, Any, float, Any]:
    started = time.perf_counter()
    try:
        result = broker.ask(text, operation=operation, trace_id=trace_id, wait=wait, **params)
    except JevlayaError as exc:  # the row failed; the run goes on
        return None, None, time.perf_counter() - started, f"{type(exc).__name__}: {exc}"
    return result.text, result.llm_name, time.perf_counter() - started, None


def _ask_partition(df: pd.DataFrame, prompt: str | Callable[[pd.Series], str], factory: Callable[[], Any],
                   concurrency: int, wait: float | None, operation: str, resume: bool | None,
                   params: dict[str, Any]) -> pd.DataFrame:
    """One Dask partition on a worker: the worker's own Broker (made once per process by
    ``factory``), then the journal flushed so the rows are in it when the task reports done."""
    from jevlaya_lab.frames.deciding import _cached, _factory_key

    if len(df) == 0:
        return ask_columns_frame(df.index)
    # a Broker still open when the worker process exits closes itself then (jevlaya_lab.broker.loop_thread)
    broker = _cached(("broker", _factory_key(factory)), f"broker:{getattr(factory, '__qualname__', factory)}",
                     factory)
    out = ask(df, prompt, broker=broker, concurrency=concurrency, wait=wait, progress=False,
              operation=operation, resume=resume, **params)
    broker.calls(limit=1)  # reading the journal writes what is waiting first
    return out


def _ask_dask(df: Any, prompt: str | Callable[[pd.Series], str], broker: Any, concurrency: int,
              wait: float | None, operation: str, resume: bool | None, params: dict[str, Any]) -> Any:
    if hasattr(broker, "ask") or not callable(broker):
        raise TypeError("ask(dask_df, broker=...): each worker needs its own Broker; pass a function that makes "
                        "one, e.g. functools.partial(Broker, 'postgresql://...', store_text=True, cooldowns=True)")
    if isinstance(prompt, str):
        columns = {str(column) for column in df.columns}
        missing = [name for name in _field_names(prompt) if name not in columns]
        if missing:
            raise FrameError(f"ask(prompt=...): the prompt names column {missing[0]!r}, which the frame lacks; "
                             f"its columns are {list(df.columns)}")
    meta = ask_columns_frame(df._meta.index)
    return df.map_partitions(_ask_partition, prompt, broker, concurrency, wait, operation, resume, params,
                             meta=meta, align_dataframes=False)


def ask(df: pd.DataFrame, prompt: str | Callable[[pd.Series], str], *, broker: Any, concurrency: int = 8,
        wait: float | None = None, progress: bool = True, operation: str = DEFAULT_OPERATION,
        resume: bool | None = None, **params: Any) -> pd.DataFrame:
    """Ask ``prompt`` for every row of ``df`` through ``broker``; a frame with the same index.

    ``prompt`` is a format string over the columns (``"Summarise: {body}"``) or a function of the
    row. At most ``concurrency`` calls run at once; ``wait`` is each call's time budget, as for
    ``broker.ask``, and ``params`` (``max_tokens=...``) go to every call. ``operation`` names the
    run in the journal; ``resume`` (default: on when the broker keeps text) skips the rows the
    journal already holds an answer for. ``progress`` shows a ``tqdm.auto`` bar. Ctrl-C stops
    the run: calls in flight finish and are journaled, the rest are not sent, and the next run
    resumes from there. See the module docstring for the columns.

    On a Dask DataFrame it returns a lazy Dask DataFrame; ``broker`` is then a function making a
    Broker, called once in each worker process (``concurrency`` is per worker). Give them one
    shared journal (a PostgreSQL URL) and ``cooldowns=True`` so what one worker learns about a
    model (a 429, an outage, a refused key) keeps all of them off it.
    """
    from jevlaya_lab.frames.deciding import _is_dask

    if _is_dask(df):
        return _ask_dask(df, prompt, broker, _check_concurrency(concurrency), wait, operation, resume, params)
    _check_frame(df, "ask")
    _check_broker(broker)
    concurrency = _check_concurrency(concurrency)
    if not isinstance(operation, str) or not operation:
        raise ValueError(f"operation={operation!r}: must be a non-empty string naming the run")
    texts = render_prompts(df, prompt)
    traces = [row_trace_id(operation, label, text) for label, text in zip(df.index, texts)]
    stores = _stores_text(broker)
    if resume is None:
        resume = bool(stores)
    elif resume and stores is False:
        raise FrameError("ask(resume=True): this broker does not keep answers in its journal, so no row can be "
                         "resumed; make it with Broker(<journal>, store_text=True)")
    n = len(df)
    answers: list[Any] = [None] * n
    models: list[Any] = [None] * n
    latency: list[float] = [float("nan")] * n
    errors: list[Any] = [None] * n
    resumed = [False] * n
    if resume:
        done = _answered(broker, operation)
        for i, trace in enumerate(traces):
            row = done.get(trace)
            if row is not None:
                answers[i], models[i], resumed[i] = row["answer_text"], row["llm_name"], True
                latency[i] = float(row["latency_ms"]) / 1000.0 if row.get("latency_ms") is not None else float("nan")
    pending = [i for i in range(n) if not resumed[i]]
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=n, initial=n - len(pending), unit="row", desc="ask")
    pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="frames-ask")
    running: dict[Future[tuple[Any, Any, float, Any]], int] = {}
    queue = iter(pending)
    try:
        for i in queue:  # keep at most `concurrency` calls submitted: Ctrl-C leaves nothing queued
            running[pool.submit(_one, broker, texts[i], traces[i], operation, wait, params)] = i
            if len(running) >= concurrency:
                break
        while running:
            finished, _ = wait_futures(list(running), return_when=FIRST_COMPLETED)
            for future in finished:
                i = running.pop(future)
                answers[i], models[i], latency[i], errors[i] = future.result()
                if bar is not None:
                    bar.update(1)
                following = next(queue, None)
                if following is not None:
                    running[pool.submit(_one, broker, texts[following], traces[following], operation, wait,
                                        params)] = following
    finally:
        for future in running:
            future.cancel()
        pool.shutdown(wait=True, cancel_futures=True)
        if bar is not None:
            bar.close()
    return pd.DataFrame({
        "answer": pd.array(answers, dtype="string"),
        "model": pd.array(models, dtype="string"),
        "latency": pd.array(latency, dtype="float64"),
        "error": pd.array(errors, dtype="string"),
        "resumed": pd.array(resumed, dtype="boolean"),
    }, index=df.index)


def ask_columns_frame(index: pd.Index) -> pd.DataFrame:
    """The ask columns, all missing, for rows that were never asked (used by ``escalate``)."""
    n = len(index)
    return pd.DataFrame({
        "answer": pd.array([None] * n, dtype="string"),
        "model": pd.array([None] * n, dtype="string"),
        "latency": pd.array([float("nan")] * n, dtype="float64"),
        "error": pd.array([None] * n, dtype="string"),
        "resumed": pd.array([pd.NA] * n, dtype="boolean"),
    }, index=index)

