"""Reference states by language (decisions/prior.py, training/language_references.py): an unseen
statement on a state is read against the reference states of the state's language."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from jevlaya_lab.decisions.agent import Agent
from jevlaya_lab.decisions.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from jevlaya_lab.decisions.detect import detect
from jevlaya_lab.decisions.encoding import row_tokenizer, serialize_state, tokenize_states
from jevlaya_lab.decisions.prior import MIN_LANGUAGE_BLOCK, PRIOR_KEY
from jevlaya_lab.decisions.prior_inputs import PriorBuilder
from jevlaya_lab.decisions.testing import fixed_prior_parts, make_tiny_parts, pooled_text, trained_share
from jevlaya_lab.decisions.training.language_references import draw_language_references, set_language_references
from jevlaya_lab.decisions.training.trainer import statement_z

KNOWN = "The customer asks for money back."
UNSEEN = "The writer attaches a photograph."
SPANISH = "hola, quiero devolver el pedido porque llego roto y no funciona"
FRENCH = "bonjour, je voudrais un remboursement pour la commande que je n ai pas recue"
STATES = [SPANISH, FRENCH, "my invoice is wrong and i want my money back please", "ok"]
BLOCKS = {"es": ["el pedido no llego", "quiero hablar con alguien"],
          "fr": ["la commande est en retard", "merci pour tout"]}
PRIOR = {"rank": 0, "reference": 3, "anchors": 2, "gate": [0.9, 60.0], "fallback": [1.5, 0.25, 0.0],
         "reference_languages": {"es": 2, "fr": 2}}


def _parts():
    parts = fixed_prior_parts(PRIOR, anchors=(KNOWN, "refund"), unseen=(UNSEEN,))
    model, tokenizer, encoder = parts.model, parts.tokenizer, parts.model.encoder
    with torch.no_grad():
        model.prior.language_reference.copy_(torch.stack([pooled_text(encoder, tokenizer, t)
                                                          for texts in BLOCKS.values() for t in texts]))
    return parts


def _z(s, o, reference):
    against = reference @ o
    return ((s @ o - against.mean()) / against.std()).item()


def test_an_unseen_statement_reads_the_reference_states_of_the_states_language(tmp_path):
    """The trained part of an answer reads ``reference``; the fallback part reads the block of the
    state's detected language (Spanish, French), and ``reference`` for a language without a block
    (English) or an undecided one ("ok"). It survives a save and load."""
    parts = _parts()
    model, tokenizer, encoder = parts.model, parts.tokenizer, parts.model.encoder
    assert [detect(s)["language"] for s in STATES] == ["es", "fr", "en", None]
    path = save_checkpoint(tmp_path / "ck", *parts)
    assert json.loads((path / "rl_agent_config.json").read_text())["similarity_prior"]["reference_languages"] == {
        "es": 2, "fr": 2}
    agent = Agent(path)
    prior = model.prior
    blocks = {"es": prior.language_reference[:2], "fr": prior.language_reference[2:]}
    questions = {"known": {"type": "noul", "instructions": KNOWN}, "new": {"type": "noul", "instructions": UNSEEN}}
    moved = 0
    for state, result in zip(STATES, agent.predict_batch(STATES, questions)):
        s = pooled_text(encoder, tokenizer, serialize_state(state))
        local = blocks.get(detect(state)["language"], prior.reference)
        for qid, text in (("known", KNOWN), ("new", UNSEEN)):
            o = pooled_text(encoder, tokenizer, text)
            g = trained_share(prior, o)
            want = torch.sigmoid(torch.tensor(g * (9.0 * _z(s, o, prior.reference) - 3.0)
                                              + (1 - g) * (1.5 * _z(s, o, local) + 0.25))).item()
            assert result["answers"][qid]["noul"] == pytest.approx(want, abs=2e-4)
            assert (g > 0.99) == (qid == "known")
        z = _z(s, o, prior.reference)
        plain = torch.sigmoid(torch.tensor(g * (9.0 * z - 3.0) + (1 - g) * (1.5 * z + 0.25))).item()
        moved += abs(result["answers"]["new"]["noul"] - plain) > 1e-3
    assert moved == 2  # the Spanish and the French state; the others read ``reference`` as before


def test_fitting_the_fallback_reads_each_texts_language_block():
    """``statement_z`` (what the fallback is fit on) standardises a text's cosine against its
    language's block, as the prior reads it."""
    parts = _parts()
    model, tokenizer, encoder = parts.model, parts.tokenizer, parts.model.encoder
    _, z = statement_z(model, tokenizer, STATES, [UNSEEN] * len(STATES), max_len=parts.config.max_len)
    o = pooled_text(encoder, tokenizer, UNSEEN)
    prior = model.prior
    references = [prior.language_reference[:2], prior.language_reference[2:], prior.reference, prior.reference]
    want = [_z(pooled_text(encoder, tokenizer, s), o, r) for s, r in zip(STATES, references)]
    assert z.tolist() == pytest.approx(want, abs=1e-4)


