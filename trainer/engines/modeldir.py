"""The model a vLLM server loads: a Hugging Face directory in float32.

A model directory is served as it is. A GGUF model (``smollm2``, a ``.gguf`` file) is
de-quantized once with transformers, its quantizer cleared so that ``save_pretrained``
writes plain float32 weights, and saved with its tokenizer (and chat template) beside the
runs, keyed by the file's hash: later runs reuse it. The learner reads the same GGUF file
the same way, so the engine and the learner start from the same weights and tokenize alike.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

ENGINE_MODELS_DIR = ".engine-models"
"""The folder, beside the runs, that holds the de-quantized models (one per GGUF hash)."""


def engine_model_dir(model: str, runs_dir: Path) -> Path:
    """The float32 Hugging Face directory of ``model`` (a packaged model's name, a
    ``.gguf`` file or a model directory) that a vLLM server loads, written under
    ``runs_dir / ENGINE_MODELS_DIR`` the first time. Raises ModelNotFound (a ValueError)
    for a model that is not here."""
    from arena.models import model_fingerprint, resolve_model

    source = resolve_model(model)
    if source.gguf_file is None:
        return Path(source.folder)
    target = runs_dir / ENGINE_MODELS_DIR / f"{source.name}-{model_fingerprint(source)}"
    if (target / "config.json").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        _dequantize(model, partial)
        os.replace(partial, target)  # whole or not at all: a crash leaves no half model
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    return target


def _dequantize(model: str, directory: Path) -> None:
    """Write ``model`` (a GGUF model) to ``directory`` as a float32 Hugging Face model."""
    import torch

    from arena.models import load_gguf_tokenizer, resolve_model
    from trainer.local.config import LocalModelConfig, load_model

    loaded = load_model(LocalModelConfig(model_path=model, device="cpu", dtype="float32"))
    base = loaded.model
    # Loaded from GGUF, the model remembers its quantizer; without it save_pretrained
    # writes the float32 weights a server can load.
    for holder in (base, base.config):
        for name in ("hf_quantizer", "quantization_config"):
            if hasattr(holder, name):
                try:
                    delattr(holder, name)
                except AttributeError:
                    setattr(holder, name, None)
    base.to(torch.float32).save_pretrained(str(directory), safe_serialization=True)
    load_gguf_tokenizer(resolve_model(model)).save_pretrained(str(directory))
