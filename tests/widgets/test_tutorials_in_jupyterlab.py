"""Every tutorial in a real JupyterLab, in headless Debian Chromium, light and then dark.

One JupyterLab server (127.0.0.1, token, temp dirs) and one browser page serve the module. For
each tutorial the test opens the notebook in the light theme, runs all cells through the UI with
the fast parameters (``fast = True`` written into the copy; the notebooks default to the real
models), and fails on an error output, text written to stderr, "Error displaying widget", a
browser console error, a failed notebook check, or text in a view whose contrast against its
background is under 4.5:1 (WCAG AA). Then it uses each view as a person would (types, clicks
its buttons, hovers) and checks what changes, and saves a screenshot of every view under
``reports/screens/<theme>-<notebook>-<n>.png``.

Then it switches the same session to JupyterLab Dark, as a person does from the Settings menu,
and checks every view again: contrast, the theme-dependent looks (the plotly figures' sheets and
text), no widget error, no console error, the screenshots. The views are styled only through
JupyterLab's ``--jp-*`` variables and the package stylesheet, so a view drawn in Light and then
switched shows exactly what one drawn in Dark shows; and a view that missed the switch (a colour
fixed at render time) fails here. Running each notebook a second time just for Dark would prove
nothing more and cost as much again.

The README's screenshots are taken here too (``README_SCREENS``: which view of which tutorial,
after it was used), into ``reports/screens/readme/``; with ``JEVLAYA_SCREENS_DIR=docs/screens``
(``make screens``) they are also written there as palette PNGs of at most 150 KB, so one command
refreshes every screenshot the README shows.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from jevlaya_lab.notebooks import MIME, notebook_paths

from .conftest import needs_chromium
from .jupyterlab_session import (
    CHROMIUM,
    CHROMIUM_FLAGS,
    DARK,
    LIGHT,
    JupyterLabServer,
    LabPage,
)

pytestmark = needs_chromium
ROOT = Path(__file__).resolve().parents[2]
SCREENS = ROOT / "reports" / "screens"
NOTEBOOKS = notebook_paths()
MIN_CONTRAST = 4.5
VIEWS = ".jp-OutputArea-output .jevlaya, .jp-OutputArea-output .jv-table"
TABLES = ".jp-OutputArea-output table.dataframe"  # a tutorial whose views are DataFrames (08)
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
# README screenshot name -> (tutorial, CSS selector of the view, which match): each is taken in
# both themes as docs/screens/<theme>-<name>.png
README_SCREENS: dict[str, tuple[str, str, int]] = {
    "answers": ("01_quickstart_tour", ".jv-answers .jv-card", 0),
    "routing": ("02_routing_explorer", ".jv-routing", 0),
    "timeline": ("03_hooks_and_timeline", ".jv-timeline", 0),
    "race": ("04_broker_streaming_racing", ".jv-stream", 1),
    "dashboard": ("05_journal_analysis", ".jv-dashboard", 0),
    "labels": ("06_typed_questions_calibration", ".jv-labels", 0),
    # the frames.decide cell's output: the typed answers and their .p columns, one row a ticket
    "table": ("08_table_of_tickets",
              ".jp-OutputArea-output:has(table.dataframe tbody tr:nth-child(12)):has-text('intent.p')", 0),
}
README_MAX_BYTES = 150_000


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JupyterLabServer]:
    with JupyterLabServer(tmp_path_factory.mktemp("jupyterlab"), NOTEBOOKS) as server:
        yield server


@pytest.fixture(scope="module")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A fresh profile (``--user-data-dir``) of headless Debian Chromium."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            str(tmp_path_factory.mktemp("chromium-profile")), executable_path=CHROMIUM,
            headless=True, args=CHROMIUM_FLAGS, viewport={"width": 1280, "height": 1000})
        try:
            yield context
        finally:
            context.close()


@pytest.fixture(scope="module")
def lab_page(lab: JupyterLabServer, chromium: Any) -> Iterator[LabPage]:
    page = LabPage(chromium.new_page(), lab)
    page.start(LIGHT)
    yield page
    page.page.evaluate("async () => { const w = window.__jvNotebook; if (w) "
                       "await w.sessionContext.shutdown().catch(() => null); }")
    page.page.close()


def view_outputs(page: LabPage) -> Any:
    """Every output of the notebook that holds a widget or one of the rich cards."""
    return page.notebook().locator(".jp-OutputArea-output").filter(
        has=page.page.locator(".jevlaya, .jv-table, .widget-box, .js-plotly-plot"))


def fail_on_problems(outputs: list[dict[str, Any]], page: LabPage) -> dict[str, bool]:
    """Assert no cell failed or wrote to stderr; return the notebook's own checks."""
    problems = []
    checks: dict[str, bool] | None = None
    for cell in outputs:
        for out in cell["outputs"]:
            if out["output_type"] == "error":
                problems.append(f"cell {cell['index']}: {out['ename']}: {out['evalue']}")
            elif out["output_type"] == "stream" and out["name"] == "stderr":
                problems.append(f"cell {cell['index']} wrote to stderr: {out['text'][:500]}")
            elif "checks" in out.get("data", {}).get(MIME, {}):
                checks = out["data"][MIME]["checks"]
    text = page.notebook().inner_text()
    if "Error displaying widget" in text:
        problems.append("Error displaying widget")
    assert not problems, problems
    assert checks, "the notebook displayed no checks"
    return checks


