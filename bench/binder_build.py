"""Times the simulated Binder build (:mod:`jevlaya_lab.binder`: a fresh venv from
``binder/requirements.txt``, then ``binder/postBuild``) and tutorials on the real models
(``fast=False``) in it, step by step. Prints a table and writes ``bench/results/binder_build.json``.
The same build is a test: ``tests/notebooks/test_binder_build.py``.

    .venv/bin/python bench/binder_build.py [--notebooks 01_quickstart_tour 04_broker_streaming_racing ...]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

from jevlaya_lab.binder import build, scratch_dir, tutorials

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebooks", nargs="*", default=tutorials(), help="default: all")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="binder-", dir=scratch_dir()) as tmp:
        image = build(Path(tmp) / "image", log=lambda line: print(line, flush=True))
        for name in args.notebooks:
            image.run_tutorial(name, Path(tmp) / "out")
            print(f"{name}: {image.seconds[f'{name} (fast=False)']} s", flush=True)
    width = max(map(len, image.seconds))
    for label, seconds in image.seconds.items():
        print(f"{label:<{width}}  {seconds:>7.1f} s")
    out = ROOT / "bench" / "results" / "binder_build.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(image.seconds, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
