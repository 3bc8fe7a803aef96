"""Who plays a seat: one identity type for every kind of player.

A ``PolicyRef`` names a policy exactly: a bot by name and version, a checkpoint by run and
step, the learner of a run, a person in a browser seat, a remote agent by its account. Its
``key`` is what matches record and what ratings are kept under, so two matches of the same
policy are always counted together, and two versions of a bot never are.

Text forms (what the CLI accepts): ``random`` or ``bot:random`` (a bot), ``run:NAME@STEP``
or ``checkpoint:NAME@STEP`` (a stored checkpoint), ``learner:RUN``, ``human:ID``,
``agent:NAME``, ``model:NAME`` (a language model: ``model:smollm2``, ``model:FILE.gguf``,
``model:DIR``; recorded as ``model:NAME@HASH``), ``openai:BASE_URL#MODEL`` (a model
behind an OpenAI-compatible endpoint; recorded as ``openai:MODEL@HOST``): both names, with
their sampling settings, are built by ``PolicyRef.language_model``.

Matches record each seat's player as a name (``MatchStarted.players``): a bot's plain name
(``random``), ``learner``, ``human``, or a key (``checkpoint:run@120``, ``agent:alice``).
``player_kind`` and ``checkpoint_of`` read such a name; ``policy_key`` turns it into the
key ratings are kept under. This module is the one place these forms are read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from urllib.parse import parse_qsl

from arena.models import DEFAULT_MODEL_MAX_TOKENS, DEFAULT_MODEL_TEMPERATURE


class PolicyKind(StrEnum):
    """The kinds of players."""

    LEARNER = "learner"
    BOT = "bot"
    CHECKPOINT = "checkpoint"
    HUMAN = "human"
    AGENT = "agent"
    MODEL = "model"
    """A language model as released, no training of ours (``model:smollm2@1a2b3c4d``)."""
    OPENAI = "openai"
    """A model served behind an OpenAI-compatible endpoint (``openai:gpt-4o-mini@HOST``)."""


SEEKABLE_KINDS: tuple[PolicyKind, ...] = (
    PolicyKind.AGENT,
    PolicyKind.HUMAN,
    PolicyKind.BOT,
    PolicyKind.CHECKPOINT,
    PolicyKind.MODEL,
    PolicyKind.OPENAI,
)
"""The kinds of players a seek may accept in the other seats (the learner never seeks;
models as released and served models sit there as a server's fill-ins)."""


class BadPolicyRef(ValueError):
    """A policy could not be read from its text form; the message shows the forms."""


SERVED_FORM = "openai:BASE_URL#MODEL (e.g. openai:http://127.0.0.1:8000/v1#smollm2)"
"""The player text of a served model."""

FORMS = (
    "a bot name (random), run:NAME@STEP, model:NAME (smollm2, FILE.gguf, DIR), "
    "openai:BASE_URL#MODEL, learner:RUN, human:ID or agent:NAME"
)


@dataclass(frozen=True, order=True)
class PolicyRef:
    """One policy, exactly (see the module docstring)."""

    kind: PolicyKind
    name: str
    """bot: its name; checkpoint and learner: the run; human: the seat or person; agent:
    the account; model: its name or path; openai: the model's name on its endpoint (in
    player text: ``BASE_URL#MODEL``)."""
    version: str = ""
    """bot: its version; checkpoint: the step; model: its weights' hash (and sampling
    settings); openai: the endpoint's host (and sampling settings); others: empty."""
    endpoint: str = field(default="", compare=False)
    """openai, from player text only: the base URL it is served at (``BASE_URL`` of
    ``openai:BASE_URL#MODEL``); empty for a recorded name, which cannot be seated."""
    options: tuple[tuple[str, str], ...] = field(default=(), compare=False)
    """openai, from player text only: the ``?OPTION=VALUE&...`` pairs after the model."""

    @property
    def key(self) -> str:
        """The stable text form: ``bot:random@1``, ``checkpoint:run@120``, ``learner:run``."""
        if self.kind is PolicyKind.CHECKPOINT:
            return f"{self.checkpoint_prefix(self.name)}{self.version}"
        if self.version:
            return f"{self.kind.value}:{self.name}@{self.version}"
        return f"{self.kind.value}:{self.name}"

    @property
    def label(self) -> str:
        """A short form for tables: ``random``, ``run@120``, ``learner:run``."""
        if self.kind is PolicyKind.BOT:
            return self.name
        if self.kind is PolicyKind.CHECKPOINT:
            return f"{self.name}@{self.version}"
        return self.key

    @property
    def step(self) -> int | None:
        """The checkpoint's step (None for other kinds)."""
        if self.kind is PolicyKind.CHECKPOINT and self.version.isdigit():
            return int(self.version)
        return None

    @classmethod
    def bot(cls, name: str, version: str = "1") -> PolicyRef:
        """A bot."""
        return cls(PolicyKind.BOT, name, version)

    @classmethod
    def checkpoint(cls, run: str, step: int) -> PolicyRef:
        """A run's checkpoint at ``step``."""
        return cls(PolicyKind.CHECKPOINT, run, str(step))

    @staticmethod
    def checkpoint_prefix(run: str) -> str:
        """What the keys of every checkpoint of ``run`` start with (``checkpoint:run@``)."""
        return f"{PolicyKind.CHECKPOINT.value}:{run}@"

    @classmethod
    def learner(cls, run: str) -> PolicyRef:
        """The learner of ``run`` (whatever its current weights)."""
        return cls(PolicyKind.LEARNER, run)

    @classmethod
    def human(cls, name: str) -> PolicyRef:
        """A person in a browser seat (``human:NAME``)."""
        return cls(PolicyKind.HUMAN, name)

    @classmethod
    def agent(cls, account: str) -> PolicyRef:
        """A remote agent, by its account (``agent:NAME``)."""
        return cls(PolicyKind.AGENT, account)

    @classmethod
    def language_model(
        cls,
        kind: PolicyKind,
        name: str,
        version: str,
        *,
        temperature: float = DEFAULT_MODEL_TEMPERATURE,
        max_tokens: int = DEFAULT_MODEL_MAX_TOKENS,
    ) -> PolicyRef:
        """A language model as it plays, by the name it is recorded and rated under:
        ``model:NAME@HASH`` (``version``: its weights' hash, ``arena.models.model_fingerprint``)
        or ``openai:MODEL@HOST`` (``version``: the endpoint's host and port), with ``+tT``
        and ``+nN`` added for a temperature or an answer length other than the defaults
        (``model:smollm2@1a2b3c4d+t0.7+n64``, ``openai:gpt-4o-mini@api.openai.com+t0.7``).

        Raises ValueError for a kind other than ``model`` and ``openai``."""
        if kind not in (PolicyKind.MODEL, PolicyKind.OPENAI):
            raise ValueError(f"a language model is model:... or openai:..., not {kind}:...")
        if temperature != DEFAULT_MODEL_TEMPERATURE:
            version += f"+t{temperature:g}"
        if max_tokens != DEFAULT_MODEL_MAX_TOKENS:
            version += f"+n{max_tokens}"
        return cls(kind, name, version)

    @classmethod
    def parse(cls, text: str, *, bot_version: str = "1") -> PolicyRef:
        """Read a policy from its text form (see the module docstring).

        Raises BadPolicyRef naming the accepted forms."""
        text = text.strip()
        if not text:
            raise BadPolicyRef(f"empty player; give {FORMS}")
        head, sep, rest = text.partition(":")
        if not sep:
            if "@" in text:
                raise BadPolicyRef(f"{text!r}: a checkpoint is run:NAME@STEP")
            return cls.bot(text, bot_version)
        if head in ("run", PolicyKind.CHECKPOINT):
            run, at, step = rest.rpartition("@")
            if not at or not run or not step.isdigit():
                raise BadPolicyRef(f"{text!r}: a checkpoint is run:NAME@STEP (STEP a number)")
            return cls.checkpoint(run, int(step))
        try:
            kind = PolicyKind(head)
        except ValueError:
            raise BadPolicyRef(f"{text!r}: unknown kind {head!r}; give {FORMS}") from None
        if kind is PolicyKind.OPENAI and "#" in rest:
            return cls._served(text, rest)
        # A model's name may be a path: its version is after the last "@".
        last = kind in (PolicyKind.MODEL, PolicyKind.OPENAI) and "@" in rest
        split = rest.rpartition if last else rest.partition
        name, at, version = split("@")
        if not name:
            raise BadPolicyRef(f"{text!r}: no name after {head}:")
        if kind is PolicyKind.BOT:
            return cls.bot(name, version or bot_version)
        if kind is PolicyKind.CHECKPOINT:  # pragma: no cover - handled above
            raise AssertionError
        return cls(kind, name, version if at else "")

    @classmethod
    def _served(cls, text: str, rest: str) -> PolicyRef:
        """``openai:BASE_URL#MODEL[?OPTION=VALUE&...]`` (``rest``: after ``openai:``)."""
        base_url, _, model_query = rest.partition("#")
        model, _, query = model_query.partition("?")
        if not model:
            raise BadPolicyRef(f"{text!r}: no model name after the #; give {SERVED_FORM}")
        try:
            pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
        except ValueError:
            raise BadPolicyRef(f"{text!r}: options are OPTION=VALUE joined by &") from None
        return cls(PolicyKind.OPENAI, model, endpoint=base_url.rstrip("/"), options=tuple(pairs))

    @property
    def player_text(self) -> str:
        """The text that seats this policy again: a served model's
        ``openai:BASE_URL#MODEL[?...]``, a checkpoint's ``run:NAME@STEP``, else the key."""
        if self.kind is PolicyKind.OPENAI and self.endpoint:
            query = "&".join(f"{k}={v}" for k, v in self.options)
            return f"openai:{self.endpoint}#{self.name}" + (f"?{query}" if query else "")
        if self.kind is PolicyKind.CHECKPOINT:
            return f"run:{self.name}@{self.version}"
        return self.key

    @property
    def seatable(self) -> bool:
        """True when ``player_text`` reads back as this policy (a checkpoint of a run
        folder whose name no player text can hold is not)."""
        try:
            return PolicyRef.parse(self.player_text) == self
        except BadPolicyRef:
            return False

    def __str__(self) -> str:
        return self.key


def policy_key(name: str, kind: str | None = None) -> str:
    """The policy key of a recorded player: its name read as a ``PolicyRef`` (stored bot
    names like ``random`` become ``bot:random@1``), or ``kind:name`` when the name is not
    a policy's text form (a learner recorded as ``learner``)."""
    if kind in (PolicyKind.LEARNER, PolicyKind.HUMAN, PolicyKind.AGENT) and ":" not in name:
        return f"{kind}:{name}"
    try:
        return PolicyRef.parse(name).key
    except BadPolicyRef:
        return f"{kind or 'unknown'}:{name}"


def player_kind(name: str) -> PolicyKind:
    """The kind of player a recorded seat name stands for: ``learner`` (and
    ``learner:...``) is a run's learner, ``human...`` a person, ``checkpoint:...`` a past
    checkpoint, ``agent:...`` a remote agent, ``model:...`` a language model,
    ``openai:...`` a served model; any other name is a bot."""
    head = name.split(":", 1)[0]
    kinds = (
        PolicyKind.LEARNER,
        PolicyKind.HUMAN,
        PolicyKind.CHECKPOINT,
        PolicyKind.AGENT,
        PolicyKind.MODEL,
        PolicyKind.OPENAI,
    )
    for kind in kinds:
        if head == kind:
            return kind
    return PolicyKind.BOT


def checkpoint_of(name: str) -> PolicyRef | None:
    """The checkpoint a recorded ``checkpoint:RUN@STEP`` name stands for, else None."""
    if not name.startswith(f"{PolicyKind.CHECKPOINT}:"):
        return None
    try:
        ref = PolicyRef.parse(name)
    except BadPolicyRef:
        return None
    return ref if ref.step is not None else None


class WeightsKind(StrEnum):
    """Where a seat's weights are loaded from."""

    TINKER = "tinker"
    """A Tinker sampler path (``tinker://...``), through the Tinker service."""
    MODEL = "model"
    """A language model as released (``model:NAME``: ``smollm2``, a ``.gguf`` file, a model
    directory), through the local backend."""
    DIRECTORY = "directory"
    """A local checkpoint directory, through the local backend."""


TINKER_SCHEME = "tinker://"


@dataclass(frozen=True)
class WeightsRef:
    """Where a sampler's weights are: its text form is a checkpoint's ``sampler_path``
    (``tinker://...``, ``model:NAME``, or a local directory). This and ``PolicyRef`` are
    the one place these forms are read and written."""

    kind: WeightsKind
    location: str
    """The Tinker path, the model's name or path, or the directory."""

    @classmethod
    def parse(cls, path: str) -> WeightsRef:
        """Read a sampler path (never fails: a path of no other form is a directory)."""
        if path.startswith(TINKER_SCHEME):
            return cls(WeightsKind.TINKER, path)
        model = f"{PolicyKind.MODEL.value}:"
        if path.startswith(model):
            return cls(WeightsKind.MODEL, path.removeprefix(model))
        return cls(WeightsKind.DIRECTORY, path)

    @classmethod
    def model(cls, name: str) -> WeightsRef:
        """A language model as released, by its name or path."""
        return cls(WeightsKind.MODEL, name)

    @property
    def path(self) -> str:
        """The text form (a checkpoint's ``sampler_path``)."""
        if self.kind is WeightsKind.MODEL:
            return f"{PolicyKind.MODEL.value}:{self.location}"
        return self.location