def check_contrast(page: LabPage) -> None:
    results = page.contrast(VIEWS if page.notebook().locator(VIEWS).count() else TABLES)
    assert results, "no text found in the views"
    low = [r for r in results if r["ratio"] < MIN_CONTRAST]
    assert not low, f"{page.theme}: text under {MIN_CONTRAST}:1 contrast: " + json.dumps(
        [{k: r[k] for k in ("text", "cls", "color", "background")} | {
            "ratio": round(r["ratio"], 2)} for r in low[:8]], ensure_ascii=False)


def screenshot_views(page: LabPage, stem: str) -> int:
    SCREENS.mkdir(parents=True, exist_ok=True)
    views = view_outputs(page)
    for i in range(views.count()):
        views.nth(i).screenshot(path=str(SCREENS / f"{page.theme}-{stem}-{i}.png"))
    return views.count()


def shrink_png(source: Path, target: Path, max_bytes: int = README_MAX_BYTES) -> int:
    """Write ``source`` as a palette PNG (fewer colours until it fits in ``max_bytes``)."""
    from PIL import Image

    with Image.open(source) as image:
        rgb = image.convert("RGB")
    for colours in (128, 64, 32, 16):
        rgb.quantize(colors=colours, method=Image.Quantize.MEDIANCUT).save(target, optimize=True)
        if target.stat().st_size <= max_bytes:
            return target.stat().st_size
    raise AssertionError(f"{target} is {target.stat().st_size} bytes even with 16 colours")


def screenshot_for_readme(page: LabPage, stem: str) -> list[Path]:
    """Take this tutorial's README screenshots; copy them to $JEVLAYA_SCREENS_DIR when set.

    The window is made tall first, so a view taller than the default viewport is captured whole
    rather than with JupyterLab's toolbars drawn over it."""
    wanted = [(name, sel, n) for name, (nb, sel, n) in README_SCREENS.items() if nb == stem]
    if not wanted:
        return []
    out = SCREENS / "readme"
    out.mkdir(parents=True, exist_ok=True)
    target = os.environ.get("JEVLAYA_SCREENS_DIR")
    taken = []
    page.page.set_viewport_size({"width": 1280, "height": 2400})
    try:
        for name, selector, n in wanted:
            view = page.notebook().locator(selector).nth(n)
            view.scroll_into_view_if_needed(timeout=15_000)
            page.page.wait_for_timeout(500)
            shot = out / f"{page.theme}-{name}.png"
            view.screenshot(path=str(shot))
            if target:
                dest = ROOT / target / shot.name
                dest.parent.mkdir(parents=True, exist_ok=True)
                shrink_png(shot, dest)
            taken.append(shot)
    finally:
        page.page.set_viewport_size({"width": 1280, "height": 1000})
    return taken


