"""Lazy package attributes: a public name imports its defining module on first use.

This keeps ``import jevlaya_lab`` (and its subpackages) free of torch, transformers and the
widget libraries until a name that needs them is touched.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_attributes(
    package: str,
    namespace: dict[str, Any],
    names: dict[str, str],
    modules: dict[str, str] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Return ``(__getattr__, __dir__)`` for a package.

    ``names`` maps an attribute to the module that defines it; ``modules`` maps an attribute to
    a module that is itself the value. Resolved values are cached in ``namespace`` so later
    lookups never come back here.
    """
    modules = modules or {}

    def __getattr__(name: str) -> Any:
        if name in names:
            value = getattr(importlib.import_module(names[name]), name)
        elif name in modules:
            value = importlib.import_module(modules[name])
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*names, *modules, *namespace.get("__all__", ())})

    return __getattr__, __dir__
