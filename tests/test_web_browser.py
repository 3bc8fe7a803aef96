"""The pages in a real browser: Playwright driving Debian's Chromium, headless.

Install: ``pip install playwright`` (the Python package only; never ``playwright install``)
and ``apt-get install -y chromium``. Skipped, with the reason, when /usr/bin/chromium is
missing. Screenshots go to ``test-artifacts/``.

A match shown live is stepped (a move per permit the test releases), so the page is looked
at where the test wants the match, however busy the machine; every wait is a hang guard
(``HANG_GUARD_S``), the page's own default included.
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
from tests.conftest import HANG_GUARD_S
from tests.test_web import allow, stepped
from web import WebHub, serve

CHROMIUM = Path("/usr/bin/chromium")
GUARD_MS = HANG_GUARD_S * 1000
"""Playwright's waits, in milliseconds: a hang guard only."""
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
            page.set_default_timeout(GUARD_MS)
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


async def until(check: Any, timeout: float = HANG_GUARD_S) -> None:
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
        await play_matches("TicTacToe-v0", ["random", "optimal"], 1, bus=bus, seed=1)
        moves_left = asyncio.Semaphore(0)
        games = asyncio.create_task(
            play_matches(
                "TicTacToe-v0", ["random", "optimal"], 1, bus=bus, agent_wrapper=stepped(moves_left)
            )
        )
        await page.goto(hub.url)
        await page.wait_for_selector("#conn.open")
        watch = page.locator("#live a.watch").first
        await watch.wait_for()
        await watch.click()
        await page.wait_for_url("**/match?id=*")
        allow(moves_left, 1)
        moves = page.locator("#moves li:not(.hidden)")
        await moves.first.wait_for()
        seen = await moves.count()
        allow(moves_left, 1)
        await until(lambda: _more(moves, seen))  # a move appeared live, without a reload
        assert await page.locator("#title .badge.live").count() == 1  # two moves: not over
        allow(moves_left, 100)
        await page.wait_for_selector("#title .badge.finished")
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
        # After move 2 the grid holds one O and one X, the X (move 2) highlighted.
        assert await page.locator(".board-grid .cell[data-value='O']").count() == 1
        assert await page.locator(".board-grid .cell[data-value='X']").count() == 1
        assert await page.get_attribute(".board-grid .cell.last", "data-value") == "X"
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
                "#play:not([hidden]) #legal button:not([disabled]), #title .badge.finished"
            )
            if await page.locator("#title .badge.finished").count():
                break
            if _ == 1:
                await shot(page, "web-play.png")
            await page.locator("#legal button").first.click()
        await page.wait_for_selector("#title .badge.finished")
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


# -- boards -------------------------------------------------------------------------------------


async def _cells(page: Any) -> list[list[str]]:
    """The drawn grid, as rows of cell values."""
    rows = int(await page.get_attribute(".board-grid", "data-rows") or 0)
    cols = int(await page.get_attribute(".board-grid", "data-cols") or 0)
    values = await page.locator(".board-grid .cell").evaluate_all(
        "cells => cells.map(c => c.dataset.value)"
    )
    return [values[r * cols : (r + 1) * cols] for r in range(rows)]


async def _last_cells(page: Any) -> list[tuple[int, int]]:
    found = await page.locator(".board-grid .cell.last").evaluate_all(
        "cells => cells.map(c => [Number(c.dataset.row), Number(c.dataset.col)])"
    )
    return [(r, c) for r, c in found]


def _grid(board: dict[str, Any]) -> list[list[str]]:
    return [[str(cell) for cell in row] for row in board["grid"]]


