"""Agent accounts: tokens shown once and stored hashed, constant-time checks, revocation,
and ``arena agents`` (real SQLite in tmp_path)."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from storage import Database, open_database
from storage.agents import (
    AgentAccountError,
    authenticate,
    create_agent,
    list_agents,
    revoke_agent,
    revoked_among,
    split_token,
    touch_agent,
)
from storage.cli import agents_command


@pytest.fixture
async def db(tmp_path: Path) -> AsyncIterator[Database]:
    database = await open_database(str(tmp_path / "arena.db"))
    yield database
    await database.close()


async def test_a_created_token_authenticates_its_account_and_only_it(db: Database) -> None:
    alice, alice_token = await create_agent(db, "alice")
    _bob, bob_token = await create_agent(db, "bob")
    assert alice.key == "agent:alice" and not alice.revoked
    assert alice_token != bob_token and split_token(alice_token) is not None
    found = await authenticate(db, alice_token)
    assert found is not None and found.name == "alice"
    found_bob = await authenticate(db, bob_token)
    assert found_bob is not None and found_bob.name == "bob"


@pytest.mark.parametrize(
    "mangle",
    [
        lambda t: t[:-1] + ("A" if t[-1] != "A" else "B"),  # wrong secret
        lambda t: t.replace("arena_", "arena-", 1),  # malformed prefix
        lambda t: t[:10],  # cut
        lambda t: "arena_" + "0" * 16 + "_" + t.rsplit("_", 1)[-1],  # unknown key id
        lambda t: t + "x" * 200,  # too long
        lambda t: "",
    ],
)
async def test_a_wrong_or_malformed_token_authenticates_nothing(db: Database, mangle) -> None:  # type: ignore[no-untyped-def]
    _info, token = await create_agent(db, "alice")
    assert await authenticate(db, mangle(token)) is None


async def test_non_text_tokens_authenticate_nothing(db: Database) -> None:
    await create_agent(db, "alice")
    for token in (None, 12, ["arena_"], {"token": 1}):
        assert await authenticate(db, token) is None


async def test_a_revoked_token_authenticates_nothing_and_the_name_stays_taken(
    db: Database,
) -> None:
    _info, token = await create_agent(db, "alice")
    revoked = await revoke_agent(db, "alice")
    assert revoked.revoked
    assert await authenticate(db, token) is None
    assert (await revoke_agent(db, "alice")).revoked_at == revoked.revoked_at  # idempotent
    with pytest.raises(AgentAccountError, match="exists already"):
        await create_agent(db, "alice")
    assert await revoked_among(db, ["alice", "ghost"]) == {"alice", "ghost"}


async def test_bad_names_and_unknown_accounts_are_refused_with_what_to_do(db: Database) -> None:
    for name in ("", "a:b", "a@1", "x" * 65, "-lead", "sp ace", "\udc80"):
        with pytest.raises(AgentAccountError, match="not an agent name"):
            await create_agent(db, name)
    with pytest.raises(AgentAccountError, match="arena agents list"):
        await revoke_agent(db, "nobody")


async def test_only_a_digest_of_the_token_is_stored(db: Database, tmp_path: Path) -> None:
    _info, token = await create_agent(db, "alice")
    await touch_agent(db, "alice", when=123.0)
    secret = token.rsplit("_", 1)[-1]
    await db.close()
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("arena.db*"))
    assert secret.encode() not in raw and token.encode() not in raw
    reopened = await open_database(str(tmp_path / "arena.db"))
    try:
        (listed,) = await list_agents(reopened)
        assert listed.name == "alice" and listed.last_seen_at == 123.0
        assert await authenticate(reopened, token) is not None
    finally:
        await reopened.close()


def test_arena_agents_create_list_revoke(tmp_path: Path) -> None:
    db = str(tmp_path / "cli.db")
    out, err = io.StringIO(), io.StringIO()
    assert agents_command("create", "alice", db, out=out, err=err) == 0
    lines = out.getvalue().splitlines()
    assert "agent:alice" in lines[0] and "only this once" in lines[0]
    token = lines[1]
    assert split_token(token) is not None
    out = io.StringIO()
    assert agents_command("list", None, db, out=out, err=err) == 0
    assert "alice" in out.getvalue() and "active" in out.getvalue()
    assert token not in out.getvalue()
    out = io.StringIO()
    assert agents_command("list", None, db, as_json=True, out=out, err=err) == 0
    (row,) = json.loads(out.getvalue())
    assert row["policy"] == "agent:alice" and "token" not in row
    assert agents_command("revoke", "alice", db, out=io.StringIO(), err=err) == 0
    out = io.StringIO()
    agents_command("list", None, db, out=out, err=err)
    assert "revoked" in out.getvalue()
    assert err.getvalue() == ""


def test_arena_agents_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    db = str(tmp_path / "cli.db")
    for action, name in (("create", "a:b"), ("revoke", "ghost"), ("create", None), ("x", None)):
        err = io.StringIO()
        assert agents_command(action, name, db, out=io.StringIO(), err=err) == 2
        assert err.getvalue().count("\n") == 1 and err.getvalue().startswith("arena: error: ")
    agents_command("create", "alice", db, out=io.StringIO())
    err = io.StringIO()
    assert agents_command("create", "alice", db, out=io.StringIO(), err=err) == 2
    assert "exists already" in err.getvalue()
