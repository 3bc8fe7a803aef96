"""Renderers: a seat's messages to a ``ModelInput`` and stop condition, and sampled tokens
back to text.

The interface keeps the cookbook's method names (``build_generation_prompt``,
``get_stop_sequences``, ``parse_response``). ``ByteRenderer`` serves the local model's
byte-level tokenizer; chat-template renderers for Hugging Face tokenizers come with the
trainer.

What a seat is shown is chosen by an observation format: ``full`` (the seat's whole
transcript, as TextArena's LLM wrapper shows it), ``last`` (the game prompt plus the
messages since the seat's previous move), or ``compact`` (one short line: the seat's role,
the current state and the legal moves; for small models, whose cost grows with prompt
length). Tic-tac-toe's compact view is ``T1M3456T8``: the board from the seat's side
(``M`` its marks, ``T`` the other's) with empty cells numbered; the answer is a cell
number.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypedDict, TypeVar

import pydantic
import tinker

from arena.types import StopCondition
from games.api import GAME, GameMessage, MessageKind
from games.registry import compact_view as game_compact_view

Role = Literal["system", "user", "assistant"]


class Message(TypedDict):
    """A chat message."""

    role: Role
    content: str


ObservationFormat = Literal["full", "last", "compact"]
OBSERVATION_FORMATS: tuple[str, ...] = ("full", "last", "compact")


def _tagged(m: GameMessage) -> str:
    sender = "GAME" if m.sender == GAME else f"Player {m.sender}"
    return f"[{sender}] {m.text}"


def seat_chat(
    messages: Sequence[GameMessage],
    seat: int,
    new_from: int = 0,
    fmt: ObservationFormat = "full",
) -> list[Message]:
    """The seat's transcript as chat messages.

    The seat's own moves become assistant messages; everything else it received is
    grouped into user messages, each line tagged with its sender. ``last`` keeps the
    prompt and the messages from ``new_from`` on.
    """
    if fmt not in OBSERVATION_FORMATS:
        raise ValueError(f"unknown observation format {fmt!r}; choose from {OBSERVATION_FORMATS}")
    if fmt == "compact":
        raise ValueError("the compact format needs the game: use compact_observation()")
    if fmt == "last":
        prompts = [m for m in messages[:new_from] if m.kind is MessageKind.PROMPT]
        messages = [*prompts, *messages[new_from:]]
    chat = SeatChat(seat)
    chat.extend(messages)
    return chat.messages()


def compact_observation(
    game_id: str, messages: Sequence[GameMessage], seat: int, legal_moves: Sequence[str] | None
) -> str:
    """One short line: role, current state, legal moves (see the module docstring).
    A game whose module has its own compact view (``GameKit.compact_view``) uses it."""
    view = game_compact_view(game_id, messages, seat)
    if view is not None:
        return view
    state = next(
        (m.text for m in reversed(messages) if m.kind is MessageKind.BOARD and m.sender == GAME),
        "",
    )
    moves = " ".join(legal_moves or [])
    return f"P{seat}\n{state}\nMoves: {moves}".strip()


def bracket_bare_move(text: str) -> str:
    """``4`` -> ``[4]``: compact answers are bare; games expect bracketed moves."""
    stripped = text.strip()
    if stripped and "[" not in stripped and len(stripped) <= 40:
        return f"[{stripped}]"
    return text


def bare_move(move: str) -> str:
    """``[4]`` -> ``4``: the answer a compact seat gives for a bracketed move (what
    ``bracket_bare_move`` reads back as ``move``); any other move unchanged."""
    inner = move[1:-1]
    if move.startswith("[") and move.endswith("]") and bracket_bare_move(inner) == move:
        return inner
    return move


class SeatChat:
    """A seat's chat, built incrementally as its transcript grows (append-only)."""

    def __init__(self, seat: int) -> None:
        self.seat = seat
        self._done: list[Message] = []
        self._user: list[str] = []
        self.consumed = 0
        """How many game messages have been added."""

    def extend(self, messages: Sequence[GameMessage]) -> None:
        """Add game messages (the ones after those already added)."""
        for m in messages:
            if m.sender == self.seat and m.kind is MessageKind.ACTION:
                if self._user:
                    self._done.append({"role": "user", "content": "\n".join(self._user)})
                    self._user = []
                self._done.append({"role": "assistant", "content": m.text})
            else:
                self._user.append(_tagged(m))
        self.consumed += len(messages)

    @property
    def final(self) -> Sequence[Message]:
        """The messages that will not change: up to the seat's last move (a live view)."""
        return self._done

    def pending(self) -> list[Message]:
        """The user message still growing (what the seat received since its last move)."""
        return [{"role": "user", "content": "\n".join(self._user)}] if self._user else []

    def messages(self) -> list[Message]:
        """The chat so far."""
        return [*self._done, *self.pending()]


