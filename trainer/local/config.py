"""The local backend's configuration, and the model and tokenizer it builds.

``LocalModelConfig`` is plain, picklable configuration; ``load_model`` builds the heavy
objects from it. Nothing is downloaded: the default model is a small GPT-2 built from a
config in code (random weights, seeded), and ``model_path`` names a local model: a Hugging
Face directory, a GGUF file (de-quantized to float32 as it loads; kept in the process, so a
second load is a copy) or a packaged model's name (``smollm2``: see ``arena.models``).

Device and precision: ``device`` (``auto``: the first CUDA GPU, else Apple's MPS, else the
CPU) and ``dtype`` (``auto``: bfloat16 for a model directory on a CUDA GPU that supports
it, float32 otherwise). What is stored in that dtype depends on what trains:

- LoRA (``lora_rank > 0``): the frozen base weights are stored and computed in ``dtype``;
  the adapters and their Adam state stay float32 (peft's default).
- full fine-tuning: weights, gradients and Adam state stay float32 (bfloat16 weights would
  round away updates smaller than 1/256 of a weight: a small learning rate would not
  train); with bfloat16 the forward pass runs under ``torch.autocast``.

The sampler runs the same module in the same way (the same dtypes, the same autocast), and
logits are cast to float32 before ``log_softmax`` on both sides, so the logprobs the
trainer computes match those the sampler returned.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeAlias

import torch

from arena.models import is_model_name, load_gguf_tokenizer, require_gguf, resolve_model
from arena.renderers import ByteTokenizer
from trainer.local.buildlock import BUILD_LOCK

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

LocalTokenizer: TypeAlias = "ByteTokenizer | PreTrainedTokenizerBase"
"""The byte tokenizer of the default model, or a model directory's Hugging Face tokenizer."""

_WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")

Dtype = Literal["auto", "float32", "bfloat16"]
DTYPES: tuple[str, ...] = ("auto", "float32", "bfloat16")
LORA_TARGETS: tuple[str, ...] = ("attn", "mlp", "unembed")
"""What a LoRA adapter may cover: attention projections, MLP projections, the output
layer (Tinker's ``train_attn``, ``train_mlp``, ``train_unembed``)."""


def check_device_name(device: str) -> None:
    """Raise ValueError unless ``device`` is spelled ``auto``, ``cpu``, ``cuda``,
    ``cuda:N`` or ``mps`` (whether it is present is checked by ``resolve_device``)."""
    if device in ("auto", "cpu", "cuda", "mps"):
        return
    if device.startswith("cuda:") and device[5:].isdigit():
        return
    raise ValueError(f"unknown device {device!r}; choose auto, cpu, cuda, cuda:N or mps")


def resolve_device(device: str) -> torch.device:
    """The torch device ``device`` names (``auto``: the first CUDA GPU, else MPS, else the
    CPU). Raises ValueError for a bad name or a device this machine does not have, with
    what to use instead."""
    check_device_name(device)
    if device == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", 0)
        if _mps_available():
            return torch.device("mps")
        return torch.device("cpu")
    if device == "cpu":
        return torch.device("cpu")
    if device == "mps":
        if not _mps_available():
            raise ValueError("device 'mps': Apple's MPS is not available here; use cpu or auto")
        return torch.device("mps")
    if not torch.cuda.is_available():
        build = f"torch {torch.__version__}" + ("" if torch.version.cuda else ", a CPU build")
        raise ValueError(
            f"device {device!r}: no CUDA GPU is available here ({build}); use cpu or auto"
        )
    index = int(device[5:]) if ":" in device else 0
    count = torch.cuda.device_count()
    if index >= count:
        raise ValueError(f"device {device!r}: this machine has {count} CUDA GPU(s) (0-{count - 1})")
    return torch.device("cuda", index)


def resolve_dtype(dtype: str, device: torch.device, *, builtin: bool = False) -> torch.dtype:
    """The torch dtype ``dtype`` names on ``device``. ``auto``: bfloat16 on a CUDA GPU that
    supports it, unless ``builtin`` (the small built-in model, float32 everywhere: it
    trains from scratch and gains nothing from bfloat16); float32 otherwise. Raises
    ValueError for an unknown name, or bfloat16 on a GPU without it."""
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; choose {', '.join(DTYPES)}")
    if dtype == "float32":
        return torch.float32
    bf16_ok = device.type != "cuda" or torch.cuda.is_bf16_supported()
    if dtype == "bfloat16":
        if not bf16_ok:
            raise ValueError(f"dtype bfloat16: the GPU {device} does not support it; use float32")
        return torch.bfloat16
    if device.type == "cuda" and bf16_ok and not builtin:
        return torch.bfloat16
    return torch.float32


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


