"""Remote agents' accounts: names, secret tokens (stored hashed), revocation.

A token is ``arena_<key id>_<secret>``: the key id (16 hex digits, not a secret) finds the
account, the secret (32 random bytes, URL-safe base64) proves it. Only the SHA-256 of the
secret is stored: with 256 bits of entropy a slow hash adds nothing, and a stolen
database gives no token. The check compares digests with ``hmac.compare_digest`` (constant
time), and an unknown key id is compared against a dummy digest, so an answer takes the
same time whichever part was wrong. Tokens are printed once, by ``create_agent``'s
caller, and never logged.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import select, update

from arena.identity import PolicyRef
from storage.db import Database
from storage.errors import StorageError
from storage.models import AgentAccount

TOKEN_PREFIX = "arena_"
KEY_ID_CHARS = 16
"""Hex digits of a token's key id."""
SECRET_BYTES = 32
"""Random bytes of a token's secret part."""
MAX_TOKEN_CHARS = 128
"""Longest text taken as a token (anything longer is refused before it is parsed)."""
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
"""An account name: 1 to 64 letters, digits, ``_``, ``.``, ``-`` (so ``agent:NAME`` is a
clean policy key)."""
_KEY_ID = re.compile(rf"[0-9a-f]{{{KEY_ID_CHARS}}}")
_DUMMY_DIGEST = hashlib.sha256(b"no such account").hexdigest()


class AgentAccountError(StorageError):
    """A bad account request: a malformed or taken name, an unknown account. The message
    says what to do."""


@dataclass(frozen=True)
class AgentInfo:
    """An agent account as stored (never its token)."""

    name: str
    created_at: float
    revoked_at: float | None
    last_seen_at: float | None

    @property
    def key(self) -> str:
        """Its policy key: what its seats are recorded and rated as."""
        return PolicyRef.agent(self.name).key

    @property
    def revoked(self) -> bool:
        """True once revoked: its token authenticates nothing."""
        return self.revoked_at is not None


def _info(row: AgentAccount) -> AgentInfo:
    return AgentInfo(row.name, row.created_at, row.revoked_at, row.last_seen_at)


def check_name(name: str) -> str:
    """``name`` when it is a valid account name; raises AgentAccountError otherwise."""
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise AgentAccountError(
            f"{str(name)[:80]!r} is not an agent name: use 1 to 64 letters, digits, '_', "
            "'.' or '-', starting with a letter or digit"
        )
    return name


def digest(secret: str) -> str:
    """The stored form of a token's secret part (SHA-256, hex)."""
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def split_token(token: object) -> tuple[str, str] | None:
    """(key id, secret) of a well-formed token, else None."""
    if not isinstance(token, str) or len(token) > MAX_TOKEN_CHARS:
        return None
    if not token.startswith(TOKEN_PREFIX):
        return None
    rest = token[len(TOKEN_PREFIX) :]
    key_id, sep, secret = rest[:KEY_ID_CHARS], rest[KEY_ID_CHARS:][:1], rest[KEY_ID_CHARS + 1 :]
    if sep != "_" or not secret or not _KEY_ID.fullmatch(key_id):
        return None
    return key_id, secret


async def create_agent(db: Database, name: str) -> tuple[AgentInfo, str]:
    """Create the account ``name``; returns it and its token (shown to the user once,
    stored only hashed). Raises AgentAccountError for a malformed or taken name (revoked
    names stay taken: their ratings and matches are theirs), SQLAlchemy errors otherwise."""
    check_name(name)
    key_id = secrets.token_hex(KEY_ID_CHARS // 2)
    secret = secrets.token_urlsafe(SECRET_BYTES)
    async with db.writes.begin() as session:
        if await session.get(AgentAccount, name) is not None:
            raise AgentAccountError(
                f"an agent named {name!r} exists already (revoked names stay taken); "
                "choose another name"
            )
        row = AgentAccount(
            name=name,
            key_id=key_id,
            token_hash=digest(secret),
            created_at=time.time(),
            revoked_at=None,
            last_seen_at=None,
        )
        session.add(row)
    return _info(row), f"{TOKEN_PREFIX}{key_id}_{secret}"


async def list_agents(db: Database) -> list[AgentInfo]:
    """Every account, by name (revoked ones included). Raises SQLAlchemy errors."""
    async with db.sessions() as session:
        rows = (await session.scalars(select(AgentAccount).order_by(AgentAccount.name))).all()
    return [_info(r) for r in rows]


async def revoke_agent(db: Database, name: str) -> AgentInfo:
    """Revoke ``name``'s token (idempotent); returns the account. A server notices within
    its ``agent_account_poll_s`` and forfeits the agent's live seats. Raises
    AgentAccountError for an unknown account."""
    async with db.writes.begin() as session:
        row = await session.get(AgentAccount, name)
        if row is None:
            raise AgentAccountError(f"no agent named {name!r}; `arena agents list` shows them")
        if row.revoked_at is None:
            row.revoked_at = time.time()
        info = _info(row)
    return info


async def authenticate(db: Database, token: object) -> AgentInfo | None:
    """The live (not revoked) account ``token`` proves, or None: a malformed, wrong or
    revoked token. The secret is compared in constant time (see the module docstring).
    Only reads, so it works on a read-only database. Raises SQLAlchemy errors."""
    parts = split_token(token)
    key_id, secret = parts if parts is not None else ("", "")
    async with db.sessions() as session:
        row = (
            await session.scalars(select(AgentAccount).where(AgentAccount.key_id == key_id))
        ).first()
    expected = row.token_hash if row is not None else _DUMMY_DIGEST
    matches = hmac.compare_digest(expected.encode(), digest(secret).encode())
    if row is None or not matches or parts is None or row.revoked_at is not None:
        return None
    return _info(row)


async def touch_agent(db: Database, name: str, when: float | None = None) -> None:
    """Record that ``name`` authenticated now. Raises SQLAlchemy errors (a read-only
    database: callers treat this as best effort)."""
    async with db.writes.begin() as session:
        await session.execute(
            update(AgentAccount)
            .where(AgentAccount.name == name)
            .values(last_seen_at=when if when is not None else time.time())
        )


async def revoked_among(db: Database, names: Iterable[str]) -> set[str]:
    """Those of ``names`` that are revoked or no longer exist. Raises SQLAlchemy errors."""
    wanted = set(names)
    if not wanted:
        return set()
    async with db.sessions() as session:
        rows = (
            await session.execute(
                select(AgentAccount.name, AgentAccount.revoked_at).where(
                    AgentAccount.name.in_(wanted)
                )
            )
        ).all()
    live = {name for name, revoked_at in rows if revoked_at is None}
    return wanted - live