_M = TypeVar("_M", bound=pydantic.BaseModel)
_set = object.__setattr__


def _plain_construct(cls: type[_M]) -> Callable[[dict[str, Any]], _M]:
    """A constructor for ``cls`` that does what ``model_construct`` does when every field is
    given: no validation, no per-field loop. Builds each move's prompt (``model_construct``
    alone cost about a tenth of a Connect Four move). Only for plain models (no aliases,
    extra fields, private attributes or post-init); any other falls back to
    ``model_construct``."""
    fields = cls.model_fields
    plain = (
        not cls.__pydantic_root_model__
        and cls.__pydantic_post_init__ is None
        and not cls.__private_attributes__
        and cls.model_config.get("extra") != "allow"
        and all(f.alias is None and f.validation_alias is None for f in fields.values())
    )
    names = frozenset(fields)

    def construct(values: dict[str, Any]) -> _M:
        if not plain or values.keys() != names:
            return cls.model_construct(**values)
        m = cls.__new__(cls)
        _set(m, "__dict__", values)
        _set(m, "__pydantic_fields_set__", set(names))
        _set(m, "__pydantic_extra__", None)
        _set(m, "__pydantic_private__", None)
        return m

    return construct


_new_chunk = _plain_construct(tinker.EncodedTextChunk)
_new_model_input = _plain_construct(tinker.ModelInput)


def _chunk(tokens: list[int]) -> tinker.EncodedTextChunk:
    return _new_chunk({"tokens": tokens, "type": "encoded_text"})


def _model_input(chunks: list[tinker.EncodedTextChunk]) -> tinker.ModelInput:
    return _new_model_input({"chunks": chunks})


def model_input(tokens: list[int]) -> tinker.ModelInput:
    """A ``ModelInput`` of one text chunk, built without re-validating each token id
    (the ids come from our own tokenizer; validation costs more than the rest of a move)."""
    return _model_input([_chunk(tokens)])


def prompt_tokens(ob: tinker.ModelInput) -> list[int]:
    """The token ids of a text-only ``ModelInput`` (fast path for a single chunk)."""
    chunks = ob.chunks
    if len(chunks) == 1 and isinstance(chunks[0], tinker.EncodedTextChunk):
        return chunks[0].tokens  # type: ignore[return-value]
    return ob.to_ints()


class Tokenizer(ABC):
    """The few tokenizer methods renderers need."""

    @abstractmethod
    def encode(self, text: str) -> list[int]:
        """Text to token ids (no special tokens added)."""

    @abstractmethod
    def decode(self, tokens: Sequence[int]) -> str:
        """Token ids to text (special tokens dropped, invalid bytes replaced)."""


class ByteTokenizer(Tokenizer):
    """Bytes as tokens: ids 0-255 are bytes, then three special tokens."""

    BOS = 256
    EOS = 257
    PAD = 258
    vocab_size = 259

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, tokens: Sequence[int]) -> str:
        try:
            data = bytes(tokens)  # no special tokens: at C speed
        except ValueError:  # drop special (and out-of-range) ids, still in C loops
            try:
                data = _bytes_between_specials(tokens)
            except (ValueError, TypeError):
                data = bytes(t for t in tokens if isinstance(t, int) and 0 <= t < 256)
        return data.decode("utf-8", errors="replace")


def _bytes_between_specials(tokens: Sequence[int]) -> bytes:
    """The bytes of ``tokens`` with the special ids cut out, found by C-speed ``index``
    scans (a prompt holds one special token per message, thousands of bytes). Raises
    ValueError when an id is neither a byte nor special."""
    seq = tokens if isinstance(tokens, list) else list(tokens)
    cuts: list[int] = []
    for special in (ByteTokenizer.BOS, ByteTokenizer.EOS, ByteTokenizer.PAD):
        at = -1
        while True:
            try:
                at = seq.index(special, at + 1)
            except ValueError:
                break
            cuts.append(at)
    cuts.sort()
    parts = []
    start = 0
    for cut in cuts:
        parts.append(bytes(seq[start:cut]))
        start = cut + 1
    parts.append(bytes(seq[start:]))
    return b"".join(parts)


