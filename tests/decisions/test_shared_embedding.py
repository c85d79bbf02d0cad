"""An open part's token table shared with the own encoder's (decisions.shared_embedding): loaded
from a real checkpoint file, it answers exactly as the whole table, saves the whole table, and costs
only the rows it moved."""

from __future__ import annotations

import copy

import pytest
import torch
from safetensors import safe_open

from jevlaya_lab.decisions.agent import Agent
from jevlaya_lab.decisions.checkpoint import WEIGHTS_FILE, load_checkpoint, save_checkpoint
from jevlaya_lab.decisions.shared_embedding import SharedEmbedding
from jevlaya_lab.decisions.testing import tiny_open_parts

KEY = "open_model.encoder.embeddings.word_embeddings.weight"
MOVED = [3, 17, 40]
STATES = ["my invoice is wrong and i want my money back please", "thanks, all good now", "hello"]
QUESTIONS = {"new": {"type": "noul", "instructions": "The writer attaches a photograph."},
             "mood": {"type": "choice", "instructions": "How does the writer feel?",
                      "criteria": ["happy", "angry", "calm"]}}


def _parts(moved):
    """Tiny parts whose open encoder is the own encoder with the token rows ``moved`` and one layer
    changed: a tuned open part, as training makes one."""
    parts = tiny_open_parts()
    own, part = parts.model.encoder, parts.model.open_model.encoder
    part.load_state_dict(own.state_dict())
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        table = part.embeddings.word_embeddings.weight
        table[moved] += torch.randn(len(moved), table.shape[1], generator=generator)
        dense = part.encoder.layer[0].attention.output.dense.weight
        dense += 0.1 * torch.randn(dense.shape, generator=generator)
    return parts


def _whole(directory):
    """The checkpoint loaded, then its open part given the file's table whole (the unshared model)."""
    model, tokenizer, config = load_checkpoint(directory)
    with safe_open(directory / WEIGHTS_FILE, framework="pt") as handle:
        table = handle.get_tensor(KEY)
    model.open_model.encoder.set_input_embeddings(torch.nn.Embedding.from_pretrained(table, freeze=False))
    return model, tokenizer, config


def test_the_open_table_keeps_only_the_moved_rows_and_answers_as_the_whole_table(tmp_path):
    directory = save_checkpoint(tmp_path / "ckpt", *_parts(MOVED))
    model, tokenizer, config = load_checkpoint(directory)
    shared = model.open_model.encoder.get_input_embeddings()
    assert isinstance(shared, SharedEmbedding)
    assert shared.base is model.encoder.get_input_embeddings()
    assert shared.index.tolist() == MOVED
    with safe_open(directory / WEIGHTS_FILE, framework="pt") as handle:
        table = handle.get_tensor(KEY)
    every = torch.arange(table.shape[0])
    assert torch.equal(shared(every), table)  # every row, to the bit
    assert torch.equal(shared(every.flip(0)[None]), table.flip(0)[None])  # a batch of rows as the encoder asks
    held = {t.data_ptr() for t in (*model.parameters(), *model.buffers())}
    whole = _whole(directory)[0]
    assert sum(t.numel() for t in whole.parameters()) - sum(t.numel() for t in model.parameters()) == table.numel()
    assert model.encoder.get_input_embeddings().weight.data_ptr() in held
    shared_answers = Agent((model, tokenizer, config)).predict_batch(STATES, QUESTIONS)
    whole_answers = Agent(_whole(directory)).predict_batch(STATES, QUESTIONS)
    assert shared_answers == whole_answers


def test_a_saved_checkpoint_holds_the_whole_table_and_loads_again(tmp_path):
    directory = save_checkpoint(tmp_path / "ckpt", *_parts(MOVED))
    again = save_checkpoint(tmp_path / "again", *load_checkpoint(directory))
    for name in (directory, again):
        with safe_open(name / WEIGHTS_FILE, framework="pt") as handle:
            assert handle.get_slice(KEY).get_shape() == handle.get_slice(KEY.removeprefix("open_model.")).get_shape()
    with safe_open(directory / WEIGHTS_FILE, framework="pt") as first, \
            safe_open(again / WEIGHTS_FILE, framework="pt") as second:
        assert sorted(first.keys()) == sorted(second.keys())
        for key in first.keys():  # noqa: SIM118
            assert torch.equal(first.get_tensor(key), second.get_tensor(key)), key
    model = load_checkpoint(again).model
    assert model.open_model.encoder.get_input_embeddings().index.tolist() == MOVED


