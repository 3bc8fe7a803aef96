"""The exact yardstick of a model (``trainer.scoring``): Kuhn poker's exploitability read
from the model's probability of each legal move's answer at the probe positions, not from
sampled answers; and the sampled figure kept for a policy whose answers cannot be scored.

The model is the local backend's built-in byte-level GPT-2, taught by a few cross-entropy
steps to answer Kuhn-v0's compact prompts with a mixed policy (so that sampled answers are
mostly legal and the two measures can be compared); and a tiny Hugging Face model through
the chat renderer.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from tinker import types

from arena.match import MatchSettings
from arena.policies import SamplerPolicy
from arena.renderers import ByteTokenizer, RendererConfig, prompt_tokens
from arena.seatview import SeatView
from arena.types import TokensWithLogprobs
from games.api import Probe
from games.registry import game_kit
from games.textarena_games import kuhn_solver, kuhn_text
from trainer.evaluate import ask_probes, measure_yardstick
from trainer.local import LocalModelConfig, create_local_training_client
from trainer.scoring import Scoring, argmax_policy, move_probabilities, scoring_of

GAME = "Kuhn-v0"
COMPACT = MatchSettings(GAME, observation_format="compact")
"""Kuhn-v0 in the compact view: what the taught model answers."""
PREFIX = "test/yardstick/"
TARGET = {k: 0.2 + 0.6 * v["b"] for k, v in kuhn_solver.nash_policy(1 / 6).items()}
"""How often the taught model bets or calls at each information set (0.2 to 0.8)."""


def probes() -> dict[str, Probe]:
    yardstick = game_kit(GAME).yardstick
    assert yardstick is not None and yardstick.probes is not None
    return dict(yardstick.probes(GAME))


def taught_datums() -> list[types.Datum]:
    """Each probe's compact prompt and each legal move's answer, weighted by ``TARGET``."""
    renderer = RendererConfig().build()
    datums = []
    for key, probe in probes().items():
        view = SeatView(probe.seat, GAME, renderer, "compact")
        prompt = list(prompt_tokens(view.prompt(probe.messages, 0, list(probe.legal_moves))))
        for move in probe.legal_moves:
            bet = kuhn_text.read_action(move, key) == "b"
            weight = TARGET[key] if bet else 1.0 - TARGET[key]
            answer = view.answer_tokens(move)
            full = prompt + answer
            skipped = len(prompt) - 1
            datums.append(
                types.Datum(
                    model_input=types.ModelInput.from_ints(full[:-1]),
                    loss_fn_inputs={
                        "target_tokens": types.TensorData(data=full[1:], dtype="int64"),
                        "weights": types.TensorData(
                            data=[0.0] * skipped + [weight] * len(answer), dtype="float32"
                        ),
                    },
                )
            )
    return datums


@pytest.fixture(scope="module")
def sampler() -> Any:
    """The built-in model (a small one), taught a mixed Kuhn policy in compact answers."""
    config = LocalModelConfig(n_layer=2, n_embd=32, n_head=2, n_positions=128, seed=1)
    client = create_local_training_client(config)
    datums = taught_datums()
    for _ in range(60):
        client.forward_backward(datums, "cross_entropy")
        client.optim_step(types.AdamParams(learning_rate=2e-2))
    return client.save_weights_and_get_sampling_client().result()


async def scored_by_hand(sampler: Any, key: str, move: str) -> float:
    """The model's probability of ``move``'s compact answer (its bare text, then EOS) at
    probe ``key``: the logprobs of the whole prompt and answer, the answer's summed."""
    probe = probes()[key]
    view = SeatView(probe.seat, GAME, RendererConfig().build(), "compact")
    prompt = list(prompt_tokens(view.prompt(probe.messages, 0, list(probe.legal_moves))))
    answer = [*move[1:-1].encode(), ByteTokenizer.EOS]
    logprobs = await sampler.compute_logprobs(types.ModelInput.from_ints(prompt + answer))
    return math.exp(sum(logprobs[-len(answer) :]))