class Renderer(ABC):
    """Turns chat messages into model input and sampled tokens back into a message."""

    tokenizer: Tokenizer

    @abstractmethod
    def build_generation_prompt(self, messages: Sequence[Message]) -> tinker.ModelInput:
        """The prompt the model continues with the next assistant message."""

    def build_incremental_prompt(
        self, final: Sequence[Message], pending: Sequence[Message], cache: PromptCache
    ) -> tinker.ModelInput:
        """``build_generation_prompt([*final, *pending])``, for a chat that only grows:
        between calls with the same ``cache``, ``final`` only gains messages at its end.
        Renderers whose encoding of a message does not depend on what follows it keep the
        encoding of ``final`` in ``cache`` and encode only the new messages; the default
        renders the whole chat."""
        return self.build_generation_prompt([*final, *pending])

    @abstractmethod
    def get_stop_sequences(self) -> StopCondition:
        """What ends a sampled assistant message."""

    @abstractmethod
    def parse_response(self, tokens: Sequence[int]) -> tuple[Message, bool]:
        """The assistant message in ``tokens``, and whether it ended properly (stop token
        seen) rather than being cut at the length limit."""

    def answer_tokens(self, text: str) -> list[int]:
        """The tokens of the answer ``text`` as a model samples it after the generation
        prompt: the text's encoding, then the stop (the first stop token, or the text and
        the first stop string encoded together); what a training datum's action holds for
        that answer. ``parse_response`` reads ``text`` back from them."""
        stop = self.get_stop_sequences()
        if not stop:
            return self.tokenizer.encode(text)
        first = stop[0]
        if isinstance(first, str):
            return self.tokenizer.encode(text + first)
        return [*self.tokenizer.encode(text), int(first)]


class PromptCache:
    """The encoding of a chat's first ``count`` messages (see
    ``Renderer.build_incremental_prompt``)."""

    def __init__(self) -> None:
        self.count = 0
        self.chunks: list[tinker.EncodedTextChunk] = []
        """The renderer's encoding of those messages, in chunks that every later prompt
        shares (its own layout: the byte renderer's starts with a BOS chunk)."""
        self.length = 0
        """Tokens in ``chunks``."""


_ROLE_TAG = {"system": "S", "user": "U", "assistant": "A"}


_GENERATION_TAG = b"A:"


class ByteRenderer(Renderer):
    """A compact byte-level chat format: ``<BOS>U:<user>\\nA:<assistant><EOS>...A:``.

    The stop condition is the EOS token. Tokens that are not valid UTF-8 decode to U+FFFD.
    """

    def __init__(self, max_prompt_tokens: int | None = None) -> None:
        self.tokenizer = ByteTokenizer()
        self.max_prompt_tokens = max_prompt_tokens
        """When set, long prompts keep their last this-many tokens (after BOS)."""

    def _encode_messages(self, messages: Sequence[Message], tokens: list[int]) -> list[int]:
        for m in messages:
            tokens += f"{_ROLE_TAG[m['role']]}:{m['content']}".encode()
            tokens.append(ByteTokenizer.EOS if m["role"] == "assistant" else 10)
        return tokens

    def _prompt(self, tokens: list[int]) -> tinker.ModelInput:
        """``tokens`` (BOS, then the messages) closed with the generation tag, cut to the
        last ``max_prompt_tokens`` after BOS."""
        tokens += _GENERATION_TAG
        limit = self.max_prompt_tokens
        if limit is not None and len(tokens) - 1 > limit:
            tokens = [ByteTokenizer.BOS, *tokens[-limit:]] if limit > 0 else [ByteTokenizer.BOS]
        return model_input(tokens)

    def build_generation_prompt(self, messages: Sequence[Message]) -> tinker.ModelInput:
        return self._prompt(self._encode_messages(messages, [ByteTokenizer.BOS]))

    def build_incremental_prompt(
        self, final: Sequence[Message], pending: Sequence[Message], cache: PromptCache
    ) -> tinker.ModelInput:
        # The prompt is the cached chunks (shared with the seat's earlier prompts, so a
        # game's prompts hold its transcript once, not once per move) and one new chunk.
        if cache.count > len(final):
            raise ValueError("the chat lost messages since the cache was filled")
        chunks = cache.chunks
        if not chunks:
            chunks.append(_chunk([ByteTokenizer.BOS]))
            cache.length = 1
        if cache.count < len(final):
            encoded = self._encode_messages(final[cache.count :], [])
            chunks.append(_chunk(encoded))
            cache.length += len(encoded)
            cache.count = len(final)
        tail = self._encode_messages(pending, [])
        tail += _GENERATION_TAG
        limit = self.max_prompt_tokens
        if limit is not None and cache.length + len(tail) - 1 > limit:
            flat = [t for chunk in chunks for t in chunk.tokens]
            return self._prompt(self._encode_messages(pending, flat))
        return _model_input([*chunks, _chunk(tail)])

    def get_stop_sequences(self) -> StopCondition:
        return [ByteTokenizer.EOS]

    def parse_response(self, tokens: Sequence[int]) -> tuple[Message, bool]:
        ended = ByteTokenizer.EOS in tokens
        if ended:
            tokens = tokens[: list(tokens).index(ByteTokenizer.EOS)]
        return {"role": "assistant", "content": self.tokenizer.decode(tokens)}, ended


