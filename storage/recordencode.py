"""The recorder's encoding: a plan's turn blocks as rows, each block's body compressed
(Zstandard, on another thread) against its game's dictionary, which is read from the
database once per game, or made from the batch's own blocks when the database has none."""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from storage.db import Database
from storage.models import BlockDictionary
from storage.recordplan import Plan
from storage.turnlog import compress, make_dictionary

log = logging.getLogger("storage.recorder")


def _compress_all(jobs: list[tuple[bytes, bytes | None]]) -> list[bytes]:
    return [compress(body, dictionary) for body, dictionary in jobs]


class BlockEncoder:
    """Encodes the blocks of each plan into ``plan.rows`` for the database ``db``; keeps
    each game's dictionary (id, data) once known."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.dictionaries: dict[str, tuple[int, bytes] | None] = {}
        """Each game's block dictionary (id, data); None: the database had none."""

    async def encode(self, plan: Plan) -> None:
        """Fill ``plan.rows`` (and ``plan.new_dictionaries`` for games with none yet).
        Encoded here, compressed on another thread (Zstandard lets the games run
        meanwhile), before the write transaction holds the database's lock."""
        bodies = [block.body() for block in plan.blocks]
        dictionaries = await self._dictionaries_for(plan, bodies)
        chosen = [dictionaries.get(b.game_id, (None, None)) for b in plan.blocks]
        jobs = [(body, data) for body, (_, data) in zip(bodies, chosen, strict=True)]
        datas = await asyncio.to_thread(_compress_all, jobs) if jobs else []
        plan.rows = [
            (b.match_id, b.seq, b.first, len(b.turns), data, dictionary_id)
            for b, data, (dictionary_id, _) in zip(plan.blocks, datas, chosen, strict=True)
        ]

    def remember(self, plan: Plan) -> None:
        """``plan`` is written: keep the dictionaries made with it, with their ids."""
        for block, row in zip(plan.blocks, plan.rows, strict=True):
            if block.game_id in plan.new_dictionaries:
                self.dictionaries[block.game_id] = (row[-1], plan.new_dictionaries[block.game_id])

    async def _dictionaries_for(
        self, plan: Plan, bodies: list[bytes]
    ) -> dict[str, tuple[int | None, bytes]]:
        """The dictionary each game of ``plan`` compresses against: the newest one the
        database holds for the game, else one made now from this batch's blocks of it
        (stored with the batch: ``plan.new_dictionaries``; its id is None until then)."""
        out: dict[str, tuple[int | None, bytes]] = {}
        games = {b.game_id for b in plan.blocks}
        for game_id in games:
            if game_id not in self.dictionaries:
                self.dictionaries[game_id] = await self._stored_dictionary(game_id)
            known = self.dictionaries[game_id]
            if known is not None:
                out[game_id] = known
                continue
            sample = [
                body for b, body in zip(plan.blocks, bodies, strict=True) if b.game_id == game_id
            ]
            plan.new_dictionaries[game_id] = data = make_dictionary(sample)
            out[game_id] = (None, data)
        return out

    async def _stored_dictionary(self, game_id: str) -> tuple[int, bytes] | None:
        try:
            async with self.db.sessions() as session:
                row = (
                    await session.execute(
                        select(BlockDictionary.id, BlockDictionary.data)
                        .where(BlockDictionary.game_id == game_id)
                        .order_by(BlockDictionary.id.desc())
                        .limit(1)
                    )
                ).first()
        except (SQLAlchemyError, OSError) as exc:  # the write will say what is wrong
            log.debug("could not read the block dictionary of %s: %s", game_id, exc)
            return None
        return None if row is None else (int(row[0]), bytes(row[1]))