def test_a_table_that_moved_in_most_rows_is_loaded_whole(tmp_path):
    parts = _parts(MOVED)
    vocabulary = parts.model.encoder.get_input_embeddings().num_embeddings
    directory = save_checkpoint(tmp_path / "ckpt", *_parts(list(range(vocabulary // 2 + 1))))
    model = load_checkpoint(directory).model
    table = model.open_model.encoder.get_input_embeddings()
    assert type(table) is torch.nn.Embedding
    with safe_open(directory / WEIGHTS_FILE, framework="pt") as handle:
        assert torch.equal(table.weight, handle.get_tensor(KEY))
    assert table.weight.data_ptr() != model.encoder.get_input_embeddings().weight.data_ptr()


def test_an_unmoved_table_is_the_own_table(tmp_path):
    directory = save_checkpoint(tmp_path / "ckpt", *_parts([]))
    model = load_checkpoint(directory).model
    shared = model.open_model.encoder.get_input_embeddings()
    assert len(shared.index) == 0
    ids = torch.tensor([[1, 2, 3]])
    assert torch.equal(shared(ids), model.encoder.get_input_embeddings()(ids))


def test_a_copy_of_the_open_part_reads_the_same_own_table(tmp_path):
    """int8 quantisation copies each encoder: the copy of the open part still shares the own table."""
    directory = save_checkpoint(tmp_path / "ckpt", *_parts(MOVED))
    model, tokenizer, config = load_checkpoint(directory)
    shared = model.open_model.encoder.get_input_embeddings()
    clone = copy.deepcopy(model.open_model.encoder).get_input_embeddings()
    assert clone is not shared and clone.base is shared.base and clone.rows.data_ptr() != shared.rows.data_ptr()
    ids = torch.tensor([[3, 4, 17]])
    assert torch.equal(clone(ids), shared(ids))
    plain = Agent((model, tokenizer, config), quantize="int8").predict_batch(STATES, QUESTIONS)
    reference = Agent(_whole(directory), quantize="int8").predict_batch(STATES, QUESTIONS)
    assert plain == reference


def test_a_whole_table_loaded_into_the_shared_one_keeps_the_rows_it_differs_in(tmp_path):
    directory = save_checkpoint(tmp_path / "ckpt", *_parts(MOVED))
    model = load_checkpoint(directory).model
    shared = model.open_model.encoder.get_input_embeddings()
    table = shared.weight
    table[[5, 9]] += 1.0
    shared.load_state_dict({"weight": table})
    assert shared.index.tolist() == [3, 5, 9, 17, 40]
    assert torch.equal(shared(torch.arange(len(table))), table)
    with pytest.raises(RuntimeError, match="shared table"):
        shared.load_state_dict({"weight": table[:-1]})


def test_half_precision_tables_in_the_file_are_compared_as_the_model_holds_them(tmp_path):
    """A file whose tables are float16 (as a head may ship them): the rows are read from the file as
    float16, compared in the model's float32, and the moved ones kept exactly as the whole table gives."""
    from safetensors.torch import load_file, save_file

    directory = save_checkpoint(tmp_path / "ckpt", *_parts(MOVED))
    tensors = load_file(directory / WEIGHTS_FILE)
    for key in (KEY, KEY.removeprefix("open_model.")):
        tensors[key] = tensors[key].half()
    save_file(tensors, directory / WEIGHTS_FILE, metadata={"format": "pt"})
    model = load_checkpoint(directory).model
    shared = model.open_model.encoder.get_input_embeddings()
    assert isinstance(shared, SharedEmbedding) and shared.index.tolist() == MOVED
    assert torch.equal(shared(torch.arange(shared.num_embeddings)), tensors[KEY].float())
