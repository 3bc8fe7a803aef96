"""The pages in a real browser: Playwright driving Debian's Chromium, headless.

Install: ``pip install playwright`` (the Python package only; never ``playwright install``)
and ``apt-get install -y chromium``. Skipped, with the reason, when /usr/bin/chromium is
missing. Screenshots go to ``test-artifacts/``.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from arena.events import EventBus
from arena.play import play_matches
from storage import Recorder, open_database
from tests.test_web import paced
from web import WebHub, serve

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason=f"no browser: {CHROMIUM} is missing"),
]


@pytest.fixture
async def browser_page() -> AsyncIterator[Any]:
    playwright_api = pytest.importorskip("playwright.async_api")
    async with playwright_api.async_playwright() as p:
        browser = await p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
            page.on(
                "console",
                lambda msg: errors.append(f"console: {msg.text}") if msg.type == "error" else None,
            )
            page.errors = errors
            yield page
        finally:
            await browser.close()


def write_metrics(path: Path, steps: range) -> None:
    with path.open("a") as f:
        for step in steps:
            row = {
                "step": step,
                "env/all/reward/total": math.tanh(step / 8) - 0.3,
                "test/random/win": min(0.95, 0.4 + step / 40),
                "test/random/draw": 0.05,
                "test/random/loss": max(0.0, 0.55 - step / 40),
                "test/optimal/win": 0.0,
                "test/optimal/draw": min(0.9, step / 25),
                "test/optimal/loss": max(0.1, 1 - step / 25),
                "test/random/invalid_move_rate": 0.2 * math.exp(-step / 6),
                "optim/loss": 1.5 * math.exp(-step / 10) + 0.1,
            }
            f.write(json.dumps(row) + "\n")


async def until(check: Any, timeout: float = 5.0) -> None:
    """Poll the async ``check`` until it is true (the pages' CSP forbids the string
    evaluation ``wait_for_function`` uses)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not await check():
        assert asyncio.get_running_loop().time() < deadline, "timed out waiting in the browser"
        await asyncio.sleep(0.05)


async def shot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    await page.screenshot(path=str(path), full_page=True)
    print(f"screenshot: {path}")
    return path


async def _more(locator: Any, than: int) -> bool:
    return bool(await locator.count() > than)


async def _has_text(page: Any, selector: str, text: str) -> bool:
    return text in (await page.text_content(selector) or "")


async def test_watch_a_live_match_then_replay_it_and_play_a_bot(
    browser_page: Any, tmp_path: Path
) -> None:
    page = browser_page
    run_dir = tmp_path / "runs" / "ttt-selfplay"
    run_dir.mkdir(parents=True)
    write_metrics(run_dir / "metrics.jsonl", range(20))
    db = await open_database(str(tmp_path / "arena.db"))
    bus = EventBus()
    recorder = Recorder(db, bus)
    recorder.start()
    hub: WebHub = await serve(
        db,
        bus,
        port=0,
        follow_db=False,
        poll_interval_s=0.1,
        run_sources=[str(tmp_path / "runs" / "*")],
    )
    try:
        # Earlier matches for the lobby's "recently finished" list.
        await play_matches("KuhnPoker-v0", ["random", "random"], 2, bus=bus)
        gate = asyncio.Event()
        games = asyncio.create_task(
            play_matches(
                "TicTacToe-v0", ["random", "optimal"], 2, bus=bus, agent_wrapper=paced(0.3, gate)
            )
        )
        await page.goto(hub.url)
        await page.wait_for_selector("#conn.open")
        gate.set()
        watch = page.locator("#live a.watch").first
        await watch.wait_for(timeout=5000)
        await watch.click()
        await page.wait_for_url("**/match?id=*")
        moves = page.locator("#moves li:not(.hidden)")
        await moves.first.wait_for(timeout=5000)
        seen = await moves.count()
        await until(lambda: _more(moves, seen))  # a move appeared live, without a reload
        assert await page.locator("#title .badge.live").count() == 1
        await page.wait_for_selector("#title .badge.finished", timeout=10000)
        await page.wait_for_selector("#reveal:not([hidden])")
        assert "won" in (await page.text_content("#subtitle") or "") or "draw" in (
            await page.text_content("#subtitle") or ""
        )
        await shot(page, "web-match.png")

        await page.click("#replay-link")
        await page.wait_for_url("**/replay?id=*")
        await page.wait_for_selector("#moves li[data-step='1']")
        total = await page.locator("#moves li").count() - 1
        assert (await page.text_content("#step-label") or "").strip() == f"move 0 / {total}"
        await page.click("#forward")
        await page.click("#forward")
        assert (await page.text_content("#step-label") or "").strip() == f"move 2 / {total}"
        await page.click("#back")
        assert (await page.text_content("#step-label") or "").strip() == f"move 1 / {total}"
        await page.keyboard.press("End")
        assert (await page.text_content("#step-label") or "").strip() == f"move {total} / {total}"
        await page.locator("#scrubber").fill("2")
        assert (await page.text_content("#step-label") or "").strip() == f"move 2 / {total}"
        assert "O" in (await page.text_content("#board") or "")
        await shot(page, "web-replay.png")
        await games

        await page.goto(hub.url)
        await page.wait_for_selector("#recent tbody tr")
        await until(lambda: _more(page.locator("#recent tbody tr"), 3))
        await shot(page, "web-lobby.png")

        # Play a seat against the random bot, in this tab.
        await page.goto(hub.url + "play")
        await page.wait_for_selector("#conn.open")
        await page.wait_for_selector("#game option[value='TicTacToe-v0']", state="attached")
        await page.select_option("#game", "TicTacToe-v0")
        await page.select_option("#opponent", "random")
        await page.click("#start-button")
        await page.wait_for_url("**/match?id=*")
        for _ in range(6):
            await page.wait_for_selector(
                "#play:not([hidden]) #legal button:not([disabled]), #title .badge.finished",
                timeout=5000,
            )
            if await page.locator("#title .badge.finished").count():
                break
            if _ == 1:
                await shot(page, "web-play.png")
            await page.locator("#legal button").first.click()
        await page.wait_for_selector("#title .badge.finished", timeout=5000)
        assert "(you)" in (await page.text_content("#seats") or "")

        await page.goto(hub.url + "run?name=ttt-selfplay")
        await page.wait_for_selector(".uplot canvas")
        assert await page.locator(".chart").count() >= 4  # reward, 2 opponents, invalid, loss
        write_metrics(run_dir / "metrics.jsonl", range(20, 30))
        await until(lambda: _has_text(page, "#subtitle", "30 steps"))
        await shot(page, "web-run.png")
        assert page.errors == []
    finally:
        await hub.close()
        await recorder.close()
        await db.close()
