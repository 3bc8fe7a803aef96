"""The real model through the local backend against plain transformers and peft, on the
same model and the same batch: SmolLM2-135M-Instruct (``make llm``), de-quantized to
float32 on the CPU.

- **sampling tokens/s**: the local sampling client (every request sent at once, as
  concurrent envs send them; one shared batch with a KV cache) against
  ``model.generate`` on the same prompts, left-padded into one batch (``do_sample``,
  temperature 1, no top-k, the same ``max_new_tokens``, stopping at the end-of-turn token).
  Both count the tokens they sampled, up to and including the stop token; the runs are
  seeded but the two draw differently, so each figure is tokens/s of its own draws
  (prompts/s is printed beside it: the same work, whatever the answers' lengths);
- **training tokens/s**: the local training client with a rank-16 LoRA adapter on the
  attention, MLP and output layers (``forward_backward`` with the importance-sampling
  loss, then ``optim_step``) against a plain loop: ``peft.get_peft_model`` on a copy of
  the same weights with the same rank and layers, the same datums right-padded in the
  same micro-batches (the training client's bound on padded tokens a pass; one batch of
  16 such datums holds about 14 GB), the same loss written out over the whole
  vocabulary's logits, ``torch.optim.AdamW``. Tokens/s counts every token of the datums
  (prompt and answer) per step.

The prompts are tic-tac-toe turns as a seat sees them through the model's chat template
(the ``full`` observation, as ``arena train --model smollm2`` and ``model:smollm2`` seats
prompt it), from random positions of real games. Rounds alternate arena and the plain
version; the median of each is kept.

    python -m bench.realmodel [--model smollm2] [--prompts 16] [--max-tokens 16] [--rounds 3]
        [--json]

``--model`` takes any model ``arena train --model`` takes (a GGUF file, a Hugging Face
directory). ``bench.gpu`` is the same comparison on a GPU, on a model built from a config.
"""

from __future__ import annotations

import asyncio
import copy
import random
import time
from collections.abc import Sequence
from typing import Any

import torch
from tinker import types

from arena.renderers import Message
from bench.common import emit, median, parser
from bench.gpu import plain_sample

RANK = 16
LEARNING_RATE = 1e-4


def turns(count: int, seed: int) -> list[list[Message]]:
    """``count`` tic-tac-toe turns (seeded): random real games stopped 0 to 4 moves in,
    each as the chat the seat to move sees."""
    from arena.renderers import seat_chat
    from games.registry import make

    rng = random.Random(seed)
    found: list[list[Message]] = []
    while len(found) < count:
        session = make("TicTacToe-v0", 2, seed=rng.randrange(1 << 30))
        for _ in range(rng.randrange(5)):
            seat = session.current_player()
            session.step(seat, rng.choice(session.legal_moves(seat) or ["[4]"]))
        if session.done:
            continue
        seat = session.current_player()
        found.append(seat_chat(session.seat_messages(seat), seat))
    return found


def arena_sampling(
    client: Any, prompts: list[types.ModelInput], max_tokens: int, seed: int
) -> tuple[list[tuple[list[int], list[float]]], float]:
    """Every prompt sent at once; the answers' tokens and logprobs, and the seconds."""

    def params(i: int) -> types.SamplingParams:
        return types.SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=seed + i)

    async def run() -> list[types.SampleResponse]:
        return await asyncio.gather(
            *(client.sample_async(p, 1, params(i)) for i, p in enumerate(prompts))
        )

    started = time.perf_counter()
    responses = asyncio.run(run())
    seconds = time.perf_counter() - started
    answers = [
        (list(r.sequences[0].tokens), list(r.sequences[0].logprobs or [])) for r in responses
    ]
    return answers, seconds


def plain_generate(
    model: Any, prompts: list[list[int]], max_tokens: int, pad: int, eos: list[int], seed: int
) -> tuple[int, float]:
    """``model.generate`` on the prompts left-padded into one batch (``bench.gpu``'s
    ``plain_sample``): tokens sampled and the seconds."""
    torch.manual_seed(seed)
    started = time.perf_counter()
    tokens = plain_sample(model, prompts, max_tokens, pad, eos)
    return tokens, time.perf_counter() - started


