"""The byte renderer: prompt layout, decoding with special tokens, the compact view."""

from __future__ import annotations

from arena.renderers import ByteRenderer, ByteTokenizer, bracket_bare_move


def test_decode_drops_special_tokens_and_replaces_bad_bytes() -> None:
    t = ByteTokenizer()
    assert t.decode([t.BOS, *b"hi", t.EOS, 195, 169, t.PAD]) == "hi\u00e9"
    assert t.decode([*b"ok", -1, 300, 258]) == "ok"  # out-of-range ids are dropped too
    assert t.decode([0xFF, *b"a"]) == "\ufffda"
    assert t.decode([]) == ""


def test_prompt_layout_and_response_parsing() -> None:
    r = ByteRenderer()
    messages = [
        {"role": "user", "content": "board"},
        {"role": "assistant", "content": "[4]"},
        {"role": "user", "content": "next"},
    ]
    tokens = r.build_generation_prompt(messages).to_ints()  # type: ignore[arg-type]
    eos = ByteTokenizer.EOS
    assert tokens == [ByteTokenizer.BOS, *b"U:board\n", *b"A:[4]", eos, *b"U:next\n", *b"A:"]
    # the same messages give the same prompt (encodings are cached per message)
    assert r.build_generation_prompt(messages).to_ints() == tokens  # type: ignore[arg-type]
    message, ended = r.parse_response([*b"[7]", eos, *b"junk"])
    assert message["content"] == "[7]" and ended
    message, ended = r.parse_response([*b"[7"])
    assert message["content"] == "[7" and not ended


def test_bare_moves_get_brackets() -> None:
    assert bracket_bare_move("4") == "[4]"
    assert bracket_bare_move(" [4] ") == " [4] "
    assert bracket_bare_move("") == ""


def test_incremental_full_prompt_equals_rendering_the_whole_chat() -> None:
    """``SeatView``'s ``full`` prompts reuse the encoding of the finished messages; every
    prompt must equal rendering the whole transcript from scratch, truncated or not."""
    import random

    from arena.renderers import seat_chat
    from arena.seatview import SeatView
    from games.api import GAME, GameMessage, MessageKind

    rng = random.Random(7)
    kinds = list(MessageKind)
    for max_prompt_tokens in (None, 64):
        renderer = ByteRenderer(max_prompt_tokens=max_prompt_tokens)
        view = SeatView(1, "TicTacToe-v0", renderer, "full")
        transcript: list[GameMessage] = []
        checked = 0
        for _ in range(300):
            sender = rng.choice([GAME, 0, 1, 2])
            text = rng.choice(["[3]", "Board:\n X | O", "héllo ✓", "", "a\nb"])
            transcript.append(GameMessage(sender, text, rng.choice(kinds)))
            if rng.random() < 0.3:  # the seat is asked to move now
                got = view.prompt(transcript, 0, None).to_ints()
                want = renderer.build_generation_prompt(seat_chat(transcript, 1)).to_ints()
                assert got == want
                checked += 1
        assert checked > 50


def test_prompts_are_the_models_model_construct_builds() -> None:
    """Prompts skip pydantic's ``model_construct`` for speed; what they build must be the
    same model in every respect (equality, fields set, dump, JSON, copy, pickling), and a
    model that is not plain falls back to ``model_construct``."""
    import pickle

    import pydantic
    import tinker

    from arena.renderers import _plain_construct, model_input

    tokens = [ByteTokenizer.BOS, *b"U:hi\n", *b"A:"]
    fast = model_input(tokens)
    slow = tinker.ModelInput.model_construct(
        chunks=[tinker.EncodedTextChunk.model_construct(tokens=tokens, type="encoded_text")]
    )
    validated = tinker.ModelInput(chunks=[tinker.EncodedTextChunk(tokens=tokens)])
    for other in (slow, validated):
        assert fast == other
        assert fast.model_dump() == other.model_dump()
        assert fast.model_dump_json() == other.model_dump_json()
    assert fast.model_fields_set == slow.model_fields_set
    assert fast.chunks[0].model_fields_set == slow.chunks[0].model_fields_set
    assert fast.to_ints() == tokens and fast.length == len(tokens)
    assert pickle.loads(pickle.dumps(fast)) == fast
    assert fast.model_copy() == fast
    assert tinker.ModelInput.model_validate(fast.model_dump()) == fast

    class Aliased(pydantic.BaseModel):
        value: int = pydantic.Field(alias="v")

    made = _plain_construct(Aliased)({"v": 3})
    assert made.value == 3 and made.model_fields_set == {"value"}
    partial = _plain_construct(tinker.EncodedTextChunk)({"tokens": [1]})
    assert partial.type == "encoded_text"  # a missing field: model_construct fills it in


def test_the_random_move_policy_reads_the_text_after_the_seats_last_move() -> None:
    """``RandomMovePolicy`` reads only what follows the last stop token, whatever the
    chunks (it scans them from the end), within its scan limit."""
    import random

    import tinker

    from arena.policies import RandomMovePolicy
    from arena.renderers import model_input

    eos = ByteTokenizer.EOS
    policy = RandomMovePolicy()
    rng = random.Random(3)
    pieces = [[*b"ab"], [eos], [*b"cd", eos, *b"ef"], [ByteTokenizer.BOS], [*b"gh"], []]
    for _ in range(300):
        chunks = [rng.choice(pieces)[:] for _ in range(rng.randrange(1, 5))]
        flat = [t for c in chunks for t in c]
        after = flat[len(flat) - flat[::-1].index(eos) :] if eos in flat else flat
        ob = tinker.ModelInput(chunks=[tinker.EncodedTextChunk(tokens=c) for c in chunks if c])
        assert policy._news(ob) == after, chunks
    long = model_input([*b"x" * 5000, eos, *b"y" * 5000])
    assert policy._news(long) == [*b"y" * 4000]  # games.legal.MAX_SCAN_CHARS
