"""The local backend on a GPU: sampled and trained tokens/s against a plain transformers +
peft loop on the same model and batch, in the same run; MFU; memory of LoRA vs full.

    python -m bench.gpu [--json] [--size small] [--batch 64] [--prompt-tokens 256]
        [--max-tokens 64] [--train-batch 16] [--train-tokens 512] [--lora-rank 16]

The model is a Qwen3-architecture causal LM built from a config in code (``small``: the
shape of Qwen3-0.6B, 28 layers, hidden 1024, vocabulary 151,936; random weights, bfloat16),
saved as a Hugging Face directory with a word-level tokenizer, and loaded by both sides
from there. Nothing is downloaded.

- sampling: ``--batch`` requests of ``--prompt-tokens`` random ids, ``--max-tokens`` tokens
  each at temperature 1. Arena: every request sent at once to the local sampling client
  (``sample_async``), as concurrent envs send them. Plain: one left-padded
  ``model.generate(do_sample=True)`` call over the same prompts. Tokens/s counts the
  tokens actually sampled (a row may stop early at EOS).
- training: ``--train-batch`` datums of ``--train-tokens`` tokens, importance-sampling loss
  on the second half of each, LoRA of ``--lora-rank`` on the same layers, AdamW. Arena:
  ``forward_backward`` + ``optim_step``. Plain: a peft model, one forward and backward of
  the same micro-batches, ``optimizer.step()``.
- MFU: model FLOPs per token (2 per weight for a forward pass, plus attention's; training
  a LoRA adapter 2x that, the base's weight gradients not being computed) times tokens/s,
  over the GPU's peak dense bfloat16 FLOP/s (a table by GPU name, or ``--peak-tflops``).
- memory: after one step, trainable parameters and AdamW state bytes of a LoRA client
  against a full fine-tuning client of the same model (``LocalTrainingClient.memory()``),
  and the GPU's peak allocated bytes for each.

Rounds alternate arena and plain; the median of each is kept. Where no CUDA GPU is
present, it prints one line saying so and exits 0 (``--json``: ``{"skipped": true, ...}``).
``--device cpu --size tiny`` runs the same code on the CPU (for the tests; the figures of
a CPU run say nothing about a GPU).
"""

from __future__ import annotations

import asyncio
import gc
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from bench.common import emit, median, parser

SIZES: dict[str, dict[str, int]] = {
    "tiny": dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        vocab_size=512,
    ),
    "medium": dict(
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=64,
        vocab_size=151_936,
    ),
    "small": dict(  # the shape of Qwen3-0.6B
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        vocab_size=151_936,
    ),
}
"""Model shapes (Qwen3 architecture, tied embeddings)."""

PEAK_BF16_TFLOPS: tuple[tuple[str, float], ...] = (
    ("H200", 989.0),
    ("H100 PCIe", 756.0),
    ("H100", 989.0),
    ("A100", 312.0),
    ("L40S", 362.0),
    ("L4", 121.0),
    ("A10G", 125.0),
    ("A10", 125.0),
    ("RTX 4090", 165.0),
    ("RTX 3090", 71.0),
)
"""Dense bfloat16 tensor-core peaks (vendor figures, without sparsity), first match wins."""


def skip_reason(device: str) -> str | None:
    """Why the benchmark cannot run on ``device`` here, or None."""
    if device.startswith("cuda") and not torch.cuda.is_available():
        build = "a CPU build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}"
        return f"no CUDA GPU here (torch {torch.__version__}, {build})"
    return None


def peak_flops(device: torch.device, override_tflops: float | None) -> tuple[float | None, str]:
    """The GPU's peak dense bfloat16 FLOP/s and its name (None when unknown)."""
    if device.type != "cuda":
        return (override_tflops * 1e12 if override_tflops else None), "cpu"
    name = torch.cuda.get_device_name(device)
    if override_tflops:
        return override_tflops * 1e12, name
    for key, tflops in PEAK_BF16_TFLOPS:
        if key in name:
            return tflops * 1e12, name
    return None, name