@dataclass(frozen=True)
class LocalModelConfig:
    """What the local backend runs: plain, picklable configuration (see ``load_model``).

    By default a GPT-2-architecture model over ``ByteTokenizer`` ids (vocab 259) with the
    sizes below and random weights drawn from ``seed``. With ``model_path``, a local Hugging
    Face causal-LM directory and its tokenizer instead (the size fields are then unused).
    """

    model_path: str | None = None
    """A local Hugging Face model directory (``config.json``, weights, tokenizer files), a
    ``.gguf`` file, a packaged model's name (``smollm2``; see ``arena.models``), or None for
    the built-in byte-level GPT-2."""
    seed: int = 0
    """Seeds the default model's initial weights and the sampler's random draws."""
    n_layer: int = 3
    """Transformer blocks of the default model."""
    n_embd: int = 128
    """Hidden size of the default model."""
    n_head: int = 4
    """Attention heads of the default model."""
    n_positions: int = 512
    """Context length (positions) of the default model."""
    device: str = "auto"
    """``auto`` (the first CUDA GPU, else MPS, else the CPU), ``cpu``, ``cuda``, ``cuda:N``
    or ``mps``. A device this machine lacks is refused by ``load_model``."""
    dtype: Dtype = "auto"
    """``auto``, ``float32`` or ``bfloat16`` (see the module docstring for what is stored
    in it; ``auto``: bfloat16 for a model directory on a CUDA GPU that supports it)."""
    lora_rank: int = 0
    """Rank of the LoRA adapter that trains (through ``peft``); 0 trains every weight."""
    lora_alpha: int = 32
    """LoRA's scale numerator: the adapter's output is scaled by ``lora_alpha / lora_rank``
    (32, as in Tinker's LoRA; the learning rate then hardly depends on the rank)."""
    lora_targets: tuple[str, ...] = LORA_TARGETS
    """Which layers get adapters: ``attn``, ``mlp``, ``unembed`` (the output layer)."""
    gradient_checkpointing: bool = False
    """Recompute each block's activations in the backward pass instead of keeping them:
    less memory for long datums, one more forward pass of each block per training step."""
    torch_threads: int | None = None
    """``torch.set_num_threads`` (process-wide) at load time. None: 1 for the built-in
    model, torch's default for a model directory. The built-in model's matrices are small:
    a second intra-op thread gains little on a quiet machine and loses 5-10x as soon as
    another process wants a core (every parallel region waits for the preempted thread)."""
    max_context_tokens: int | None = None
    """Caps the context (prompt plus sampled tokens, or a datum's length) below the
    model's own limit; None uses the model's limit."""
    max_batch_size: int = 64
    """Most sequences the sampler decodes together in one batch."""
    batch_window_s: float = 0.005
    """Longest time the sampler waits for more requests before it starts a batch (it
    starts at once when ``max_batch_size`` sequences are waiting)."""
    batch_quiet_s: float = 0.001
    """The sampler also starts a batch when no new request came for this long."""
    prefix_cache_mb: int = 1024
    """Most MiB of keys and values each sampler keeps for prompts that later prompts
    extend (a seat's next turn, a group's shared rules: ``trainer.local.prefix_cache``);
    least recently used blocks go first. SmolLM2 holds 46 KiB a token in float32 (about
    22,000 tokens in 1 GiB). 0 turns reuse off."""
    train_micro_batch_size: int = 32
    """Most datums in one forward/backward pass (bigger lists are split; gradients add up
    the same)."""
    train_micro_batch_mb: int = 4096
    """A rough bound, in MiB, on the memory one forward/backward pass holds: a micro-batch
    takes at most this many bytes' worth of padded tokens, a token costing its logits,
    their log-softmax and gradients (4 x vocabulary x 4 bytes) and its activations (32 x
    layers x hidden size x 4 bytes; ``forward.micro_batch_tokens``). SmolLM2 (vocabulary
    49,152, 30 layers of 576) gets about 1,400 tokens a pass (a pass of 2,500 tokens held
    8.6 GB on the CPU); the built-in model is never split by it. A datum longer than the
    bound is a pass of its own."""
    train_shared_prefix: bool = True
    """A training pass computes once the prefix that datums of a micro-batch share (the
    system prompt and rules of a seat's games, ``trainer.local.shared_prefix``), for models
    whose output layer splits off (Llama, Mistral, Qwen), without gradient checkpointing."""
    checkpoint_dir: str | None = None
    """Where ``save_state`` writes; None makes a fresh temporary directory per client."""

    def __post_init__(self) -> None:
        for name in ("n_layer", "n_embd", "n_head", "n_positions", "max_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"LocalModelConfig.{name} must be at least 1")
        if self.train_micro_batch_size < 1:
            raise ValueError("LocalModelConfig.train_micro_batch_size must be at least 1")
        if self.train_micro_batch_mb < 1:
            raise ValueError("LocalModelConfig.train_micro_batch_mb must be at least 1")
        if self.n_embd % self.n_head:
            raise ValueError(
                f"LocalModelConfig.n_embd ({self.n_embd}) must be a multiple of "
                f"n_head ({self.n_head})"
            )
        if self.batch_window_s < 0 or self.batch_quiet_s < 0:
            raise ValueError(
                "LocalModelConfig.batch_window_s and batch_quiet_s must not be negative"
            )
        if self.prefix_cache_mb < 0:
            raise ValueError("LocalModelConfig.prefix_cache_mb must not be negative")
        if self.torch_threads is not None and self.torch_threads < 1:
            raise ValueError("LocalModelConfig.torch_threads must be at least 1 (or None)")
        if self.max_context_tokens is not None and self.max_context_tokens < 2:
            raise ValueError("LocalModelConfig.max_context_tokens must be at least 2 (or None)")
        check_device_name(self.device)
        if self.dtype not in DTYPES:
            raise ValueError(f"unknown dtype {self.dtype!r}; choose {', '.join(DTYPES)}")
        if self.lora_rank < 0:
            raise ValueError(
                "LocalModelConfig.lora_rank must not be negative (0: full fine-tuning)"
            )
        if self.lora_alpha <= 0:
            raise ValueError("LocalModelConfig.lora_alpha must be positive")
        unknown = [t for t in self.lora_targets if t not in LORA_TARGETS]
        if unknown or (self.lora_rank and not self.lora_targets):
            raise ValueError(
                f"LocalModelConfig.lora_targets {self.lora_targets!r}: give some of "
                + ", ".join(LORA_TARGETS)
            )

    def torch_device(self) -> torch.device:
        """The device ``device`` names here; raises ValueError (see ``resolve_device``)."""
        return resolve_device(self.device)

    def weights_dtype(self, device: torch.device) -> torch.dtype:
        """The dtype the model is loaded in on ``device``: ``dtype`` for LoRA's frozen
        base, float32 for full fine-tuning (see the module docstring)."""
        compute = resolve_dtype(self.dtype, device, builtin=self.model_path is None)
        return compute if self.lora_rank > 0 else torch.float32

    def autocast_dtype(self, device: torch.device) -> torch.dtype | None:
        """The dtype the forward pass is autocast to (full fine-tuning in bfloat16), or
        None when the weights' own dtype is used."""
        compute = resolve_dtype(self.dtype, device, builtin=self.model_path is None)
        if self.lora_rank == 0 and compute != torch.float32:
            return compute
        return None


@dataclass
class LoadedModel:
    """A model ready to run, with what the clients need to know about it."""

    model: Any
    """The causal LM (a transformers ``PreTrainedModel``, or a ``peft`` LoRA model over
    one), on its device, in eval mode (dropout off, also while training)."""
    tokenizer: LocalTokenizer
    context_length: int
    """Most positions a sequence may use (prompt plus sampled tokens)."""
    pad_token_id: int
    """Filler id at padded positions (they are masked out)."""
    eos_token_ids: tuple[int, ...]
    """Ids that always end a sampled sequence."""
    autocast_dtype: torch.dtype | None = None
    """Run the forward pass under ``torch.autocast`` to this dtype (full fine-tuning in
    bfloat16); None: in the weights' own dtypes. Trainer and sampler both follow it."""

    def compute(self) -> Any:
        """The context every forward pass of this model runs in (autocast or nothing)."""
        import contextlib

        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        device = next(self.model.parameters()).device
        return torch.autocast(device.type, dtype=self.autocast_dtype)


def load_model(config: LocalModelConfig) -> LoadedModel:
    """Build the model and tokenizer that ``config`` names.

    Raises ValueError when ``model_path`` is not a loadable model directory (the message
    names the path and what is missing), when no context length can be found, or when
    the device or dtype is not available here. The model is the base: LoRA adapters are
    added by the training client.
    """
    device = config.torch_device()
    config.weights_dtype(device)  # a bad dtype for this device fails before any loading
    threads = config.torch_threads
    if threads is None and config.model_path is None:
        threads = 1
    if threads is not None and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
    with BUILD_LOCK:  # one model built at a time in a process (trainer.local.buildlock)
        if config.model_path is None:
            return _default_model(config)
        if is_model_name(config.model_path):
            return _model_from_gguf(config, config.model_path)
        return _model_from_dir(config, config.model_path)


def _placed(config: LocalModelConfig, loaded: LoadedModel) -> LoadedModel:
    """``loaded`` moved to the config's device and dtype, in eval mode."""
    device = config.torch_device()
    dtype = config.weights_dtype(device)
    torch.nn.Module.to(loaded.model, device=device, dtype=dtype).eval()
    loaded.autocast_dtype = config.autocast_dtype(device)
    return loaded


def _default_model(config: LocalModelConfig) -> LoadedModel:
    from transformers import GPT2Config, GPT2LMHeadModel

    settings: dict[str, Any] = dict(
        vocab_size=ByteTokenizer.vocab_size,
        n_layer=config.n_layer,
        n_embd=config.n_embd,
        n_head=config.n_head,
        n_positions=config.n_positions,
        bos_token_id=ByteTokenizer.BOS,
        eos_token_id=ByteTokenizer.EOS,
        pad_token_id=ByteTokenizer.PAD,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        # GPT-2's tanh-approximated GELU as one fused op (the default, "gelu_new", takes
        # several elementwise passes: a fifth of the prefill time on CPU).
        activation_function="gelu_pytorch_tanh",
    )
    gpt2_config = GPT2Config(**settings)
    with torch.random.fork_rng(devices=[]):  # seed the weights without touching global state
        torch.manual_seed(config.seed)
        model = GPT2LMHeadModel(gpt2_config)
    context = config.n_positions
    if config.max_context_tokens is not None:
        context = min(context, config.max_context_tokens)
    loaded = LoadedModel(
        model=model,
        tokenizer=ByteTokenizer(),
        context_length=context,
        pad_token_id=ByteTokenizer.PAD,
        eos_token_ids=(ByteTokenizer.EOS,),
    )
    return _placed(config, loaded)


def check_model_dir(path: str) -> None:
    """Raise ValueError naming ``path`` and what is missing unless it looks like a local
    Hugging Face model directory (config, weights and tokenizer files)."""
    if not os.path.isdir(path):
        raise ValueError(f"model_path {path!r} is not a directory (a local model directory)")
    present = set(os.listdir(path))
    missing = []
    if "config.json" not in present:
        missing.append("config.json")
    if not present.intersection(_WEIGHT_FILES):
        missing.append("weights (one of " + ", ".join(_WEIGHT_FILES) + ")")
    if not present.intersection(_TOKENIZER_FILES):
        missing.append("tokenizer files (one of " + ", ".join(_TOKENIZER_FILES) + ")")
    if missing:
        raise ValueError(
            f"model_path {path!r} is not a Hugging Face model directory: missing "
            + "; ".join(missing)
            + " (write one with model.save_pretrained(path) and tokenizer.save_pretrained(path))"
        )


_GGUF_MODELS: OrderedDict[str, Any] = OrderedDict()
"""De-quantized GGUF models of this process by file (on the CPU, float32), most recent
last: de-quantizing takes seconds, copying one a fraction of that."""
GGUF_CACHE_SIZE = 2
"""GGUF models kept de-quantized in a process."""
_GGUF_LOCK = threading.Lock()


def _model_from_gguf(config: LocalModelConfig, name: str) -> LoadedModel:
    """A GGUF model (a file, or a packaged model's name), de-quantized; the tokenizer and
    its chat template come from the same file. Raises ModelNotFound (a ValueError) for a
    model that is not here, ValueError for a file transformers cannot read."""
    import copy

    from transformers import AutoModelForCausalLM

    source = resolve_model(name)
    assert source.gguf_file is not None
    require_gguf()
    try:
        tokenizer = load_gguf_tokenizer(source)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"model {name!r}: cannot load its tokenizer: {exc}") from exc
    with _GGUF_LOCK:
        base = _GGUF_MODELS.get(source.path)
        if base is None:
            try:
                with _quiet_loading():
                    base = AutoModelForCausalLM.from_pretrained(
                        source.folder, gguf_file=source.gguf_file, local_files_only=True
                    )
            except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
                raise ValueError(
                    f"model {name!r}: cannot load {source.path} as a causal language model: {exc}"
                ) from exc
            base.eval()
            _GGUF_MODELS[source.path] = base
            while len(_GGUF_MODELS) > GGUF_CACHE_SIZE:
                _GGUF_MODELS.popitem(last=False)
        _GGUF_MODELS.move_to_end(source.path)
        model = copy.deepcopy(base)
    return _finish_loaded(config, model, tokenizer, name)