# -- what a person does with each tutorial's views --------------------------------------------
def use_quickstart(page: LabPage) -> None:
    nb = page.notebook()
    # answers cards: one per state, each question with its decided value and threshold
    assert nb.locator(".jv-answers .jv-card").count() == 6
    gated = nb.locator(".jv-answers").nth(1)
    for row in gated.locator(".jv-q.jv-abstained").all():
        assert re.search(r"< 0\.6", row.inner_text()), row.inner_text()
    # one look for a plain agent.predict(...) card and AnswersView: labels left, bars filled from
    # the left edge of a track of the same width (JupyterLab right-aligns rendered table cells)
    looks = page.page.evaluate("""() => {
      const look = (table) => {
        const row = table.querySelector("tr"), cells = row.querySelectorAll("td");
        const bar = cells[1].querySelector("span").getBoundingClientRect();
        const track = cells[1].getBoundingClientRect();
        return {label: getComputedStyle(cells[0]).textAlign, barFromLeft: Math.round(bar.left - track.left),
                track: Math.round(track.width)};
      };
      const card = [...document.querySelectorAll(".jp-OutputArea-output table.jv-bars")]
        .find((t) => !t.closest(".jv-answers"));
      const view = document.querySelector(".jv-answers table.jv-bars");
      return {card: card && look(card), view: view && look(view)};
    }""")
    assert looks["card"] and looks["view"], looks
    assert looks["card"]["label"] in ("left", "start") and looks["card"]["barFromLeft"] <= 1, looks
    assert abs(looks["card"]["track"] - looks["view"]["track"]) <= 2, looks
    # typing in the routing box reroutes in the kernel
    routing = nb.locator(".jv-routing").first
    routing.locator("textarea").fill("Where is my refund? I paid twice last week.")
    page.page.wait_for_function("[...document.querySelectorAll('.jv-routing .jv-model')]"
                                ".some((e) => e.textContent === '→ english')", timeout=15_000)
    use_stream(page, nb.locator(".jv-stream").first, other_models=0)


def use_stream(page: LabPage, stream: Any, *, other_models: int, rated: int = 0) -> None:
    """Rate the shown answer, then ask another() until there is none; check each step."""
    stream.locator("button", has_text="rate good").click()
    stream.locator(".jv-ratings", has_text="shown (").filter(has_text="good").wait_for(timeout=15_000)
    counted = stream.locator(".jv-ratings").inner_text()
    # rating the same answer again changes its rating, not the count of rated answers
    stream.locator("button", has_text="rate bad").click()
    stream.locator(".jv-ratings", has_text="shown (").filter(has_text="bad").wait_for(timeout=15_000)
    assert stream.locator(".jv-ratings").inner_text().split(":")[0] == counted.split(":")[0]
    assert counted.startswith(f"{rated + 1} answer") or counted.startswith(f"{rated} answer"), counted
    for n in range(1, other_models + 1):
        stream.locator("button", has_text="another()").click()
        stream.locator(".jv-another").nth(n - 1).wait_for(timeout=30_000)
    stream.locator("button", has_text="another()").click()
    why = stream.locator(".jv-err", has_text="no further answer: ")
    why.wait_for(timeout=30_000)
    assert "answered" in why.inner_text(), why.inner_text()  # says why: who answered, what is left
    # an answer that came through another() is drawn once, as its card, not also as an empty lane
    lanes = stream.locator(".jv-stream-lane:not(.jv-another) > div > b").all_inner_texts()
    cards = [t.split(": ", 1)[1] for t in stream.locator(".jv-another > b").all_inner_texts()]
    assert not set(lanes) & set(cards), (lanes, cards)


def use_routing_explorer(page: LabPage) -> None:
    nb = page.notebook()
    batch = nb.locator(".jv-batch")
    assert batch.locator("th").all_inner_texts()[:3] == ["#", "state", "checkpoint"]
    assert batch.locator("tbody tr").count() == 8
    assert batch.locator("text=<script>alert('hi')</script> my order is late").count() == 1
    routing = nb.locator(".jv-routing").first
    routing.locator("textarea").fill("Мой заказ не пришёл")
    routing.locator(".jv-model", has_text="→ multilingual").wait_for(timeout=15_000)


