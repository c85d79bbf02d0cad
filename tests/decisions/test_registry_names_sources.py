"""Registry: canonical names, aliases, sources, near-typo warnings."""

import warnings
from pathlib import Path

import pytest

from jevlaya_lab.decisions.registry import (
    DEFAULT_MODELS,
    LAYA_MODELS,
    Bundled,
    NearTypoWarning,
    Registry,
    RegistryEntry,
    agent_source,
    one_edit_apart,
)
from jevlaya_lab.decisions.router import Router


def test_default_registry_maps_english_and_multilingual_aliases_to_bundled_checkpoints():
    """english/en and multilingual/ml/multi; the default registry works offline (bundled)."""
    registry = Registry(DEFAULT_MODELS)
    assert registry.resolve("en") == "english"
    assert registry.resolve("ML") == "multilingual"  # case-insensitive
    assert registry.resolve("multi") == "multilingual"
    assert registry.entry("english").source == Bundled("mini-en")
    assert registry.entry("multilingual").kind == "bundled"


def test_laya_registry_is_one_call_away_and_points_at_the_hub():
    """The public Laya hub checkpoints are one call away (Router.laya())."""
    router = Router.laya()
    assert router.resolve("typed") == "typed-decisions"
    # laya 0.4.15's layout: one bundle repo, English at its root, the others in subfolders
    assert router.registered["multilingual"].source == ("convaiinnovations/laya", "multilingual")
    assert {e.kind for e in router.registered.values()} == {"hub", "subfolder"}
    assert router.resolve("Typed_Decisions") == router.resolve(" decisions ") == "typed-decisions"
    assert router.default == "multilingual"
    assert router.route("x", task="typed-decisions").model == "typed-decisions"
    assert set(LAYA_MODELS) == {"english", "multilingual", "typed-decisions"}


def test_unknown_name_lists_valid_names_and_aliases_and_suggests_the_closest():
    """Unknown names raise a ValueError listing valid names and aliases."""
    registry = Registry(DEFAULT_MODELS)
    with pytest.raises(ValueError) as info:
        registry.resolve("multilingul")
    message = str(info.value)
    assert "'multilingul'" in message and "Did you mean 'multilingual'?" in message
    for name in ("english", "en", "multilingual", "ml", "multi"):
        assert name in message
    with pytest.raises(ValueError, match="register\\('nope'"):
        registry.resolve("nope")


def test_registering_a_name_one_edit_away_from_a_known_one_warns():
    """A name one edit away from a known one warns."""
    registry = Registry(DEFAULT_MODELS)
    with pytest.warns(NearTypoWarning, match="'englsh' is one edit away from the registered 'english'"):
        registry.register("englsh", "/tmp/ckpt")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        registry.register("support-v2", "/tmp/other")  # far from every name: no warning


@pytest.mark.parametrize("a,b,expected", [
    ("english", "englsh", True), ("english", "enlgish", True), ("english", "englishh", True),
    ("english", "spanish", False), ("multi", "multi", False), ("abc", "abcde", False),
])
def test_one_edit_apart(a, b, expected):
    assert one_edit_apart(a, b) is expected


def test_sources_of_every_kind(tmp_path):
    """Sources are a local dir, (repo, subfolder), a hub id or a bundled checkpoint."""
    registry = Registry()
    assert registry.register("local", tmp_path).kind == "local"
    assert registry.register("local-str", str(tmp_path)).kind == "local"
    assert registry.register("relative", "./checkpoints/mine").kind == "local"
    assert registry.register("bundle", (str(tmp_path), "english")).kind == "subfolder"
    assert registry.register("hub", "org/some-checkpoint").kind == "hub"
    entry = registry.register("shipped", "bundled:mini-multi")
    assert entry.source == Bundled("mini-multi") and entry.kind == "bundled"
    assert agent_source(registry.entry("bundle")) == (str(tmp_path), "english")
    assert agent_source(registry.entry("local")) == Path(tmp_path)


@pytest.mark.parametrize("source,error", [
    (42, TypeError), (("a",), TypeError), ("", ValueError), ("bundled:mini-xx", ValueError),
    (Bundled("nope"), ValueError),
])
def test_bad_sources_name_the_field_and_the_fix(source, error):
    with pytest.raises(error, match="register\\('x', source\\)"):
        Registry().register("x", source)


def test_alias_conflicts_are_refused_with_a_fix():
    registry = Registry(DEFAULT_MODELS)
    with pytest.raises(ValueError, match="alias 'en' already belongs to 'english'"):
        registry.register("other", "/tmp/x", aliases=["en"])
    with pytest.raises(ValueError, match="'ml' is already an alias of 'multilingual'"):
        registry.register("ml", "/tmp/x")


def test_register_replace_and_unregister_keep_aliases_consistent():
    """register / unregister / resolve / registered stay consistent, aliases included."""
    registry = Registry(DEFAULT_MODELS)
    registry.register("english", "/tmp/new-en", "replacement", aliases=["en-new"])
    assert registry.registered["english"] == RegistryEntry("english", "/tmp/new-en", "replacement", ("en-new",))
    assert "en" not in registry and registry.resolve("en-new") == "english"
    removed = registry.unregister("ml")
    assert removed.name == "multilingual"
    assert "multi" not in registry and list(registry.registered) == ["english"]


def test_models_dict_forms_are_accepted_and_bad_specs_rejected(tmp_path):
    registry = Registry({"a": tmp_path, "b": {"source": tmp_path, "aliases": ["bee"], "description": "B"}})
    assert registry.resolve("bee") == "b" and registry.entry("b").description == "B"
    with pytest.raises(ValueError, match="models\\['c'\\]: expected keys 'source'"):
        Registry({"c": {"path": tmp_path}})


def test_a_decision_carries_the_repo_of_the_current_registration(tmp_path):
    """``repo`` is made once per registration (every decision carries it): registering a name
    again with another source, or unregistering it, must not leave the old one behind."""
    from jevlaya_lab.decisions.router import Router

    router = Router({"english": tmp_path / "first", "multilingual": "org/multi"})
    assert router.route("hello there, where is my order?", model="english").repo == str(tmp_path / "first")
    router.register("english", ("org/bundle", "english"))
    assert router.route("hello there, where is my order?", model="english").repo == "org/bundle/english"
    router.register("later", "bundled:mini-en", aliases=["short"])
    assert router.route("x", model="short").repo == "bundled:mini-en" == router._registry.repo("short")
    router.unregister("later")
    with pytest.raises(ValueError, match="unknown checkpoint name 'later'"):
        router._registry.repo("later")
