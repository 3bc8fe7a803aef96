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
