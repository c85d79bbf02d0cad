"""AuditHook: one JSON line per state, for successful, skipped and failed calls."""

import hashlib
import io
import json
import threading

import pytest

from jevlaya_lab.decisions.router import Router
from jevlaya_lab.decisions.testing import make_tiny_checkpoint
from jevlaya_lab.hooks import PredictContext
from jevlaya_lab.hooks.audit import AuditHook
from jevlaya_lab.hooks.redaction import RedactionHook

QUESTIONS = {"intent": {"type": "choice", "instructions": "What does the user want?",
                        "criteria": ["refund", "other"]},
             "spam": {"type": "noul", "instructions": "The message is spam."}}


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return make_tiny_checkpoint(tmp_path_factory.mktemp("audit") / "tiny")


def read_lines(path):
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_one_json_line_per_state_with_answers_routing_and_usage(checkpoint, tmp_path):
    """Audit writes one JSON line per state."""
    log = tmp_path / "logs" / "audit.jsonl"
    with AuditHook(log) as audit:
        router = Router({"tiny": checkpoint}, hooks=[audit])
        results = router.predict_batch([{"state": "refund please", "questions": QUESTIONS},
                                        {"state": {"body": "buy cheap pills"}, "questions": QUESTIONS}])
    lines = read_lines(log)[::-1]  # requests end in reverse input order
    assert len(lines) == 2 and audit.lines_written == 2
    for line, result in zip(lines, results):
        assert line["model"] == "tiny" and line["index"] == 0 and line["n_states"] == 1
        assert line["questions"] == ["intent", "spam"]
        assert line["answers"] == {"intent": result["answers"]["intent"]["choice"],
                                   "spam": result["answers"]["spam"]["noul"]}
        assert line["routing"] == {"model": "tiny", "source": "detection"}
        assert line["usage"] == result["usage"] and line["error"] is None
        assert "state" not in line
    assert lines[0]["state_sha256"] == hashlib.sha256(b"refund please").hexdigest()
    assert lines[0]["run_id"] != lines[1]["run_id"]


def test_failed_calls_are_audited_with_the_error(checkpoint):
    stream = io.StringIO()
    router = Router({"tiny": checkpoint}, hooks=[AuditHook(stream)])

    def fail(ctx):
        raise RuntimeError("policy says no")

    with pytest.raises(RuntimeError):
        router.predict("x", QUESTIONS, on_predict_start=fail)
    (line,) = [json.loads(s) for s in stream.getvalue().splitlines()]
    assert line["error"] == "RuntimeError: policy says no" and line["answers"] is None


def test_include_state_after_redaction_keeps_the_log_free_of_pii(checkpoint):
    lines = []
    router = Router({"tiny": checkpoint}, hooks=[RedactionHook(), AuditHook(lines.append, include_state=True)])
    router.predict({"from": "bob@example.com", "body": "call me"}, QUESTIONS)
    assert json.loads(lines[0])["state"] == {"from": "[EMAIL]", "body": "call me"}


def test_empty_calls_and_multi_state_contexts():
    """A call with no states still leaves a trace (index null); an Agent-style call logs each state."""
    lines = []
    audit = AuditHook(lines.append)
    audit.on_predict_end(PredictContext(states=[], questions={}, results=[]))
    ctx = PredictContext(states=["a", "b"], questions={}, model="m",
                         results=[{"answers": {}, "usage": {"input_tokens": 0, "output_tokens": 0}}] * 2)
    audit.on_predict_end(ctx)
    records = [json.loads(s) for s in lines]
    assert [r["index"] for r in records] == [None, 0, 1]
    assert records[0]["n_states"] == 0 and records[2]["answers"] == {}


def test_concurrent_writes_keep_lines_whole(tmp_path):
    log = tmp_path / "audit.jsonl"
    audit = AuditHook(log)

    def write(i):
        for j in range(20):
            audit.on_predict_end(PredictContext(states=[f"{i}-{j}" * 50], questions={}, results=None))

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    audit.close()
    assert len(read_lines(log)) == 80


def test_bad_sinks_are_rejected_with_the_fix(tmp_path):
    with pytest.raises(ValueError, match="is a directory"):
        AuditHook(tmp_path)
    with pytest.raises(TypeError, match="expected a file path, a text stream or a function"):
        AuditHook(42)
    audit = AuditHook(tmp_path / "a.jsonl")
    audit.close()
    with pytest.raises(ValueError, match="was closed"):
        audit.on_predict_end(PredictContext(states=["x"], questions={}))
