"""The package's structure rules (docs/architecture.md), read from the code itself.

The graph has one node per module of ``jevlaya_lab/`` and an edge for every import of another
jevlaya_lab module: at the top, inside functions (a deferred import is still a dependency) and
under ``TYPE_CHECKING`` (a type-only import is a dependency of the reader and the type
checker). The rules:

1. No import circles, inside a package or across.
2. Layers: views (``widgets/``, ``frames/``, ``analysis``, ``figures``, ``notebooks``, ``binder``,
   ``commands/``, ``cli``) -> engines (``decisions/``, ``broker/``, ``local/``) -> ``hooks/``,
   ``journal/`` -> helpers (``_*.py``, ``errors.py``, ``display.py``, ``secrets.py``). An import
   never points up a layer, so no engine imports a view; and the two call engines,
   ``decisions/`` and ``broker/``, never import each other.
3. No engine imports ``display``: result types find their renderer through ``_rendering``.
4. No module outside ``decisions/training/`` is over 400 lines.
5. One lifecycle entry point: only ``hooks/dispatch.py`` runs the predict events
   (``on_predict_start``, ``on_error``, ``on_predict_end``); everyone else enters
   ``CallHooks.lifecycle``.

Known violations that other work in progress removes are listed below with whose work it is;
an entry that no longer matches anything fails too, so the lists only shrink.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "jevlaya_lab"

# Circles being removed elsewhere: every circle found must lie inside one of these module sets.
KNOWN_CIRCLES: dict[frozenset[str], str] = {}
# Imports against the layers being removed elsewhere: (importer, imported) -> whose work removes it.
KNOWN_UPWARD: dict[tuple[str, str], str] = {}
# Engine modules that still draw their own notebook display: module -> whose work moves it.
KNOWN_ENGINE_DISPLAY: dict[str, str] = {}
# Modules still over MAX_MODULE_LINES: path under jevlaya_lab/ -> whose work splits it.
MAX_MODULE_LINES = 400
KNOWN_LONG_MODULES: dict[str, str] = {
}
LIFECYCLE_MODULE = "jevlaya_lab.hooks.dispatch"
PREDICT_EVENTS = frozenset({"on_predict_start", "on_predict_end", "on_error"})

LAYERS = {"views": 3, "engines": 2, "base": 1, "helpers": 0}
AREAS = {
    "widgets": "views", "analysis": "views", "notebooks": "views", "binder": "views", "cli": "views",
    "telemetry": "views", "frames": "views",
    "commands": "views", "figures": "views",
    "decisions": "engines", "broker": "engines", "local": "engines",
    "hooks": "base", "journal": "base",
    "errors": "helpers", "display": "helpers", "secrets": "helpers",
}
NEVER_EACH_OTHER = ("decisions", "broker")


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package (packages by ``__init__``)."""
    found = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imported_names(tree: ast.AST, module: str, is_package: bool) -> Iterator[str]:
    """Every dotted name an import statement anywhere in ``tree`` may refer to."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            yield from (f"{source}.{alias.name}" for alias in node.names)  # a submodule or a name in source


def import_graph() -> dict[str, set[str]]:
    """Module -> the jevlaya_lab modules it imports (a name resolves to the module defining it)."""
    known = modules()
    graph = {}
    for module, path in known.items():
        targets = set()
        for name in _imported_names(ast.parse(path.read_text("utf-8")), module, path.name == "__init__.py"):
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def area(module: str) -> str:
    """``jevlaya_lab.broker.engine`` -> ``broker``; the package itself -> ``""``."""
    return (module.split(".") + [""])[1]


def layer(module: str) -> int:
    name = area(module)
    if name == "":
        return LAYERS["views"] + 1  # the public surface: nothing inside the package imports it
    if name.startswith("_"):
        return LAYERS["helpers"]
    assert name in AREAS, (f"{module}: new top-level module or package; add {name!r} to AREAS in "
                           f"{Path(__file__).name} with its layer ({', '.join(LAYERS)})")
    return LAYERS[AREAS[name]]


def test_the_graph_sees_the_package():
    graph = import_graph()
    assert "jevlaya_lab.broker.runtime" in graph["jevlaya_lab.broker.engine"]
    assert "jevlaya_lab.hooks" in graph["jevlaya_lab.decisions.agent"]
    # a deferred (function-level) import and a relative import are edges too
    assert "jevlaya_lab.journal.postgresql" in graph["jevlaya_lab.journal.sources"]
    assert "jevlaya_lab.decisions.errors" in graph["jevlaya_lab.decisions.multilingual_encoder"]


def test_circles_and_upward_imports_are_detected_on_a_small_graph():
    graph = {"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}, "a.w": {"a.x"}, "b.v": {"b.v2"}, "b.v2": set()}
    assert circles(graph) == [frozenset({"a.x", "a.y", "a.z"})]
    assert layer("jevlaya_lab.broker.engine") > layer("jevlaya_lab.journal.store") > layer("jevlaya_lab._lazy")
    assert layer("jevlaya_lab.widgets.render") > layer("jevlaya_lab.broker.streaming")


def test_no_import_circles():
    found = circles(import_graph())
    unknown = [sorted(c) for c in found if not any(c <= known for known in KNOWN_CIRCLES)]
    assert not unknown, f"import circles (break them, do not add them to KNOWN_CIRCLES): {unknown}"
    fixed = [reason for known, reason in KNOWN_CIRCLES.items() if not any(c <= known for c in found)]
    assert not fixed, f"these circles are gone; remove their KNOWN_CIRCLES entries: {fixed}"


def test_imports_point_one_way():
    graph = import_graph()
    upward = sorted((importer, imported) for importer, targets in graph.items() for imported in targets
                    if layer(imported) > layer(importer) and (importer, imported) not in KNOWN_UPWARD)
    assert not upward, f"imports against the layers (views -> engines -> hooks/journal -> helpers): {upward}"
    between = sorted((importer, imported) for importer, targets in graph.items() for imported in targets
                     if {area(importer), area(imported)} == set(NEVER_EACH_OTHER))
    assert not between, f"decisions and broker must not import each other: {between}"
    fixed = [reason for (importer, imported), reason in KNOWN_UPWARD.items() if imported not in graph.get(importer, ())]
    assert not fixed, f"these imports are gone; remove their KNOWN_UPWARD entries: {fixed}"


def test_the_readme_architecture_names_every_top_level_module():
    readme = (PACKAGE_DIR.parent / "README.md").read_text("utf-8")
    assert "## Architecture" in readme
    section = readme.split("## Architecture", 1)[1].split("\n## ", 1)[0]
    entries = sorted(path.name + ("/" if path.is_dir() else "") for path in PACKAGE_DIR.iterdir()
                     if (path.suffix == ".py" or (path.is_dir() and (path / "__init__.py").is_file())))
    missing = [entry for entry in entries if entry not in section]
    assert not missing, f"add a line for these to the README's architecture section: {missing}"


def test_no_engine_imports_display():
    graph = import_graph()
    found = sorted(importer for importer, targets in graph.items()
                   if layer(importer) == LAYERS["engines"] and "jevlaya_lab.display" in targets)
    unknown = [m for m in found if m not in KNOWN_ENGINE_DISPLAY]
    assert not unknown, (f"engines must not import display (return a result type whose "
                         f"_repr_mimebundle_ asks jevlaya_lab._rendering.render): {unknown}")
    fixed = [m for m in KNOWN_ENGINE_DISPLAY if m not in found]
    assert not fixed, f"these no longer import display; remove their KNOWN_ENGINE_DISPLAY entries: {fixed}"


def long_modules(limit: int = MAX_MODULE_LINES) -> dict[str, int]:
    """``{path under jevlaya_lab/: lines}`` of the modules over ``limit`` (training excluded)."""
    found = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        relative = path.relative_to(PACKAGE_DIR).as_posix()
        if relative.startswith("decisions/training/"):
            continue
        lines = len(path.read_text("utf-8").splitlines())
        if lines > limit:
            found[relative] = lines
    return found


def test_no_module_outside_training_is_over_400_lines():
    found = long_modules()
    unknown = {path: n for path, n in found.items() if path not in KNOWN_LONG_MODULES}
    assert not unknown, (f"modules over {MAX_MODULE_LINES} lines (split them by concern; "
                         f"do not add them to KNOWN_LONG_MODULES): {unknown}")
    fixed = [path for path in KNOWN_LONG_MODULES if path not in found]
    assert not fixed, f"these are {MAX_MODULE_LINES} lines or fewer now; remove their KNOWN_LONG_MODULES entries: {fixed}"


def lifecycle_steps(tree: ast.AST) -> list[str]:
    """Calls in ``tree`` that run a predict event or a lifecycle step themselves:
    ``x.emit("on_predict_start", ...)`` (or ``emit_each``, or any ``on_error`` /
    ``on_predict_end``), ``x.emit_error(...)``, ``x._start(...)``, ``x._finish(...)``,
    ``x._fail(...)``."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        name = node.func.attr
        first = node.args[0] if node.args else None
        event = first.value if isinstance(first, ast.Constant) else None
        if name in {"_start", "_finish", "_fail", "emit_error"} or (
                name in {"emit", "emit_each"} and event in PREDICT_EVENTS):
            found.append(f"line {node.lineno}: .{name}({event!r})" if event else f"line {node.lineno}: .{name}()")
    return found


