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


def test_every_committed_screenshot_is_at_most_150_kb() -> None:
    """Screenshots stay small in the repository: `make screens` saves them as palette PNGs."""
    committed = subprocess.run(["git", "ls-files", "--", "docs/screens/*.png"], cwd=ROOT,
                               capture_output=True, text=True, check=True).stdout.split()
    assert committed, "no screenshot is committed under docs/screens/"
    sizes = {name: (ROOT / name).stat().st_size for name in committed}
    too_big = {name: size for name, size in sizes.items() if size > 150_000}
    assert not too_big, f"over 150 KB (run make screens, which quantizes them): {too_big}"


def test_the_readme_shows_every_view_in_both_themes() -> None:
    """Each README screenshot the browser test takes is shown, in light and in dark."""
    from .test_tutorials_in_jupyterlab import README_SCREENS

    readme = (ROOT / "README.md").read_text("utf-8")
    missing = [f"docs/screens/{theme}-{name}.png" for name in README_SCREENS
               for theme in ("light", "dark") if f"docs/screens/{theme}-{name}.png" not in readme]
    assert not missing, f"the README does not show {missing}"
