"""For ``broker/``: the sync facade mirrors the async signatures one for
one (written out, no ``**kwargs`` forwarding), every stream kind implements one protocol, and
``engine.py`` is the public API only (imports at the top, typed returns)."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import pytest

from jevlaya_lab.broker import engine as engine_module
from jevlaya_lab.broker.direct import AsyncDirect, DirectStream
from jevlaya_lab.broker.engine import AsyncBroker
from jevlaya_lab.broker.results import StreamProtocol, SyncLLMResult
from jevlaya_lab.broker.scoped import AsyncScopedBroker
from jevlaya_lab.broker.streaming import AsyncStream
from jevlaya_lab.broker.sync import Broker, Direct, ScopedBroker, SyncStream

PAIRS = [(Broker, AsyncBroker), (ScopedBroker, AsyncScopedBroker), (Direct, AsyncDirect)]
ASYNC_ONLY = {"aclose"}  # the sync name is close()
PROTOCOL = ("llm_name", "call_id", "trace_id", "usage", "text", "tool_calls", "closed")


def public_methods(cls: type) -> dict[str, object]:
    """Public methods, inherited ones included."""
    return {name: getattr(cls, name) for name in dir(cls)
            if not name.startswith("_") and callable(getattr(cls, name))
            and name not in ASYNC_ONLY}


@pytest.mark.parametrize(("sync_cls", "async_cls"), PAIRS, ids=lambda c: c.__name__)
def test_sync_methods_have_the_async_signatures(sync_cls: type, async_cls: type) -> None:
    async_methods = public_methods(async_cls)
    assert set(async_methods) <= set(public_methods(sync_cls)), async_cls
    for name, method in async_methods.items():
        mine = inspect.signature(getattr(sync_cls, name))
        theirs = inspect.signature(method)
        assert list(mine.parameters) == list(theirs.parameters), name
        for param, other in zip(mine.parameters.values(), theirs.parameters.values(),
                                strict=True):
            assert (param.kind, param.default) == (other.kind, other.default), (name, param)


def test_sync_broker_constructor_has_the_async_parameters() -> None:
    mine = inspect.signature(Broker.__init__).parameters
    theirs = inspect.signature(AsyncBroker.__init__).parameters
    assert [(p.name, p.kind, p.default) for p in mine.values()] == \
        [(p.name, p.kind, p.default) for p in theirs.values()]


def test_engine_module_is_the_public_api_with_top_level_imports_and_typed_returns() -> None:
    tree = ast.parse(Path(engine_module.__file__).read_text("utf-8"))
    nested = [node.lineno for node in ast.walk(tree)
              if isinstance(node, (ast.Import, ast.ImportFrom)) and node.col_offset > 0]
    assert not nested, f"imports inside functions at lines {nested}"
    assert engine_module.__all__ == ["AsyncBroker"]
    for name, member in vars(AsyncBroker).items():
        if not name.startswith("__"):
            assert not name.startswith("_"), f"AsyncBroker.{name}: machinery lives in runtime"
    for name in dir(AsyncBroker):
        member = inspect.getattr_static(AsyncBroker, name)
        function = member.fget if isinstance(member, property) else member
        if name.startswith("_") or not callable(function):
            continue
        returns = inspect.signature(function).return_annotation
        assert returns is not inspect.Signature.empty and "Any" != returns, name


def test_every_stream_kind_implements_the_protocol_and_the_sync_stream_reads_both(
        broker) -> None:
    b = broker("a", "b")
    pooled, direct = b.stream("hello"), b.direct("b").stream("hello")
    assert isinstance(pooled._stream, AsyncStream) and isinstance(direct._stream, DirectStream)
    for stream in (pooled, direct):
        assert isinstance(stream._stream, StreamProtocol)
        assert (stream.llm_name, stream.call_id, stream.text, stream.closed) == \
            (None, None, "", False)
        with stream:
            parts = list(stream)
        assert parts and stream.text == "".join(parts) and stream.llm_name in ("a", "b")
        assert stream.call_id and stream.trace_id and stream.closed
        assert {name: getattr(stream, name) for name in PROTOCOL} == \
            {name: getattr(stream._stream, name) for name in PROTOCOL}
    assert isinstance(pooled.another(), (SyncLLMResult, type(None)))
    assert direct.another() is None  # a direct stream has no other model
    assert pooled.lanes and direct.lanes == []
    with pytest.raises(TypeError, match="direct"):
        direct.add_listener(lambda view: None)


def test_sync_stream_has_no_attribute_forwarding() -> None:
    assert "__getattr__" not in vars(SyncStream)
