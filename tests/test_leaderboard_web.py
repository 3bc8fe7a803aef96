"""The leaderboard, ratings and checkpoint ratings over HTTP and in a real browser.

Real bot matches are played and recorded (``Recorder``) and rated live (``RatingKeeper``)
on the bus of a real ``WebHub`` on loopback; a real training run's folder is watched
(``config.json`` + ``metrics.jsonl``), and seats named after its checkpoints are rated like
any other player. The browser test drives Debian's Chromium through Playwright (skipped,
with the reason, when it is missing).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from arena.eventbus import EventBus
from arena.play import play_matches
from arena.seats import BotAgent, SeatAgent
from games.bots import check_bot, make_bot
from matchmaking.live import RatingKeeper
from storage import Recorder, open_database
from tests.test_web_browser import ARGS, CHROMIUM, GUARD_MS, shot, until, write_metrics
from web import ServerLimits, WebHub, serve

GAME = "TicTacToe-v0"


@dataclass(frozen=True)
class Named:
    """A bot recorded under another player's name (here: a run's checkpoint)."""

    name: str
    bot: str

    def check(self, game_id: str) -> None:
        from games.registry import get_spec

        check_bot(self.bot, get_spec(game_id))

    def build(self, seat: int, game_id: str, seed: int) -> SeatAgent:
        return BotAgent(make_bot(self.bot, seed=seed), game_id)


@dataclass
class Served:
    hub: WebHub
    bus: EventBus
    recorder: Recorder
    keeper: RatingKeeper

    async def play(self, players: list[Any], games: int, seed: int = 0) -> None:
        """Play ``games`` games with seats swapped every other game; wait until stored
        and rated."""
        first = (games + 1) // 2
        await play_matches(GAME, players, first, seed=seed, bus=self.bus)
        await play_matches(GAME, players[::-1], games - first, seed=seed + 1000, bus=self.bus)
        await self.recorder.flush()
        await self.keeper.flush()

    async def get(self, path: str) -> tuple[int, Any]:
        reader, writer = await asyncio.open_connection("127.0.0.1", self.hub.port)
        writer.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{self.hub.port}\r\n\r\n".encode())
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        status = int(head.split()[1])
        length = next(
            int(line.split(b":")[1]) for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        )  # fmt: skip
        body = await reader.readexactly(length)
        writer.close()
        return status, json.loads(body)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    run = tmp_path / "runs" / "r1"
    run.mkdir(parents=True)
    (run / "config.json").write_text(json.dumps({"run_name": "r1", "game_id": GAME}))
    write_metrics(run / "metrics.jsonl", range(0, 30))
    db = await open_database(str(tmp_path / "arena.db"))
    bus = EventBus()
    recorder = Recorder(db, bus)
    recorder.start()
    keeper = RatingKeeper(db, bus)
    keeper.start()
    hub = await serve(
        db, bus, port=0, follow_db=False, poll_interval_s=0.1,
        run_sources=[str(tmp_path / "runs" / "*" / "metrics.jsonl")],
        limits=ServerLimits(leaderboard_cache_s=0.0),
    )  # fmt: skip
    try:
        yield Served(hub, bus, recorder, keeper)
    finally:
        await hub.close()
        await keeper.close()
        await recorder.close()
        await db.close()


async def test_leaderboard_ratings_and_checkpoint_ratings_over_http(served: Served) -> None:
    await served.play(["random", "optimal"], 16)
    await served.play([Named("checkpoint:r1@10", "random"), "optimal"], 6, seed=50)
    await served.play([Named("checkpoint:r1@20", "optimal"), "random"], 6, seed=60)
    await served.play([Named("human", "random"), "optimal"], 2, seed=70)  # a browser seat

    status, board = await served.get(f"/api/leaderboard?game={GAME}")
    assert status == 200 and board["game_id"] == GAME and board["method"] == "bt"
    ranked = [r["policy"] for r in board["rows"]]
    assert ranked[0] == "checkpoint:r1@20" or ranked[0] == "bot:optimal@1"  # both play perfectly
    assert ranked.index("bot:optimal@1") < ranked.index("bot:random@1")
    assert [r["rank"] for r in board["rows"]] == sorted(r["rank"] for r in board["rows"])
    optimal = next(r for r in board["rows"] if r["policy"] == "bot:optimal@1")
    assert optimal["games"] == 16 + 6 + 2 and optimal["label"] == "optimal"
    assert optimal["lower"] < optimal["rating"] < optimal["upper"]
    assert board["matches"] == 30 and board["seat0_score"]["games"] == 30

    # The live ratings (stored as the matches ended) are that fit: the same numbers.
    status, got = await served.get(f"/api/ratings?game={GAME}&players=random,optimal,nobody,human")
    assert status == 200 and got["game_id"] == GAME
    assert got["ratings"]["human"]["policy"] == "human:human"  # as matches name the seat
    assert got["ratings"]["optimal"]["rating"] == pytest.approx(optimal["rating"], abs=1e-6)
    assert got["ratings"]["optimal"]["sigma"] == pytest.approx(optimal["sigma"], abs=1e-6)
    assert got["ratings"]["random"]["rating"] == 1000.0  # the anchor

    status, replayed = await served.get(f"/api/leaderboard?game={GAME}&method=openskill")
    assert status == 200 and replayed["method"] == "openskill"
    for row in replayed["rows"]:
        assert row["ordinal"] == row["mu"] - 3 * row["sigma"]  # not rounded apart

    status, error = await served.get(f"/api/leaderboard?game={GAME}&method=elo")
    assert status == 400 and "bt, openskill" in error["message"]
    status, error = await served.get("/api/leaderboard")
    assert status == 400 and "give the game" in error["message"]

    assert got["ratings"]["random"]["policy"] == "bot:random@1"
    random_row = got["ratings"]["random"]
    assert random_row["mu"] == random_row["rating"]
    assert random_row["ordinal"] == random_row["mu"] - 3 * random_row["sigma"]
    assert got["ratings"]["optimal"]["games"] == 24 and got["ratings"]["nobody"] is None
    many = ",".join(f"p{i}" for i in range(65))
    status, error = await served.get(f"/api/ratings?game={GAME}&players={many}")
    assert status == 400 and "64" in error["message"]

    status, run = await served.get("/api/runs/r1/ratings")
    assert status == 200 and run["game_id"] == GAME and run["policy_prefix"] == "checkpoint:r1@"
    assert [c["step"] for c in run["checkpoints"]] == [10, 20]
    c10, c20 = run["checkpoints"]
    assert c10["games"] == 6 and c20["games"] == 6
    assert c20["rating"] > c10["rating"]  # the perfect bot under checkpoint 20's name
    rows = {r["policy"]: r for r in board["rows"]}
    assert c20["rating"] == pytest.approx(rows["checkpoint:r1@20"]["rating"], abs=1e-6)
    status, _ = await served.get("/api/runs/nope/ratings")
    assert status == 404


async def _text(page: Any, selector: str) -> str:
    return str(await page.text_content(selector) or "")


@pytest.mark.slow
@pytest.mark.skipif(not CHROMIUM.exists(), reason=f"no browser: {CHROMIUM} is missing")
async def test_the_browser_shows_the_leaderboard_live_and_ratings_beside_names(
    served: Served,
) -> None:
    playwright_api = pytest.importorskip("playwright.async_api")
    await served.play(["random", "optimal"], 10)
    await served.play([Named("checkpoint:r1@10", "random"), "optimal"], 4, seed=50)
    await served.play([Named("checkpoint:r1@20", "optimal"), "random"], 4, seed=60)
    base = served.hub.url.rstrip("/")
    async with playwright_api.async_playwright() as p:
        browser = await p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(GUARD_MS)
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
            await page.goto(f"{base}/leaderboard?game={GAME}")
            rows = page.locator("#board tbody tr")

            async def ranked() -> bool:
                return await rows.count() == 4

            await until(ranked)
            order = [await rows.nth(i).get_attribute("data-policy") for i in range(4)]
            assert order.index("bot:optimal@1") < order.index("bot:random@1")
            optimal = page.locator('#board tbody tr[data-policy="bot:optimal@1"] td')
            assert await optimal.last.text_content() == "14"
            assert "rated matches" in await _text(page, "#board-notes")
            # A new rated match reaches the open page through the ratings stream.
            await served.play(["random", "optimal"], 2, seed=99)

            async def updated() -> bool:
                return await optimal.last.text_content() == "16"

            await until(updated)
            assert "95 % interval" in await _text(page, "#board thead")
            ranks = [await rows.nth(i).locator("td").first.text_content() for i in range(4)]
            assert ranks == sorted(ranks, key=int)  # the rank column reads top to bottom
            assert await page.locator("#board tbody .interval-bar").count() == 4
            await shot(page, "leaderboard.png")
            await page.select_option("#method", "openskill")

            async def replayed() -> bool:
                return "\u03bc \u2212 3\u03c3" in await _text(page, "#board thead")  # mu - 3 sigma

            await until(replayed)
            assert await rows.count() == 4

            # The lobby puts each player's rating beside its name.
            await page.goto(f"{base}/")

            async def badges() -> bool:
                return await page.locator("#recent .players .rating").count() > 0

            await until(badges)
            shown = await page.locator("#recent .player", has_text="optimal").first.text_content()
            expected = await served.get(f"/api/ratings?game={GAME}&players=optimal")
            rating = expected[1]["ratings"]["optimal"]["rating"]
            assert shown is not None and f"{rating:.0f}" in shown
            # The match view too.
            await page.locator("#recent a", has_text="View").first.click()

            async def seat_rating() -> bool:
                return await page.locator("#seats .player .rating").count() == 2

            await until(seat_rating)
            # The run's page charts its checkpoints' ratings by step.
            await page.goto(f"{base}/run?name=r1")

            async def chart() -> bool:
                return await page.locator("#checkpoint-ratings canvas").count() > 0

            await until(chart)
            assert "Checkpoint ratings" in await _text(page, "#checkpoint-ratings h2")
            await shot(page, "run-checkpoint-ratings.png")
            assert errors == []
        finally:
            await browser.close()