@contextlib.contextmanager
def _quiet_loading() -> Iterator[None]:
    """No progress bars while a GGUF file loads (transformers draws its de-quantizing bar
    with tqdm directly, outside its own switch): not a bar in the middle of a run's output."""
    from unittest import mock

    from transformers.utils import logging as hf_logging

    gguf_utils: Any = None
    with contextlib.suppress(ImportError):  # an older transformers draws no such bar
        import transformers.modeling_gguf_pytorch_utils as gguf_utils
    hf_logging.disable_progress_bar()
    try:
        if gguf_utils is not None and hasattr(gguf_utils, "tqdm"):
            with mock.patch.object(gguf_utils, "tqdm", lambda items, **_: items):
                yield
        else:  # pragma: no cover
            yield
    finally:
        hf_logging.enable_progress_bar()


def _model_from_dir(config: LocalModelConfig, path: str) -> LoadedModel:
    import transformers
    from transformers import AutoModelForCausalLM, AutoTokenizer

    check_model_dir(path)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"model_path {path!r}: cannot load its tokenizer: {exc}") from exc
    dtype = config.weights_dtype(config.torch_device())
    try:
        # Loaded straight in the dtype it runs in (a bfloat16 base never exists in float32);
        # transformers 5 calls the argument ``dtype``, 4.x ``torch_dtype``.
        dtype_arg = "dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"
        model = AutoModelForCausalLM.from_pretrained(
            path, local_files_only=True, **{dtype_arg: dtype}
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"model_path {path!r}: cannot load a causal language model from it: {exc}"
        ) from exc
    return _finish_loaded(config, model, tokenizer, path)