def datums(
    prompts: list[list[int]], answers: list[tuple[list[int], list[float]]], seed: int
) -> list[types.Datum]:
    """Importance-sampling datums: each prompt and its sampled answer, an advantage of +1
    or -1 (seeded) on the answer's tokens."""
    rng = random.Random(seed)
    out = []
    for prompt, (answer, logprobs) in zip(prompts, answers, strict=True):
        tokens = prompt + answer
        n = len(tokens) - 1
        advantage = rng.choice((1.0, -1.0))
        old = [0.0] * (len(prompt) - 1) + list(logprobs)
        adv = [0.0] * (len(prompt) - 1) + [advantage] * len(answer)
        out.append(
            types.Datum(
                model_input=types.ModelInput.from_ints(tokens[:-1]),
                loss_fn_inputs={
                    "target_tokens": types.TensorData(data=tokens[1:], dtype="int64", shape=[n]),
                    "logprobs": types.TensorData(data=old, dtype="float32", shape=[n]),
                    "advantages": types.TensorData(data=adv, dtype="float32", shape=[n]),
                },
            )
        )
    return out


class PlainPeftLoop:
    """A rank-16 LoRA adapter on a copy of ``base`` through ``peft`` alone, trained with
    the importance-sampling loss and AdamW on one right-padded batch a step."""

    def __init__(self, base: Any, pad: int) -> None:
        from peft import LoraConfig, get_peft_model

        from trainer.local.lora import target_modules

        model = copy.deepcopy(base)
        config = LoraConfig(
            r=RANK,
            lora_alpha=32,
            lora_dropout=0.0,
            target_modules=target_modules(model, ("attn", "mlp", "unembed")),
            task_type="CAUSAL_LM",
        )
        self.model = get_peft_model(model, config)
        self.pad = pad
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=LEARNING_RATE)

    def step(self, data: list[types.Datum], micro_batch_tokens: int) -> None:
        """One optimizer step over ``data``, in the training client's micro-batches (at most
        ``micro_batch_tokens`` padded tokens each; the gradients add up)."""
        from trainer.local.forward import micro_batches

        for chunk in micro_batches(
            data, len(data), micro_batch_tokens, lambda d: d.model_input.length
        ):
            self.backward(chunk)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def backward(self, data: list[types.Datum]) -> None:
        """The loss of one right-padded micro-batch, and its gradient."""
        rows = [d.model_input.to_ints() for d in data]
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad)
        mask = torch.zeros(len(rows), width)
        targets = torch.zeros(len(rows), width, dtype=torch.long)
        old = torch.zeros(len(rows), width)
        adv = torch.zeros(len(rows), width)
        for i, (row, datum) in enumerate(zip(rows, data, strict=True)):
            n = len(row)
            ids[i, :n] = torch.tensor(row)
            mask[i, :n] = 1.0
            inputs = datum.loss_fn_inputs
            targets[i, :n] = inputs["target_tokens"].to_torch()
            old[i, :n] = inputs["logprobs"].to_torch()
            adv[i, :n] = inputs["advantages"].to_torch()
        logits = self.model(input_ids=ids, attention_mask=mask.long()).logits.float()
        logp = torch.log_softmax(logits, dim=-1).gather(2, targets[..., None]).squeeze(2)
        loss = -(torch.exp(logp - old) * adv * mask).sum()
        loss.backward()