def _diff(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[int, int]]:
    return [
        (r, c)
        for r, row in enumerate(b["grid"])
        for c, cell in enumerate(row)
        if cell != a["grid"][r][c]
    ]


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[tuple[WebHub, EventBus]]:
    db = await open_database(str(tmp_path / "arena.db"))
    bus = EventBus()
    recorder = Recorder(db, bus)
    recorder.start()
    hub: WebHub = await serve(db, bus, port=0, follow_db=False, poll_interval_s=0.1)
    try:
        yield hub, bus
    finally:
        await hub.close()
        await recorder.close()
        await db.close()


async def test_tic_tac_toe_is_played_by_clicking_cells(
    browser_page: Any, served: tuple[WebHub, EventBus]
) -> None:
    page = browser_page
    hub, _bus = served
    await page.goto(hub.url + "play")
    await page.wait_for_selector("#conn.open")
    await page.wait_for_selector("#game option[value='TicTacToe-v0']", state="attached")
    await page.select_option("#game", "TicTacToe-v0")
    await page.select_option("#opponent", "random")
    await page.select_option("#seat", "0")
    await page.click("#start-button")
    await page.wait_for_url("**/match?id=*")
    match_id = page.url.split("id=")[1]
    centre = page.locator(".board-grid button.cell[data-move='[4]']")
    await centre.wait_for()
    assert await centre.is_enabled()  # the person moves first: every cell is free
    assert await page.locator(".board-grid button.cell.playable").count() == 9
    await centre.click()
    # The click played [4] (seat 0 plays O); the bot answered; its cell is the highlighted one.
    await page.wait_for_selector(".board-grid .cell[data-value='X']")
    assert await page.get_attribute(".board-grid .cell[data-move='[4]']", "data-value") == "O"
    assert await centre.is_disabled()  # taken: no longer clickable
    last = await _last_cells(page)
    cells = await _cells(page)
    assert len(last) == 1 and cells[last[0][0]][last[0][1]] == "X"
    status, body = await _api(hub, match_id)
    assert status == 200 and json.loads(body)["turns"][0]["action"] == "[4]"  # the move frame
    await page.wait_for_selector(".board-grid button.cell.playable")
    await shot(page, "board-tictactoe-live.png")  # the person to move: free cells clickable
    for _ in range(4):  # play on, a free cell each time, until the match ends
        await page.wait_for_selector(".board-grid button.cell.playable, #title .badge.finished")
        if await page.locator("#title .badge.finished").count():
            break
        await page.locator(".board-grid button.cell.playable").first.click()
        await page.wait_for_selector(
            ".board-grid button.cell.playable:not([disabled]), #title .badge.finished"
        )
    await page.wait_for_selector("#title .badge.finished")
    snapshot = json.loads((await _api(hub, match_id))[1])
    assert await _cells(page) == _grid(snapshot["board"])  # the final board, as stored
    banner = await page.text_content(".result-banner") or ""
    rewards = snapshot["result"]["rewards"]
    if rewards[0] == rewards[1]:
        assert banner.startswith("Draw")
    else:
        winner = 0 if rewards[0] > rewards[1] else 1
        assert banner.startswith(f"Seat {winner} (") and " wins" in banner
    assert await page.locator(".board-grid button.cell.playable").count() == 0
    await shot(page, "board-tictactoe.png")
    assert page.errors == []


async def test_a_click_in_a_connect_four_column_drops_a_disc_to_its_bottom(
    browser_page: Any, served: tuple[WebHub, EventBus]
) -> None:
    page = browser_page
    hub, _bus = served
    await page.goto(hub.url + "play")
    await page.wait_for_selector("#conn.open")
    await page.wait_for_selector("#game option[value='ConnectFour-v0']", state="attached")
    await page.select_option("#game", "ConnectFour-v0")
    await page.select_option("#opponent", "random")
    await page.select_option("#seat", "0")
    await page.click("#start-button")
    await page.wait_for_url("**/match?id=*")
    top = page.locator(".board-grid.discs button.cell[data-row='0'][data-col='3']")
    await top.wait_for()
    assert await top.get_attribute("data-move") == "[3]"  # every cell of a column plays it
    await top.click()
    await page.wait_for_selector(".board-grid .cell[data-value='O']")  # the bot
    cells = await _cells(page)
    assert cells[5][3] == "X"  # seat 0's disc fell to the bottom of column 3
    assert sum(cell == "X" for row in cells for cell in row) == 1
    assert page.errors == []