def test_the_lifecycle_detector_sees_a_hand_made_lifecycle():
    made_by_hand = ast.parse("calls._start(ctx)\ncalls.emit('on_predict_end', ctx)\ncalls.emit_error(ctx)\n"
                             "calls.emit('on_route', ctx)\nwith calls.lifecycle(ctx): pass\n")
    assert len(lifecycle_steps(made_by_hand)) == 3


def test_one_lifecycle_entry_point():
    known = modules()
    by_hand = {module: steps for module, path in known.items() if module != LIFECYCLE_MODULE
               for steps in [lifecycle_steps(ast.parse(path.read_text("utf-8")))] if steps}
    assert not by_hand, (f"these modules run predict events themselves; enter "
                         f"CallHooks.lifecycle(contexts) instead: {by_hand}")
    # the Agent, a Router checkpoint group and a Router long state all enter it
    for module in ("jevlaya_lab.decisions.agent", "jevlaya_lab.decisions.router_batch",
                   "jevlaya_lab.decisions.router"):
        source = known[module].read_text("utf-8")
        assert ".lifecycle(" in source, f"{module} no longer enters CallHooks.lifecycle"


MAX_BROKER_MODULE_LINES = 400
# The broker modules that turn a caller's request into a call: they get the runtime's parts
# (Runtime.ready()) and hand them down; every module below them takes its parts as arguments.
RUNTIME_USERS = {"jevlaya_lab.broker.engine", "jevlaya_lab.broker.scoped",
                 "jevlaya_lab.broker.direct"}


def test_broker_modules_are_short_enough_to_hold():
    long = {path.name: lines for path in sorted((PACKAGE_DIR / "broker").glob("*.py"))
            if (lines := len(path.read_text("utf-8").splitlines())) > MAX_BROKER_MODULE_LINES}
    assert not long, f"broker modules over {MAX_BROKER_MODULE_LINES} lines (split them by concern): {long}"


def test_the_broker_call_path_takes_its_parts_not_the_runtime():
    graph = import_graph()
    users = {module for module, targets in graph.items() if "jevlaya_lab.broker.runtime" in targets}
    assert users, "the graph lost the runtime"
    assert users <= RUNTIME_USERS, (f"only {sorted(RUNTIME_USERS)} may import the runtime; pass "
                                    f"the parts down instead: {sorted(users - RUNTIME_USERS)}")
