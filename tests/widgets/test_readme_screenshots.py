"""The README shows the views in the light and the dark theme, from screenshots kept in the
repository (taken by test_tutorials_in_jupyterlab.py; see reports/screens/ for all of them)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_readme_shows_light_and_dark_screenshots_that_are_in_the_repository() -> None:
    images = re.findall(r"!\[[^\]]*\]\(([^)\s]+\.png)\)", (ROOT / "README.md").read_text("utf-8"))
    assert any("light" in i for i in images) and any("dark" in i for i in images), images
    tracked = set(subprocess.run(["git", "ls-files", "--", *images], cwd=ROOT, capture_output=True,
                                 text=True, check=True).stdout.split())
    for image in images:
        assert image in tracked, f"README shows {image}, which is not committed"
        data = (ROOT / image).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000, f"{image} is not a real PNG"