class HFTokenizer(Tokenizer):
    """A Hugging Face tokenizer behind the ``Tokenizer`` interface."""

    def __init__(self, tokenizer: Any) -> None:
        self.hf = tokenizer

    def encode(self, text: str) -> list[int]:
        return list(self.hf.encode(text, add_special_tokens=False))

    def decode(self, tokens: Sequence[int]) -> str:
        return str(self.hf.decode(list(tokens), skip_special_tokens=True))


class ChatTemplateRenderer(Renderer):
    """Prompts through the tokenizer's chat template (``add_generation_prompt=True``);
    the stop condition is the token the template closes an assistant message with
    (``<|im_end|>``: ``end_of_turn``), then the tokenizer's end-of-sequence token (which
    some tokenizers set to another one: SmolLM2's GGUF names ``<|im_start|>``). Tokenizers
    without a chat template get a plain ``role: content`` layout."""

    tokenizer: HFTokenizer

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = HFTokenizer(tokenizer)
        eos = getattr(tokenizer, "eos_token_id", None)
        ends = [] if eos is None else ([*eos] if isinstance(eos, list) else [eos])
        turn = end_of_turn(tokenizer)
        self._stop: list[int] = [turn] if turn is not None else []
        self._stop += [int(t) for t in ends if t != turn]

    def build_generation_prompt(self, messages: Sequence[Message]) -> tinker.ModelInput:
        hf = self.tokenizer.hf
        if getattr(hf, "chat_template", None):
            # Render to text, then encode: ``tokenize=True`` returns a list in some
            # transformers versions and a BatchEncoding in others (5.x).
            text = hf.apply_chat_template(
                [dict(m) for m in messages], add_generation_prompt=True, tokenize=False
            )
            if not isinstance(text, str):
                raise TypeError(f"apply_chat_template returned {type(text).__name__}, not text")
            return model_input(self.tokenizer.encode(text))
        text = "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant: "
        return model_input(self.tokenizer.encode(text))

    def get_stop_sequences(self) -> StopCondition:
        return list(self._stop)

    def parse_response(self, tokens: Sequence[int]) -> tuple[Message, bool]:
        cut = next((i for i, t in enumerate(tokens) if t in self._stop), None)
        body = tokens if cut is None else tokens[:cut]
        return {"role": "assistant", "content": self.tokenizer.decode(body)}, cut is not None


_TURN_MARK = "MOVE"


def end_of_turn(tokenizer: Any) -> int | None:
    """The special token that the chat template of a Hugging Face ``tokenizer`` closes an
    assistant message with (the first token after its text: ``<|im_end|>``,
    ``<|eot_id|>``), or None when the template closes it with plain text or there is no
    template."""
    if not getattr(tokenizer, "chat_template", None):
        return None
    chat = [{"role": "user", "content": "?"}, {"role": "assistant", "content": _TURN_MARK}]
    try:
        text = tokenizer.apply_chat_template(chat, tokenize=False)
    except Exception:  # a template that refuses this chat: no end of turn is known
        return None
    if not isinstance(text, str) or _TURN_MARK not in text:
        return None
    tail = text[text.rindex(_TURN_MARK) + len(_TURN_MARK) :]
    ids = list(tokenizer.encode(tail, add_special_tokens=False)) if tail else []
    added = getattr(tokenizer, "added_tokens_decoder", None) or {}
    special = {int(i) for i, token in added.items() if getattr(token, "special", False)}
    special |= set(getattr(tokenizer, "all_special_ids", None) or ())
    return int(ids[0]) if ids and ids[0] in special else None