async def _api(hub: WebHub, match_id: str) -> tuple[int, bytes]:
    from tests.test_web import http_get

    return await http_get(hub, f"/api/matches/{match_id}")


async def test_connect_four_is_drawn_the_same_live_at_the_end_and_in_the_replay(
    browser_page: Any, served: tuple[WebHub, EventBus]
) -> None:
    page = browser_page
    hub, bus = served
    moves_left = asyncio.Semaphore(0)
    games = asyncio.create_task(
        play_matches(
            "ConnectFour-v0", ["random", "alphabeta-2"], 1, bus=bus,
            agent_wrapper=stepped(moves_left),
        )
    )  # fmt: skip
    await _until_live(hub)
    match_id = hub.live_match_ids()[0]
    await page.goto(hub.url + f"match?id={match_id}")
    await page.wait_for_selector(".board-grid.discs")
    assert await _cells(page) == [[""] * 7 for _ in range(6)]  # the start board, 6 x 7
    allow(moves_left, 1)
    await page.wait_for_selector(".board-grid .cell.last")
    # The first move, shown live: one highlighted disc, resting on the bottom.
    live = await _cells(page)
    ((row, col),) = await _last_cells(page)
    assert live[row][col] == "X" and row == 5
    assert sum(cell != "" for line in live for cell in line) == 1
    assert await page.locator("#title .badge.live").count() == 1
    assert await page.locator(".board-grid.discs .disc").count() == 42  # discs, live
    allow(moves_left, 100)
    await page.wait_for_selector("#title .badge.finished")
    await games
    snapshot = json.loads((await _api(hub, match_id))[1])
    final = await _cells(page)
    assert await page.locator(".board-grid.discs .disc").count() == 42  # the same drawing
    assert final == _grid(snapshot["board"])
    boards = [snapshot["match_info"]["start_board"], *(t["board"] for t in snapshot["turns"])]
    assert await _last_cells(page) == _diff(boards[-2], boards[-1])
    assert " wins" in (await page.text_content(".result-banner") or "")
    await shot(page, "board-connectfour.png")

    await page.click("#replay-link")
    await page.wait_for_url("**/replay?id=*")
    await page.wait_for_selector(".board-grid.discs")
    assert await _cells(page) == _grid(boards[0])
    for step in (1, 2, len(boards) - 1):
        await page.locator("#scrubber").fill(str(step))
        assert await _cells(page) == _grid(boards[step])
        assert await _last_cells(page) == _diff(boards[step - 1], boards[step])
    assert await page.locator(".result-banner").count() == 1  # at the last step
    await page.locator("#scrubber").fill("1")
    assert await page.locator(".result-banner").count() == 0
    assert page.errors == []


async def _until_live(hub: WebHub) -> None:
    deadline = asyncio.get_running_loop().time() + HANG_GUARD_S
    while not hub.live_match_ids():
        assert asyncio.get_running_loop().time() < deadline, "no match went live"
        await asyncio.sleep(0.02)


