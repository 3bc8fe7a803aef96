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