async def test_move_probabilities_are_the_answers_scored_by_compute_logprobs(
    sampler: Any,
) -> None:
    scoring = scoring_of(SamplerPolicy(sampler, max_tokens=8))
    assert scoring is not None and not scoring.greedy
    found = await move_probabilities(scoring, GAME, probes(), RendererConfig(), "compact")
    assert set(found) == set(kuhn_solver.INFOSETS)
    for key, moves in found.items():
        assert list(moves) == list(probes()[key].legal_moves)
        for move, probability in moves.items():
            assert probability == pytest.approx(await scored_by_hand(sampler, key, move), rel=1e-5)
        assert 0.0 < sum(moves.values()) <= 1.0  # the rest: every other answer
    figures = await measure_yardstick(SamplerPolicy(sampler, max_tokens=8), COMPACT, [])
    mean = sum(sum(moves.values()) for moves in found.values()) / len(found)
    assert figures[PREFIX + "legal_mass"] == pytest.approx(mean)
    assert 0.5 < mean <= 1.0 and PREFIX + "invalid_rate" not in figures

    # Answers cut at a 4-token limit, as sampling cuts them: ``bet<EOS>`` fits, ``call``
    # still reads as the move without its EOS, ``chec`` is no move.
    short = await move_probabilities(
        Scoring(sampler, 4, greedy=False), GAME, probes(), RendererConfig(), "compact"
    )
    assert short["J"]["[bet]"] == pytest.approx(found["J"]["[bet]"])
    assert short["Jb"]["[call]"] > found["Jb"]["[call]"]
    assert short["J"]["[check]"] == 0.0