def main(argv: Sequence[str] | None = None) -> int:
    args_parser = parser(__doc__.splitlines()[0])
    args_parser.add_argument("--model", default="smollm2", help="the model (default: smollm2)")
    args_parser.add_argument("--prompts", type=int, default=16, help="prompts in the batch")
    args_parser.add_argument("--max-tokens", type=int, default=16, help="tokens per answer")
    args = args_parser.parse_args(argv)

    from arena.renderers import RendererConfig
    from trainer.local import LocalModelConfig, load_model
    from trainer.local.sampler import LocalSamplingClient
    from trainer.local.service import LocalServiceClient

    started = time.perf_counter()
    loaded = load_model(LocalModelConfig(model_path=args.model, device="cpu"))
    print(f"{args.model}: loaded in {time.perf_counter() - started:.1f} s", flush=True)
    renderer = RendererConfig(name="chat", tokenizer_path=args.model).build()
    inputs = [renderer.build_generation_prompt(chat) for chat in turns(args.prompts, seed=0)]
    prompts = [p.to_ints() for p in inputs]
    eos, pad = list(loaded.eos_token_ids), loaded.pad_token_id
    sampler = LocalSamplingClient(loaded, max_batch_size=max(64, args.prompts))

    arena_sampling(sampler, inputs[:2], 2, seed=10_000)  # warm-up
    plain_generate(loaded.model, prompts[:2], 2, pad, eos, seed=10_000)
    sampled: dict[str, list[float]] = {"arena": [], "plain": []}
    prompt_rates: dict[str, list[float]] = {"arena": [], "plain": []}
    answers: list[tuple[list[int], list[float]]] = []
    for r in range(args.rounds):
        found, seconds = arena_sampling(sampler, inputs, args.max_tokens, seed=1000 * r)
        answers = answers or found
        sampled["arena"].append(sum(len(t) for t, _ in found) / seconds)
        prompt_rates["arena"].append(len(inputs) / seconds)
        tokens, seconds = plain_generate(loaded.model, prompts, args.max_tokens, pad, eos, 1000 * r)
        sampled["plain"].append(tokens / seconds)
        prompt_rates["plain"].append(len(inputs) / seconds)
        print(
            f"round {r + 1}: sampling arena {sampled['arena'][-1]:.1f} tokens/s, "
            f"generate {sampled['plain'][-1]:.1f} tokens/s",
            flush=True,
        )

    data = datums(prompts, answers, seed=0)
    trained_tokens = sum(d.model_input.length for d in data)
    service = LocalServiceClient(LocalModelConfig(device="cpu"))
    client = service.create_lora_training_client(args.model, rank=RANK).result()
    plain = PlainPeftLoop(loaded.model, pad)

    def arena_step() -> float:
        t0 = time.perf_counter()
        client.forward_backward(data, "importance_sampling").result()
        client.optim_step(types.AdamParams(learning_rate=LEARNING_RATE)).result()
        return trained_tokens / (time.perf_counter() - t0)

    def plain_step() -> float:
        t0 = time.perf_counter()
        plain.step(data, client.micro_batch_tokens)
        return trained_tokens / (time.perf_counter() - t0)

    arena_step(), plain_step()  # warm-up
    trained: dict[str, list[float]] = {"arena": [], "plain": []}
    for r in range(args.rounds):
        trained["arena"].append(arena_step())
        trained["plain"].append(plain_step())
        print(
            f"round {r + 1}: training arena {trained['arena'][-1]:.1f} tokens/s, "
            f"peft loop {trained['plain'][-1]:.1f} tokens/s",
            flush=True,
        )
    client.close()

    s_arena, s_plain = median(sampled["arena"]), median(sampled["plain"])
    p_arena, p_plain = median(prompt_rates["arena"]), median(prompt_rates["plain"])
    t_arena, t_plain = median(trained["arena"]), median(trained["plain"])
    lengths = [len(p) for p in prompts]
    print(
        f"{args.prompts} prompts of {min(lengths)}-{max(lengths)} tokens, max_tokens "
        f"{args.max_tokens}, torch threads {torch.get_num_threads()}"
    )
    print(
        f"sampling: arena {s_arena:.1f} tokens/s ({p_arena:.2f} prompts/s), generate "
        f"{s_plain:.1f} tokens/s ({p_plain:.2f} prompts/s); ratio {s_arena / s_plain:.2f} "
        f"(prompts/s {p_arena / p_plain:.2f})"
    )
    print(
        f"training ({trained_tokens} tokens a step, LoRA rank {RANK}): arena {t_arena:.1f} "
        f"tokens/s, peft loop {t_plain:.1f} tokens/s; ratio {t_arena / t_plain:.2f}"
    )
    emit(
        {
            "model": args.model,
            "prompts": args.prompts,
            "max_tokens": args.max_tokens,
            "torch_threads": torch.get_num_threads(),
            "sampling_tokens_per_s": round(s_arena, 1),
            "generate_tokens_per_s": round(s_plain, 1),
            "sampling_ratio": round(s_arena / s_plain, 3),
            "sampling_prompts_ratio": round(p_arena / p_plain, 3),
            "training_tokens_per_s": round(t_arena, 1),
            "peft_tokens_per_s": round(t_plain, 1),
            "training_ratio": round(t_arena / t_plain, 3),
        },
        args.json,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