def test_language_blocks_are_drawn_from_the_written_messages_by_detected_language():
    """Each block holds up to ``per_language`` of the multilingual hand-written training messages
    whose detected language is the block's, pooled as states are; a language with fewer than the
    smallest block is left out, and a bad size names the fix."""
    from jevlaya_lab.decisions.training.written import load_written

    parts = make_tiny_parts(similarity_prior={"rank": 0, "reference": 3})
    model, tokenizer = parts.model, parts.tokenizer
    vectors, blocks = draw_language_references(model, tokenizer, ["multi"], per_language=30, max_len=64)
    counts: dict[str, int] = {}
    for written in load_written(("multi",)):
        language = detect(written.text)["language"]
        counts[language] = counts.get(language, 0) + 1
    assert [code for code, _ in blocks] == sorted(c for c, n in counts.items() if c and n >= MIN_LANGUAGE_BLOCK)
    assert len(blocks) >= 5 and all(n == 30 for _, n in blocks)
    assert vectors.shape == (30 * len(blocks), model.hidden_size)
    again, _ = draw_language_references(model, tokenizer, ["multi"], per_language=30, max_len=64)
    assert torch.equal(vectors, again)  # a seeded draw
    rows = row_tokenizer(tokenizer)
    first = [w.text for w in load_written(("multi",)) if detect(w.text)["language"] == blocks[0][0]]
    pooled = PriorBuilder(model, rows).state_vectors(tokenize_states(rows, first), 64)
    assert all(any(torch.allclose(v, p, atol=1e-5) for p in pooled) for v in vectors[:30])
    config = {"similarity_prior": model.prior.config.to_value()}
    set_language_references(model, config, vectors, blocks)
    assert config["similarity_prior"]["reference_languages"] == dict(blocks)
    with pytest.raises(ValueError, match=f"per_language=5: must be an int >= {MIN_LANGUAGE_BLOCK}"):
        draw_language_references(model, tokenizer, ["multi"], per_language=5)


@pytest.mark.parametrize("value, fragment", [
    ({"reference": 3, "reference_languages": ["es", "fr"]}, "reference_languages must map language codes"),
    ({"reference": 3, "reference_languages": {"es": 0}}, "counts >= 1"),
    ({"reference": 3, "reference_languages": {"es": True}}, "counts >= 1"),
    ({"reference_languages": {"es": 2}}, "it needs reference > 0"),
])
def test_a_bad_language_block_entry_names_the_key_and_the_fix(tmp_path, value, fragment):
    model, tokenizer, config = make_tiny_parts(similarity_prior={"rank": 0})
    path = save_checkpoint(tmp_path / "ck", model, tokenizer, config)
    data = json.loads((path / "rl_agent_config.json").read_text())
    data["similarity_prior"] = {"rank": 0, **value}
    (path / "rl_agent_config.json").write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match="similarity_prior") as info:
        load_checkpoint(path)
    assert fragment in str(info.value)