def solver_policy(found: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    """``found`` normalised over the legal moves, as ``p``/``b`` probabilities."""
    policy = {}
    for key, moves in found.items():
        total = sum(moves.values())
        policy[key] = {
            kuhn_text.read_action(move, key) or "?": value / total for move, value in moves.items()
        }
    return policy


async def test_the_exact_figure_is_the_solvers_exploitability_of_those_probabilities(
    sampler: Any,
) -> None:
    policy = SamplerPolicy(sampler, max_tokens=8)
    scoring = scoring_of(policy)
    assert scoring is not None
    found = await move_probabilities(scoring, GAME, probes(), RendererConfig(), "compact")
    exact = solver_policy(found)
    figures = await measure_yardstick(policy, COMPACT, [])
    assert figures[PREFIX + "exploitability"] == pytest.approx(kuhn_solver.exploitability(exact))
    for key in kuhn_solver.INFOSETS:
        assert figures[PREFIX + f"bet/{key}"] == pytest.approx(exact[key]["b"])

    # Greedy: the argmax of the same probabilities, a pure policy.
    greedy = await measure_yardstick(policy.at(0.0), COMPACT, [])
    pure = {k: {a: float(p == max(v.values())) for a, p in v.items()} for k, v in exact.items()}
    assert greedy[PREFIX + "exploitability"] == pytest.approx(kuhn_solver.exploitability(pure))
    assert {greedy[PREFIX + f"bet/{key}"] for key in kuhn_solver.INFOSETS} <= {0.0, 1.0}
    assert greedy[PREFIX + "legal_mass"] == pytest.approx(figures[PREFIX + "legal_mass"])
    assert argmax_policy({"x": {"[a]": 0.2, "[b]": 0.3}}) == {"x": {"[a]": 0.0, "[b]": 0.5}}


async def test_sampled_answers_approach_the_exact_figure(sampler: Any) -> None:
    """400 answers at each information set: the sampled policy and exploitability within a
    few standard deviations of the exact ones."""
    policy = SamplerPolicy(sampler, max_tokens=8)
    exact = await measure_yardstick(policy, COMPACT, [])
    yardstick = game_kit(GAME).yardstick
    assert yardstick is not None and yardstick.from_answers is not None
    answers = await ask_probes(policy, GAME, probes(), 400, RendererConfig(), "compact")
    sampled = yardstick.from_answers(answers)
    assert abs(sampled["exploitability"] - exact[PREFIX + "exploitability"]) < 0.06
    for key in kuhn_solver.INFOSETS:
        assert abs(sampled[f"bet/{key}"] - exact[PREFIX + f"bet/{key}"]) < 0.12, key
    assert abs(sampled["invalid_rate"] - (1.0 - exact[PREFIX + "legal_mass"])) < 0.05


class NoScoring:
    """A sampling client without ``compute_logprobs`` (only samples text)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def sample(self, prompt: Any, num_samples: int, sampling_params: Any) -> Any:
        return self.inner.sample(
            prompt=prompt, num_samples=num_samples, sampling_params=sampling_params
        )


class BrokenScoring(NoScoring):
    """A client whose scoring fails."""

    def compute_logprobs(self, prompt: Any, prompt_logprobs_last_n: int | None = None) -> Any:
        raise RuntimeError("no scoring here")


async def test_a_policy_that_cannot_be_scored_keeps_the_sampled_figure(sampler: Any) -> None:
    async def always_bets(ob: Any, stop: Any) -> TokensWithLogprobs:
        text = ByteTokenizer().decode(prompt_tokens(ob))
        move = "call" if text.rstrip().endswith("fold/call\nA:") else "bet"
        return TokensWithLogprobs([*move.encode(), ByteTokenizer.EOS], None)

    scripted = await measure_yardstick(always_bets, COMPACT, [], samples=2)
    assert scripted[PREFIX + "exploitability"] == pytest.approx(1 / 3)
    assert scripted[PREFIX + "invalid_rate"] == 0.0 and PREFIX + "legal_mass" not in scripted
    warm = SamplerPolicy(sampler, max_tokens=8, temperature=0.7)  # not the scored distribution
    text_only = SamplerPolicy(NoScoring(sampler), max_tokens=8)
    assert scoring_of(warm) is None and scoring_of(text_only) is None
    broken = SamplerPolicy(BrokenScoring(sampler), max_tokens=8)  # scoring fails: sampled
    for policy in (warm, text_only, broken):
        figures = await measure_yardstick(policy, COMPACT, [], samples=4)
        assert PREFIX + "invalid_rate" in figures and PREFIX + "legal_mass" not in figures
        assert 0.0 <= figures[PREFIX + "exploitability"] <= 1.0


async def test_a_chat_model_is_scored_on_its_chat_answers(tmp_path: Path) -> None:
    """Through the chat template and the ``full`` format: the answer is the move's text and
    the end-of-turn token, scored after the whole transcript."""
    from tests.tiny_models import write_tiny_model_dir
    from trainer.local import create_local_sampling_client

    path = write_tiny_model_dir(tmp_path / "tiny", "qwen2")
    sampler = create_local_sampling_client(LocalModelConfig(model_path=str(path), device="cpu"))
    renderer = RendererConfig(name="chat", tokenizer_path=str(path))
    scoring = scoring_of(SamplerPolicy(sampler, max_tokens=16))
    assert scoring is not None
    found = await move_probabilities(scoring, GAME, probes(), renderer, "full")
    built = renderer.build()
    hf = built.tokenizer.hf  # type: ignore[attr-defined]
    probe = probes()["Kpb"]
    view = SeatView(probe.seat, GAME, built, "full")
    prompt = list(prompt_tokens(view.prompt(probe.messages, 0, list(probe.legal_moves))))
    for move in ("[fold]", "[call]"):
        answer = [
            *hf.encode(move, add_special_tokens=False),
            hf.convert_tokens_to_ids("<|im_end|>"),
        ]
        logprobs = await sampler.compute_logprobs(types.ModelInput.from_ints(prompt + answer))
        expected = math.exp(sum(logprobs[-len(answer) :]))
        assert found["Kpb"][move] == pytest.approx(expected, rel=1e-5)
    assert all(0.0 < sum(moves.values()) <= 1.0 for moves in found.values())


def test_a_chat_answer_ends_with_the_end_of_turn_of_the_template(tmp_path: Path) -> None:
    """The answer scored for a move is what the seat samples for it: the move's text (bare
    in the compact format) and the token the chat template closes a message with, even
    where the tokenizer names another end of sequence (SmolLM2's GGUF: ``<|im_start|>``)."""
    from arena.renderers import ChatTemplateRenderer, end_of_turn
    from tests.chat_model import write_chat_tokenizer

    hf = write_chat_tokenizer(tmp_path)
    im_start, im_end = hf.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"])
    hf.eos_token = "<|im_start|>"
    renderer = ChatTemplateRenderer(hf)
    assert end_of_turn(hf) == im_end
    assert renderer.get_stop_sequences() == [im_end, im_start]
    answer = renderer.answer_tokens("[call]")
    assert answer == [*hf.encode("[call]", add_special_tokens=False), im_end]
    assert renderer.parse_response(answer) == ({"role": "assistant", "content": "[call]"}, True)
    view = SeatView(1, GAME, renderer, "compact")
    assert view.answer_tokens("[call]") == [*hf.encode("call", add_special_tokens=False), im_end]
    assert view.move(view.answer_tokens("[call]")) == "[call]"
    hf.chat_template = None
    assert end_of_turn(hf) is None
    assert ChatTemplateRenderer(hf).get_stop_sequences() == [im_start]