def use_timeline(page: LabPage) -> None:
    nb = page.notebook()
    timeline = nb.locator(".jv-timeline").first
    legend = timeline.locator(".jv-legend").inner_text()
    for name in ("on_route", "on_load", "on_evict", "on_predict_start", "on_error"):
        assert name in legend
    # nested: the Router call, then (indented) its loads, evictions and one run per request,
    # each run with its on_route mark and its predict span
    rows = page.page.evaluate("""(el) => [...el.querySelectorAll('.jv-lane')].map((lane) => [
      Number(lane.dataset.depth), lane.dataset.lane.split(' · ')[0], !!lane.querySelector('.jv-span'),
      [...lane.querySelectorAll('.jv-tick')].map((t) => t.dataset.event),
      parseFloat(getComputedStyle(lane.closest('tr').querySelector('.jv-lane-name')).paddingLeft)])""",
                              timeline.element_handle())
    assert [row[:4] for row in rows] == [
        [0, "router call 1", True, []], [1, "load english", False, ["on_load"]], [1, "run 1", True, ["on_route"]],
        [1, "evict english", False, ["on_evict"]], [1, "load multilingual", False, ["on_load"]],
        [1, "run 2", True, ["on_route"]]], rows
    assert rows[1][4] > rows[0][4], "nested rows are indented"
    # the event table lists on_evict, and no two markers of a lane overlap
    assert timeline.locator(".jv-events td", has_text="on_evict").count() >= 1
    assert page.page.evaluate("""(el) => {
      for (const lane of el.querySelectorAll('.jv-lane')) {
        const r = [...lane.querySelectorAll('.jv-tick')].map((t) => t.getBoundingClientRect());
        for (let i = 0; i < r.length; i++) for (let j = i + 1; j < r.length; j++)
          if (r[i].top === r[j].top && r[i].left < r[j].right && r[j].left < r[i].right) return false;
      }
      return true; }""", timeline.element_handle())
    # clicking a span zooms to it; "all" zooms back out
    before = timeline.locator(".jv-axis").inner_text()
    timeline.locator(".jv-lane .jv-span").first.click()
    timeline.locator(".jv-axis").filter(has_not_text=before).wait_for(timeout=10_000)
    timeline.locator("button", has_text="show all").click()
    timeline.locator("button", has_text="show all").wait_for(state="detached", timeout=10_000)
    assert timeline.locator(".jv-axis").inner_text() == before


def use_streaming_racing(page: LabPage) -> None:
    nb = page.notebook()
    streams = nb.locator(".jv-stream")
    assert streams.count() == 3
    race = streams.nth(1)
    assert race.locator("[data-state='replaced']").count() == 1
    assert race.locator("[data-state='won']").count() == 1
    failover = streams.nth(0)
    assert failover.locator("[data-state='failed'] .jv-err").count() == 1  # error shown, not hover
    last = streams.nth(2)  # the notebook already rated twice and took every other answer
    before = int(last.locator(".jv-ratings").inner_text().split(" ")[0])
    last.locator(".jv-another button", has_text="bad").first.click()
    last.locator(".jv-another .jv-rated", has_text="rated bad").first.wait_for(timeout=15_000)
    after = last.locator(".jv-ratings").inner_text()
    assert "another() #1" in after and int(after.split(" ")[0]) in (before, before + 1), (before, after)
    use_stream(page, last, other_models=0, rated=int(after.split(" ")[0]))


def use_journal(page: LabPage) -> None:
    nb = page.notebook()
    dash = nb.locator(".jv-dashboard").first
    assert dash.locator("table.jv-calls td.jv-n").count() > 0
    assert page.page.evaluate("(el) => getComputedStyle(el).textAlign",
                              dash.locator("table.jv-calls td.jv-n").first.element_handle()) \
        == "right"
    before = dash.locator(".jv-refreshed").inner_text()
    dash.locator("button", has_text="refresh").click()
    dash.locator(".jv-refreshed").filter(has_not_text=before).wait_for(timeout=15_000)
    check_plots(page)


def check_plots(page: LabPage) -> None:
    """The plotly figures (latency_figure's and the dashboard's tabs) follow the theme: no white
    sheet in Dark, and their text reads at >= 4.5:1 on the notebook's background."""
    page.notebook().locator(".js-plotly-plot .main-svg").first.wait_for(timeout=20_000)
    plots = page.page.evaluate(r"""() => {
      const rgb = (c) => (c.match(/[\d.]+/g) || []).map(Number);
      const lum = ([r, g, b]) => [r, g, b].map((v) => { v /= 255;
        return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; })
        .reduce((s, v, i) => s + v * [0.2126, 0.7152, 0.0722][i], 0);
      const ratio = (a, b) => { const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p); return (x + 0.05) / (y + 0.05); };
      const page = rgb(getComputedStyle(document.querySelector(".jp-Notebook")).backgroundColor);
      return [...document.querySelectorAll(".jp-OutputArea-output .js-plotly-plot")].map((plot) => {
        const svg = plot.querySelector(".main-svg"), tick = plot.querySelector(".xtick text, .ytick text, .gtitle");
        const bg = rgb(getComputedStyle(svg).backgroundColor);
        return {background: getComputedStyle(svg).backgroundColor, transparent: bg.length === 4 && bg[3] === 0,
                text: tick ? ratio(rgb(getComputedStyle(tick).fill), page) : null};
      });
    }""")
    assert plots, "no plotly figure shown"
    for plot in plots:
        assert plot["transparent"], (page.theme, plot)
        assert plot["text"] is None or plot["text"] >= MIN_CONTRAST, (page.theme, plot)
    assert any(p["text"] is not None for p in plots), plots


