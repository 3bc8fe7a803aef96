"""Players from their text forms: a bot name, ``run:NAME@STEP`` for a stored checkpoint
(looked up in the run's ``checkpoints.jsonl``), ``model:NAME`` for a language model as
released (``smollm2``, a ``.gguf`` file, a model directory), or ``openai:BASE_URL#MODEL`` for
a model behind an OpenAI-compatible endpoint (``matchmaking.served``). Matches are built from
them by ``arena.match.build_match``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from arena.identity import PolicyKind, PolicyRef
from arena.seats import AgentSpec, BotSpec, agent_spec


def player_spec(
    text: str | AgentSpec,
    *,
    runs_dir: str | Path = "runs",
    log_dirs: list[str] | None = None,
    temperature: float = 1.0,
    max_tokens: int | None = None,
) -> AgentSpec:
    """A player from its text form: a bot name (``random``), a stored checkpoint
    (``run:NAME@STEP``), a language model (``model:smollm2``, ``model:FILE.gguf``,
    ``model:DIR``) or a served model (``openai:BASE_URL#MODEL``; ``temperature`` and
    ``max_tokens``, the answer length (None: the default), apply to both model kinds).
    Raises BadPolicyRef, UnknownCheckpoint, ModelNotFound or ValueError with what exists
    or what to do."""
    if not isinstance(text, str):
        return text
    policy = PolicyRef.parse(text)
    if policy.kind is PolicyKind.BOT:
        return BotSpec(policy.name)
    if policy.kind is PolicyKind.CHECKPOINT:
        # Imported here: a checkpoint seat needs the model stack (tinker, torch), a server
        # of bots and remote agents does not load it.
        from matchmaking.agents import resolve_checkpoint

        info = resolve_checkpoint(policy, runs_dir=runs_dir, log_dirs=log_dirs)
        return info.seat(temperature=temperature)
    if policy.kind is PolicyKind.MODEL:
        from matchmaking.agents import model_seat

        return model_seat(policy, temperature=temperature, max_tokens=max_tokens)
    if policy.kind is PolicyKind.OPENAI:
        from matchmaking.served import served_seat

        return served_seat(policy, temperature=temperature, max_tokens=max_tokens)
    raise ValueError(
        f"{policy.key} cannot be seated here: give a bot, run:NAME@STEP, model:NAME or "
        "openai:BASE_URL#MODEL"
    )


def player_specs(texts: Sequence[str | AgentSpec], **kwargs: object) -> tuple[AgentSpec, ...]:
    """``player_spec`` for each player (see there)."""
    return tuple(agent_spec(player_spec(t, **kwargs)) for t in texts)  # type: ignore[arg-type]