async def test_kuhn_poker_cards_stay_face_down_live_and_are_shown_after_the_end(
    browser_page: Any, served: tuple[WebHub, EventBus]
) -> None:
    page = browser_page
    hub, bus = served
    moves_left = asyncio.Semaphore(0)
    games = asyncio.create_task(
        play_matches(
            "KuhnPoker-v0", ["random", "random"], 1, bus=bus, agent_wrapper=stepped(moves_left)
        )
    )
    await _until_live(hub)
    match_id = hub.live_match_ids()[0]
    await page.goto(hub.url + f"match?id={match_id}")
    await page.wait_for_selector(".card-table")
    assert await page.locator(".card-table .card.back").count() == 2  # one per seat, face down
    assert await page.locator(".card-table .card.face").count() == 0
    assert "pot 2" in (await page.text_content(".card-table .pot") or "")
    allow(moves_left, 1)
    await page.wait_for_selector(".card-table .history li.last")
    first_move = await page.text_content(".card-table .history li.last") or ""
    assert first_move.startswith("Player ")  # the public bet, highlighted as the last move
    assert await page.locator(".card-table .card.face").count() == 0
    assert "Your card" not in (await page.content())  # no seat's view either
    await shot(page, "board-kuhnpoker.png")
    allow(moves_left, 100)
    await page.wait_for_selector("#title .badge.finished")
    await games
    snapshot = json.loads((await _api(hub, match_id))[1])
    # The last hand's cards, face up, as the all-seeing boards have them.
    last_round = snapshot["board"]["round"]
    dealt = next(
        b["cards"]
        for b in reversed([t["full_board"] for t in snapshot["turns"]])
        if b and b.get("round") == last_round and "seat 0" in b.get("cards", {})
    )
    faces = await page.locator(".card-table .card.face").evaluate_all(
        "cards => cards.map(c => c.dataset.card)"
    )
    assert faces == [dealt["seat 0"][0], dealt["seat 1"][0]]
    assert await page.locator(".card-table .card.back").count() == 0
    chips = snapshot["board"]["chips"]
    for seat in (0, 1):
        seat_text = await page.text_content(f".table-seat[data-seat='{seat}'] .chips") or ""
        assert seat_text == f"chips {int(chips[str(seat)])}"
    banner = await page.text_content(".result-banner") or ""
    assert " wins" in banner or banner.startswith("Draw")
    await shot(page, "board-kuhnpoker-end.png")

    await page.click("#replay-link")
    await page.wait_for_url("**/replay?id=*")
    await page.wait_for_selector(".card-table")
    await page.locator("#scrubber").fill("1")  # after the first move: that hand's cards
    first = snapshot["turns"][0]["full_board"]["cards"]
    faces = await page.locator(".card-table .card.face").evaluate_all(
        "cards => cards.map(c => c.dataset.card)"
    )
    assert faces == [first["seat 0"][0], first["seat 1"][0]]
    assert await page.text_content(".card-table .history li.last") == first_move
    await shot(page, "board-kuhnpoker-replay.png")
    assert page.errors == []


async def test_an_aborted_match_says_why_and_a_game_without_a_board_shows_its_text(
    browser_page: Any, served: tuple[WebHub, EventBus]
) -> None:
    from arena.events import MatchAborted, MatchStarted, TurnPlayed

    page = browser_page
    hub, bus = served
    board = {"kind": "grid", "grid": [["O", "", ""], ["", "", ""], ["", "", ""]]}
    bus.publish(MatchStarted("ab", "TicTacToe-v0", 1, 2, ("random", "random")))
    bus.publish(TurnPlayed("ab", 0, 0, "obs", "[0]", True, move="[0]", board=board))
    bus.publish(MatchAborted("ab", "seat 1 (random) timed out after 120 s", 1))
    bus.publish(MatchStarted("tx", "Nim-v0", 1, 2, ("random", "random"), public_state="3 5 7"))
    await page.goto(hub.url + "match?id=ab")
    await page.wait_for_selector(".result-banner.aborted")
    banner = await page.text_content(".result-banner") or ""
    assert banner == "Aborted: seat 1 (random) timed out after 120 s"
    assert (await _cells(page))[0] == ["O", "", ""]  # the board as it stood
    await page.goto(hub.url + "match?id=tx")
    await page.wait_for_selector("pre.board-text")
    assert (await page.text_content("pre.board-text") or "") == "3 5 7"  # the text fallback
    assert await page.locator(".board-grid, .card-table, .text-toggle").count() == 0
    assert page.errors == []