def _finish_loaded(config: LocalModelConfig, model: Any, tokenizer: Any, path: str) -> LoadedModel:
    context = _context_length(model.config, tokenizer, config.max_context_tokens)
    if context is None:
        raise ValueError(
            f"model_path {path!r}: its config names no context length "
            "(max_position_embeddings); set LocalModelConfig.max_context_tokens"
        )
    eos_ids = _ids(getattr(tokenizer, "eos_token_id", None))
    generation_config = getattr(model, "generation_config", None)
    if generation_config is not None:
        eos_ids += [i for i in _ids(generation_config.eos_token_id) if i not in eos_ids]
    pad = getattr(tokenizer, "pad_token_id", None)
    if pad is None:
        pad = eos_ids[0] if eos_ids else 0
    loaded = LoadedModel(
        model=model,
        tokenizer=tokenizer,
        context_length=context,
        pad_token_id=int(pad),
        eos_token_ids=tuple(eos_ids),
    )
    return _placed(config, loaded)


def vocab_rows(model: Any) -> int:
    """Rows of the model's input embedding: token ids must be below this."""
    weight = model.get_input_embeddings().weight
    if not isinstance(weight, torch.Tensor):
        raise TypeError("the model's input embedding has no weight tensor")
    return int(weight.shape[0])


def _context_length(model_config: Any, tokenizer: Any, cap: int | None) -> int | None:
    context: int | None = None
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(model_config, name, None)
        if isinstance(value, int) and value > 0:
            context = value
            break
    if context is None:
        value = getattr(tokenizer, "model_max_length", None)
        if isinstance(value, int) and 0 < value < 10_000_000:  # HF uses 1e30 for "unknown"
            context = value
    if cap is not None:
        context = cap if context is None else min(context, cap)
    return context


def _ids(value: Any) -> list[int]:
    if value is None:
        return []
    if isinstance(value, int):
        return [value]
    return [int(v) for v in value]