def write_model_dir(path: Path, size: str, seed: int = 0) -> dict[str, Any]:
    """Write a Qwen3-architecture model of ``size`` (random weights) and a word-level
    tokenizer over its vocabulary to ``path``; returns the config's settings."""
    from tokenizers import Tokenizer, models
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, Qwen3Config

    shape = SIZES[size]
    vocab = shape["vocab_size"]
    words = {f"t{i}": i for i in range(vocab - 2)}
    words.update({"<|endoftext|>": vocab - 2, "<|im_end|>": vocab - 1})
    core = Tokenizer(models.WordLevel(vocab=words, unk_token="<|endoftext|>"))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    tokenizer.save_pretrained(path)
    config = Qwen3Config(
        **shape,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        eos_token_id=vocab - 1,
        pad_token_id=vocab - 2,
        bos_token_id=vocab - 2,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(path)
    del model
    return dict(shape)


def flops_per_token(shape: dict[str, int], context: int) -> float:
    """Forward FLOPs per token: 2 per weight that multiplies it (the input embedding is a
    lookup) plus attention's scores and values over ``context`` positions."""
    d, layers = shape["hidden_size"], shape["num_hidden_layers"]
    q = shape["num_attention_heads"] * shape["head_dim"]
    kv = shape["num_key_value_heads"] * shape["head_dim"]
    per_layer = d * q + 2 * d * kv + q * d + 3 * d * shape["intermediate_size"]
    weights = layers * per_layer + d * shape["vocab_size"]
    return 2.0 * weights + 4.0 * layers * q * context


# -- workloads -------------------------------------------------------------------------------


def make_prompts(batch: int, length: int, vocab: int, seed: int) -> list[list[int]]:
    """``batch`` prompts of ``length`` random ids (below the two special tokens)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab - 2, (batch, length), generator=generator).tolist()  # type: ignore[no-any-return]


def make_datums(batch: int, length: int, vocab: int, seed: int) -> list[Any]:
    """Importance-sampling datums: ``length`` tokens, the second half the action."""
    from tinker import types

    rows = make_prompts(batch, length + 1, vocab, seed)
    datums = []
    half = length // 2
    for row in rows:
        advantages = [0.0] * half + [1.0] * (length - half)
        logprobs = [0.0] * half + [-5.0] * (length - half)
        datums.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(row[:-1]),
                loss_fn_inputs={
                    "target_tokens": types.TensorData(data=row[1:], dtype="int64", shape=[length]),
                    "logprobs": types.TensorData(data=logprobs, dtype="float32", shape=[length]),
                    "advantages": types.TensorData(
                        data=advantages, dtype="float32", shape=[length]
                    ),
                },
            )
        )
    return datums


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


async def arena_sample(sampler: Any, prompts: list[list[int]], max_tokens: int) -> int:
    """Every prompt sampled at once through the local sampling client; tokens sampled."""
    from tinker import types

    params = types.SamplingParams(max_tokens=max_tokens, temperature=1.0)
    responses = await asyncio.gather(
        *[sampler.sample_async(types.ModelInput.from_ints(p), 1, params) for p in prompts]
    )
    return sum(len(r.sequences[0].tokens) for r in responses)


@torch.inference_mode()
def plain_sample(
    model: Any, prompts: list[list[int]], max_tokens: int, pad: int, eos: int | Sequence[int]
) -> int:
    """One left-padded ``generate`` call over ``prompts``; tokens sampled (each row's up to
    and including its first stop token: ``eos``, one id or several)."""
    device = next(model.parameters()).device
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
    stops = [eos] if isinstance(eos, int) else list(eos)
    out = model.generate(
        input_ids=ids,
        attention_mask=mask,
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
        max_new_tokens=max_tokens,
        pad_token_id=pad,
        eos_token_id=stops,
    )
    new = out[:, width:]
    # Tokens up to and including the first stop token (generate pads after it).
    stopped = torch.isin(new, torch.tensor(stops, device=device))
    ended = stopped.int().cumsum(dim=1)
    return int(((ended == 0) | ((ended == 1) & stopped)).sum())


async def arena_train(client: Any, datums: list[Any], steps: int) -> int:
    """``steps`` forward_backward + optim_step calls; tokens trained."""
    from trainer.backend import adam_params

    adam = adam_params(1e-5)
    for _ in range(steps):
        fwd = client.forward_backward(datums, "importance_sampling")
        optim = client.optim_step(adam)
        await fwd
        await optim
    return steps * sum(d.model_input.length for d in datums)


class PlainTrainer:
    """A plain peft loop: the same LoRA layers, micro-batches, loss and AdamW."""

    def __init__(self, model: Any, rank: int, alpha: int, micro_batch: int) -> None:
        from peft import LoraConfig, get_peft_model

        from trainer.local.lora import target_modules

        config = LoraConfig(
            r=rank,
            lora_alpha=alpha,
            lora_dropout=0.0,
            target_modules=target_modules(model, ("attn", "mlp", "unembed")),
            task_type="CAUSAL_LM",
        )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # peft's note on the tied output layer
            self.model = get_peft_model(model, config).eval()
        self.device = next(model.parameters()).device
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=1e-5, betas=(0.9, 0.95), eps=1e-8)
        self.micro_batch = micro_batch

    def train(self, datums: list[Any], steps: int) -> int:
        ids = torch.tensor([d.model_input.to_ints() for d in datums], device=self.device)
        targets = torch.tensor(
            [d.loss_fn_inputs["target_tokens"].data for d in datums], device=self.device
        )
        old = torch.tensor([d.loss_fn_inputs["logprobs"].data for d in datums], device=self.device)
        adv = torch.tensor(
            [d.loss_fn_inputs["advantages"].data for d in datums], device=self.device
        )
        for _ in range(steps):
            for start in range(0, len(datums), self.micro_batch):
                part = slice(start, start + self.micro_batch)
                logits = self.model(input_ids=ids[part], use_cache=False).logits.float()
                logp = -torch.nn.functional.cross_entropy(
                    logits.flatten(0, 1), targets[part].flatten(), reduction="none"
                ).view(targets[part].shape)
                ratio = torch.exp(torch.where(adv[part] != 0, logp - old[part], 0.0))
                (-(ratio * adv[part]).sum()).backward()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        sync(self.device)
        return steps * int(ids.numel())


# -- the run ---------------------------------------------------------------------------------


def _rate(fn: Any, device: torch.device) -> float:
    sync(device)
    started = time.perf_counter()
    count = fn()
    sync(device)
    return float(count) / (time.perf_counter() - started)


def _peak_bytes(device: torch.device) -> int | None:
    return int(torch.cuda.max_memory_allocated(device)) if device.type == "cuda" else None


def _reset_peak(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def measure_sampling(
    client: Any, trainer: PlainTrainer, prompts: list[list[int]], args: Any, device: torch.device
) -> dict[str, list[float]]:
    """Sampled tokens/s per round: arena's sampler (a snapshot of ``client``) and plain
    ``generate`` through the peft model, alternating."""
    sampler = client.save_weights_and_get_sampling_client().result()
    vocab = trainer.model.get_input_embeddings().weight.shape[0]
    pad, eos = vocab - 2, vocab - 1
    asyncio.run(arena_sample(sampler, prompts[:2], 2))  # warm-up: kernels, allocator
    plain_sample(trainer.model, prompts[:2], 2, pad, eos)
    rates: dict[str, list[float]] = {"arena": [], "plain": []}
    for _ in range(args.rounds):
        rates["arena"].append(
            _rate(lambda: asyncio.run(arena_sample(sampler, prompts, args.max_tokens)), device)
        )
        rates["plain"].append(
            _rate(lambda: plain_sample(trainer.model, prompts, args.max_tokens, pad, eos), device)
        )
    return rates


def measure_training(
    client: Any,
    trainer: PlainTrainer,
    datums: list[Any],
    micro: int,
    args: Any,
    device: torch.device,
) -> dict[str, list[float]]:
    """Trained tokens/s per round: arena's client and the plain peft loop, alternating."""
    asyncio.run(arena_train(client, datums[:micro], 1))  # warm-up
    trainer.train(datums[:micro], 1)
    rates: dict[str, list[float]] = {"arena": [], "plain": []}
    for _ in range(args.rounds):
        rates["arena"].append(
            _rate(lambda: asyncio.run(arena_train(client, datums, args.train_steps)), device)
        )
        rates["plain"].append(_rate(lambda: trainer.train(datums, args.train_steps), device))
    return rates


def run(args: Any) -> dict[str, Any]:
    """Measure everything (see the module docstring); the results as a dict."""
    from transformers import AutoModelForCausalLM

    from trainer.local import LocalModelConfig
    from trainer.local.config import resolve_device
    from trainer.local.service import LocalServiceClient

    device = resolve_device(args.device)
    dtype = torch.bfloat16 if args.dtype == "bfloat16" else torch.float32
    peak, gpu_name = peak_flops(device, args.peak_tflops)
    workdir = Path(tempfile.mkdtemp(prefix="arena-bench-gpu-"))
    shape = write_model_dir(workdir / "model", args.size)
    model_dir = str(workdir / "model")
    vocab = shape["vocab_size"]
    prompts = make_prompts(args.batch, args.prompt_tokens, vocab, seed=1)
    datums = make_datums(args.train_batch, args.train_tokens, vocab, seed=2)
    micro = min(args.train_batch, args.micro_batch)
    local = LocalModelConfig(
        device=args.device,
        dtype=args.dtype,
        max_batch_size=args.batch,
        train_micro_batch_size=micro,
        checkpoint_dir=str(workdir / "checkpoints"),
    )
    service = LocalServiceClient(local, checkpoint_dir=workdir / "service")
    # Both sides: the same LoRA adapter layers over a base loaded from the same directory;
    # samplers sample through the adapter, as they do while training.
    client = service.create_lora_training_client(model_dir, rank=args.lora_rank).result()
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device).eval()
    trainer = PlainTrainer(base, args.lora_rank, local.lora_alpha, micro)
    sample_rates = measure_sampling(client, trainer, prompts, args, device)
    train_rates = measure_training(client, trainer, datums, micro, args, device)
    trainer = base = None
    _reset_peak(device)

    # Memory: one step of LoRA, then of full fine-tuning, each alone on the device.
    memory: dict[str, Any] = {}
    asyncio.run(arena_train(client, datums[:micro], 1))
    memory["lora"] = {**client.memory(), "peak_allocated_bytes": _peak_bytes(device)}
    client.close()
    client = None
    if not args.skip_full:
        _reset_peak(device)
        full = service.create_lora_training_client(model_dir, rank=0).result()
        asyncio.run(arena_train(full, datums[:micro], 1))
        memory["full"] = {**full.memory(), "peak_allocated_bytes": _peak_bytes(device)}
        full.close()
        del full
    _reset_peak(device)

    sample_flops = flops_per_token(shape, args.prompt_tokens + args.max_tokens // 2)
    train_flops = 2 * flops_per_token(shape, args.train_tokens // 2)  # forward + input grads
    results: dict[str, Any] = {
        "device": gpu_name,
        "size": args.size,
        "dtype": args.dtype,
        "parameters": memory["lora"]["parameters"] - memory["lora"]["trainable_parameters"],
        "peak_tflops": peak / 1e12 if peak else None,
        "memory": memory,
    }
    for kind, rates, flops in (
        ("sample", sample_rates, sample_flops),
        ("train", train_rates, train_flops),
    ):
        arena_rate, plain_rate = median(rates["arena"]), median(rates["plain"])
        results[f"{kind}_tokens_per_s_arena"] = arena_rate
        results[f"{kind}_tokens_per_s_plain"] = plain_rate
        results[f"{kind}_arena_over_plain"] = arena_rate / plain_rate
        results[f"{kind}_mfu_arena"] = arena_rate * flops / peak if peak else None
        results[f"{kind}_mfu_plain"] = plain_rate * flops / peak if peak else None
    return results


def report(results: dict[str, Any]) -> list[str]:
    """The results as lines for a person."""
    lines = [
        f"bench.gpu on {results['device']}: Qwen3-architecture '{results['size']}' model, "
        f"{results['parameters'] / 1e6:.1f}M parameters, {results['dtype']}"
    ]
    for kind, label in (("sample", "sampled"), ("train", "trained (LoRA)")):
        mfu = results[f"{kind}_mfu_arena"]
        plain_mfu = results[f"{kind}_mfu_plain"]
        lines.append(
            f"  {label} tokens/s: arena {results[f'{kind}_tokens_per_s_arena']:.0f}, plain "
            f"{results[f'{kind}_tokens_per_s_plain']:.0f} "
            f"(arena/plain {results[f'{kind}_arena_over_plain']:.2f}x)"
            + (f"; MFU arena {mfu:.1%}, plain {plain_mfu:.1%}" if mfu is not None else "")
        )
    if results["peak_tflops"] is None:
        lines.append("  MFU: unknown peak for this device (give --peak-tflops)")
    for name, figures in results["memory"].items():
        peak = figures["peak_allocated_bytes"]
        lines.append(
            f"  {name}: {figures['trainable_parameters'] / 1e6:.2f}M trained parameters, "
            f"optimizer state {figures['optimizer_state_bytes'] / 2**20:.1f} MiB"
            + (f", peak allocated {peak / 2**30:.2f} GiB" if peak is not None else "")
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    p = parser("Local backend on a GPU vs a plain transformers + peft loop.")
    p.set_defaults(rounds=2)
    p.add_argument("--device", default="cuda", help="cuda, cuda:N, or cpu (tests only)")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--size", default="small", choices=sorted(SIZES))
    p.add_argument("--batch", type=int, default=64, help="concurrent sampling requests")
    p.add_argument("--prompt-tokens", type=int, default=256)
    p.add_argument("--max-tokens", type=int, default=64, help="tokens sampled per request")
    p.add_argument("--train-batch", type=int, default=16, help="datums per training step")
    p.add_argument("--train-tokens", type=int, default=512, help="tokens per datum")
    p.add_argument("--micro-batch", type=int, default=8, help="datums per forward/backward")
    p.add_argument("--train-steps", type=int, default=3, help="optimizer steps per round")
    p.add_argument("--lora-rank", type=int, default=16)
    p.add_argument("--peak-tflops", type=float, default=None, help="the device's bf16 peak")
    p.add_argument("--skip-full", action="store_true", help="no full fine-tuning memory run")
    args = p.parse_args(argv)
    reason = skip_reason(args.device)
    if reason is not None:
        print(f"bench.gpu: skipped: {reason}")
        emit({"skipped": True, "reason": reason}, args.json)
        return 0
    try:
        results = run(args)
    except ValueError as exc:
        print(f"bench.gpu: error: {exc}", file=sys.stderr)
        return 2
    for line in report(results):
        print(line)
    emit(results, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