def use_labels(page: LabPage) -> None:
    """Label the inbox in the LabelView by clicking; the kernel's stats and the adapt counter follow."""
    nb = page.notebook()
    view = nb.locator(".jv-labels").first
    assert view.locator(".jv-label-table tbody tr").count() == 10
    # the notebook's first ten messages: 0-9 need it now, "phone call" but for 7 (email)
    for i in range(4):
        row = view.locator(f"tr[data-row='{i}']")
        row.locator("td[data-question='needs_now'] button[data-value='yes']").click()
        row.locator("td[data-question='reply'] button[data-value='phone call']").click()
    view.locator("tr[data-row='7'] td[data-question='reply'] button[data-value='email']").click()
    view.locator(".jv-q-stats[data-question='reply'] .jv-heldout", has_text="on 5 labels").wait_for(timeout=15_000)
    view.locator(".jv-q-stats[data-question='needs_now'] .jv-heldout", has_text="on 4 labels").wait_for(timeout=15_000)
    assert view.locator("tr[data-row='7'] td[data-question='reply'] button[data-value='email']")\
        .get_attribute("aria-pressed") == "true"
    assert view.locator(".jv-q-stats[data-question='reply'] .jv-rel-col").count() == 5
    view.locator("button.jv-adapt").click()
    view.locator(".jv-changed", has_text="answers changed").wait_for(timeout=60_000)
    assert "cross-validated" in view.locator(".jv-q-stats[data-question='reply']").inner_text()


USE: dict[str, Callable[[LabPage], None]] = {
    "01_quickstart_tour": use_quickstart,
    "02_routing_explorer": use_routing_explorer,
    "03_hooks_and_timeline": use_timeline,
    "04_broker_streaming_racing": use_streaming_racing,
    "05_journal_analysis": use_journal,
    "06_typed_questions_calibration": use_labels,
}


# what depends on the theme, beyond every view's contrast: checked again after the switch to Dark
THEMED: dict[str, Callable[[LabPage], None]] = {
    "05_journal_analysis": check_plots,
}


def switch_theme(page: LabPage, theme: str) -> None:
    """Switch the running JupyterLab to ``theme`` (its Settings ▸ Theme command) and let the
    views repaint."""
    page.set_theme(theme)
    page.theme = "light" if theme == LIGHT else "dark"
    page.page.wait_for_timeout(300)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_tutorial_runs_and_its_views_work_in_jupyterlab(lab_page: LabPage, path: Path) -> None:
    lab_page.console_errors.clear()
    switch_theme(lab_page, LIGHT)
    lab_page.open(path.name)
    lab_page.run_all()
    checks = fail_on_problems(lab_page.outputs(), lab_page)
    assert all(checks.values()), {k: v for k, v in checks.items() if not v}
    shown = screenshot_views(lab_page, path.stem)
    if path.stem in USE:
        assert shown, "the tutorial shows no view"
        USE[path.stem](lab_page)
    screenshot_for_readme(lab_page, path.stem)
    if shown:
        check_contrast(lab_page)
    assert not lab_page.console_errors, lab_page.console_errors
    # the same views after switching to Dark: every one is checked and screenshotted again
    switch_theme(lab_page, DARK)
    fail_on_problems(lab_page.outputs(), lab_page)
    assert screenshot_views(lab_page, path.stem) == shown, "a view disappeared with the theme switch"
    if path.stem in THEMED:
        THEMED[path.stem](lab_page)
    screenshot_for_readme(lab_page, path.stem)
    if shown:
        check_contrast(lab_page)
    assert not lab_page.console_errors, lab_page.console_errors