def test_mini_multi_reads_a_french_or_spanish_statement_against_messages_of_that_language():
    """The shipped mini-multi carries language blocks (es, fr, de, pt, it among them). A user's
    French statement on French messages: without the blocks every message reads "yes" (0.61-0.82:
    French is near French, and the reference states are mostly English); with them the three that
    hold are above 0.5 and the three that do not are below. The Spanish statement ranks its messages
    the same way and says "no" to the ones that do not hold. The own head is asked with ``"part": "own"``:
    a statement in a user's own words is answered by the open part, which ranks and answers them so too."""

    from jevlaya_lab import load

    agent = load("mini-multi", device="cpu")
    prior = agent.decision_model.prior
    assert {"es", "fr", "de", "pt", "it"} <= {code for code, _ in prior.config.reference_languages}
    cases = {
        "fr": ("Le client demande à être remboursé.",
               ["Bonjour, j'ai renvoyé les chaussures il y a trois semaines et je n'ai toujours pas été remboursé.",
                "Je veux récupérer mon argent, le colis est arrivé abîmé.",
                "Merci de me rembourser le prélèvement en double de ce mois-ci sur ma carte."],
               ["Bonjour, quels sont vos horaires d'ouverture le dimanche ?",
                "Merci beaucoup pour votre aide, tout fonctionne maintenant.",
                "Je n'arrive pas à me connecter à l'application depuis ce matin."]),
        "es": ("El cliente pide que le devuelvan el dinero.",
               ["Hola, devolví la chaqueta hace dos semanas y todavía no me han reembolsado el dinero. ¿Cuándo llega?",
                "Quiero que me devuelvan lo que pagué, el producto llegó roto.",
                "Buenos días, ¿me podéis reembolsar el cargo doble de ayer en mi tarjeta?"],
               ["Hola, ¿a qué hora abre la tienda de Madrid el sábado?",
                "Gracias por la ayuda de ayer, todo funciona perfectamente.",
                "No puedo iniciar sesión en la aplicación desde esta mañana, me da un error."]),
    }

    def said(lang, part="own"):
        statement, holds, other = cases[lang]
        answers = agent.predict_batch(holds + other, {"q": {"type": "noul", "instructions": statement, "part": part}})
        p = [a["answers"]["q"]["noul"] for a in answers]
        return p[:3], p[3:]

    for lang in cases:  # the own head (asked with "part": "own"), and the open part that answers them as asked
        for part in ("own", "open"):
            holds, other = said(lang, part)
            assert min(holds) > max(other) and max(other) < 0.5, (lang, part, holds, other)
    assert min(said("fr")[0]) > 0.5
    prior.config = dataclasses.replace(prior.config, reference_languages=())  # the same head without blocks
    agent._prior = PriorBuilder(agent.decision_model, row_tokenizer(agent.tokenizer))
    assert min(said("fr")[1]) > 0.5  # every French message read "yes"


def test_the_fallback_only_command_draws_the_blocks_into_the_head_and_drops_them_at_zero(tmp_path):
    """``jevlaya-lab train --name mini-multi --fallback-only`` (here fit on the multilingual messages
    alone, ``--datasets '' --written multi``, to keep it short): the written head keeps every shipped
    tensor but the blocks, which are drawn anew by language (fp16, as many rows as the config's
    blocks say), and the fallback is refit; ``--language-references 0`` writes a head without blocks."""
    from safetensors.torch import load_file

    from jevlaya_lab.decisions import bundled
    from jevlaya_lab.decisions.training import cli as train_cli

    args = ["--name", "mini-multi", "--fallback-only", "--datasets", "", "--written", "multi"]
    shipped = load_file(bundled.head_dir("mini-multi") / "head.safetensors")
    shipped_config = json.loads((bundled.head_dir("mini-multi") / "config.json").read_text())
    for out, per_language in ((tmp_path / "blocks", "300"), (tmp_path / "none", "0")):
        assert train_cli.main([*args, "--language-references", per_language, "--out", str(out)]) == 0
        head, prior = load_file(out / "head.safetensors"), json.loads((out / "config.json").read_text())[PRIOR_KEY]
        assert all(torch.equal(head[k], v) for k, v in shipped.items() if k != "prior.language_reference")
        assert prior["fallback"] != shipped_config[PRIOR_KEY]["fallback"]  # refit on these rows
        if per_language == "0":
            assert "prior.language_reference" not in head and "reference_languages" not in prior
            continue
        blocks = prior["reference_languages"]
        assert len(blocks) >= 5 and "en" not in blocks and max(blocks.values()) <= 300
        assert head["prior.language_reference"].shape[0] == sum(blocks.values())
        assert head["prior.language_reference"].dtype == torch.float16