class CookbookRenderer(Renderer):
    """One of the Tinker cookbook's model renderers (``tinker_cookbook.renderers``), which
    know each model family's chat format and stop sequences, behind arena's interface."""

    tokenizer: HFTokenizer

    def __init__(self, name: str, tokenizer: Any) -> None:
        from tinker_cookbook import renderers

        self.name = name
        self.inner = renderers.get_renderer(name, tokenizer)
        self.tokenizer = HFTokenizer(tokenizer)

    def build_generation_prompt(self, messages: Sequence[Message]) -> tinker.ModelInput:
        return self.inner.build_generation_prompt(list(messages))  # type: ignore[arg-type]

    def get_stop_sequences(self) -> StopCondition:
        return self.inner.get_stop_sequences()

    def parse_response(self, tokens: Sequence[int]) -> tuple[Message, bool]:
        message, ended = self.inner.parse_response(list(tokens))
        content = message.get("content", "")
        if not isinstance(content, str):  # a list of parts: keep the text
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        return {"role": "assistant", "content": content}, bool(ended)


def recommended_renderer(model_name: str) -> str:
    """The cookbook's recommended renderer for ``model_name``, or ``chat`` (the tokenizer's
    own chat template) when the cookbook does not know the model."""
    try:
        from tinker_cookbook import model_info

        return str(model_info.get_recommended_renderer_name(model_name))
    except Exception:
        return "chat"


@dataclass(frozen=True)
class RendererConfig:
    """Picklable choice of renderer, built late with ``build()``."""

    name: str = "bytes"
    """``bytes``: ``ByteRenderer``; ``chat``: ``ChatTemplateRenderer`` over the tokenizer
    at ``tokenizer_path``; any other name: that cookbook renderer (``qwen3_instruct``,
    ``llama3``, ``role_colon``, ...) over the tokenizer at ``tokenizer_path``."""
    max_prompt_tokens: int | None = None
    tokenizer_path: str = ""
    """A tokenizer registered in this process (``register_tokenizer``), a name the
    cookbook's ``get_tokenizer`` knows (its registry, a Hugging Face model name), or a
    local directory."""

    def build(self) -> Renderer:
        """The renderer. Raises ValueError for an unknown name or a missing tokenizer."""
        if self.name == "bytes":
            return ByteRenderer(max_prompt_tokens=self.max_prompt_tokens)
        if not self.tokenizer_path:
            raise ValueError(f"the {self.name!r} renderer needs tokenizer_path")
        tokenizer = _load_tokenizer(self.tokenizer_path)
        if self.name == "chat":
            return ChatTemplateRenderer(tokenizer)
        try:
            return CookbookRenderer(self.name, tokenizer)
        except Exception as exc:  # the cookbook raises its RendererError
            raise ValueError(
                f"unknown renderer {self.name!r} ({exc}); choose bytes, chat, or a cookbook "
                "renderer such as qwen3_instruct, llama3, role_colon"
            ) from exc


_TOKENIZERS: dict[str, Any] = {}


def register_tokenizer(name: str, tokenizer: Any) -> None:
    """Make ``RendererConfig(tokenizer_path=name)`` use ``tokenizer`` in this process (e.g.
    the one a Tinker training client returned). Other processes load ``name`` through the
    cookbook's ``get_tokenizer``."""
    _TOKENIZERS[name] = tokenizer


def _load_tokenizer(path: str) -> Any:
    if path in _TOKENIZERS:
        return _TOKENIZERS[path]
    tokenizer = _load_hf_tokenizer(path)
    _TOKENIZERS[path] = tokenizer
    return tokenizer


def _load_hf_tokenizer(path: str) -> Any:
    from tinker_cookbook.tokenizer_utils import get_tokenizer

    from arena.models import is_model_name, load_gguf_tokenizer, resolve_model

    if is_model_name(path):  # smollm2, FILE.gguf: the tokenizer inside the GGUF file
        try:
            return load_gguf_tokenizer(resolve_model(path))
        except (OSError, KeyError, TypeError) as exc:
            raise ValueError(f"cannot load a tokenizer from {path!r}: {exc}") from exc

    try:
        return get_tokenizer(path)
    except Exception as exc:
        raise ValueError(f"cannot load a tokenizer from {path!r}: {exc}") from exc
