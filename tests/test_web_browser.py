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
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from arena.eventbus import EventBus
from arena.play import play_matches
from storage import Recorder, open_database
from tests.conftest import HANG_GUARD_S
from tests.test_web import Paced, allow, http_get, paced, stepped
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
            page.other_page = lambda: browser.new_page(viewport={"width": 1280, "height": 900})
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


async def start_from_play_page(
    page: Any, hub: WebHub, game: str, opponent: str, seat: str | None = None
) -> None:
    """Start a match from the play page (``game`` against ``opponent``, in ``seat`` when
    given) and wait until the page shows it."""
    await page.goto(hub.url + "play")
    await page.wait_for_selector("#conn.open")
    await page.wait_for_selector(f"#game option[value='{game}']", state="attached")
    await page.select_option("#game", game)
    await page.select_option("#opponent", opponent)
    if seat is not None:
        await page.select_option("#seat", seat)
    await page.click("#start-button")
    await page.wait_for_url("**/match?id=*")


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
        # The two matches of each line-up are one row each, with their count.
        await until(lambda: _more(page.locator("#recent tr.group-row[data-count='2']"), 1))
        await shot(page, "web-lobby.png")

        # Play a seat against the random bot, in this tab.
        await start_from_play_page(page, hub, "TicTacToe-v0", "random")
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
        await until(lambda: _has_text(page, "#facts .steps", "30 logged"))
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
    await start_from_play_page(page, hub, "TicTacToe-v0", "random", seat="0")
    match_id = page.url.split("id=")[1]
    centre = page.locator(".board-grid button.cell[data-move='[4]']")
    await centre.wait_for()
    assert await centre.is_enabled()  # the person moves first: every cell is free
    assert await page.locator(".board-grid button.cell.playable").count() == 9
    assert await _in_view(page, ".board-grid")  # the board first, at 1280x900
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
    await start_from_play_page(page, hub, "ConnectFour-v0", "random", seat="0")
    top = page.locator(".board-grid.discs button.cell[data-row='0'][data-col='3']")
    await top.wait_for()
    assert await _in_view(page, ".board-grid")
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


# -- the server gone and back; the lobby's groups -------------------------------------------


async def test_the_pages_say_the_server_is_gone_and_catch_up_when_it_is_back(
    browser_page: Any, tmp_path: Path
) -> None:
    """The server stops while matches are live (a training process ended): the pages say
    so and stop vouching for them ("unknown", never a frozen LIVE); a server started again
    on the same address shows their true end, without a reload."""
    lobby = browser_page
    db = await open_database(str(tmp_path / "arena.db"))
    bus = EventBus()
    recorder = Recorder(db, bus)
    recorder.start()
    first: WebHub = await serve(db, bus, port=0, follow_db=False, poll_interval_s=0.1)
    port = first.port
    second: WebHub | None = None
    gate = asyncio.Event()
    games = asyncio.create_task(
        play_matches(
            "TicTacToe-v0", ["random", "random"], 3, bus=bus, agent_wrapper=paced(0.2, gate)
        )
    )
    try:
        await until(lambda: _count(first, 3))
        await lobby.goto(first.url)
        await lobby.wait_for_selector("#live tr.group-row[data-count='3'] .badge.live")
        match_id = first.live_match_ids()[0]
        watcher = await lobby.other_page()
        await watcher.goto(first.url + f"match?id={match_id}")
        await watcher.wait_for_selector("#title .badge.live")

        await first.close()  # the server is gone; its matches play on, recorded
        for page in (lobby, watcher):
            await page.wait_for_selector("#offline")
            assert "server is gone" in (await page.text_content("#offline") or "")
        await lobby.wait_for_selector("#live .badge.unknown")
        assert await lobby.locator("#live .badge.live").count() == 0
        assert await lobby.locator("#live.stale").count() == 1
        await watcher.wait_for_selector("#title .badge.unknown")
        assert await watcher.locator("#title .badge.live").count() == 0
        await shot(lobby, "web-server-gone.png")

        gate.set()
        await games  # they end while no server watches them
        await recorder.close()
        second = await serve(db, None, port=port, follow_db=True, poll_interval_s=0.1)
        for page in (lobby, watcher):  # each page reconnects by itself
            await page.wait_for_selector("#offline", state="detached")
        await lobby.wait_for_selector("#recent tr.group-row[data-count='3'] .badge.finished")
        await lobby.wait_for_selector("#live-empty:not([hidden])")
        assert await lobby.locator("#live tbody tr").count() == 0
        await watcher.wait_for_selector("#title .badge.finished")
        assert await watcher.locator("#title .badge.unknown").count() == 0
        await shot(lobby, "web-server-back.png")
        refused = [e for e in lobby.errors if "ERR_CONNECTION_REFUSED" not in e]
        assert refused == []  # the browser logs each attempt while the server is gone
    finally:
        if not games.done():
            gate.set()
            await games
        if second is not None:
            await second.close()
        await first.close()
        await recorder.close()
        await db.close()


async def _count(hub: WebHub, n: int) -> bool:
    return len(hub.live_match_ids()) == n


def _start(bus: EventBus, match_id: str, players: tuple[str, ...], group: str | None,
           run: str | None, when: float) -> None:  # fmt: skip
    from arena.events import MatchStarted

    bus.publish(
        MatchStarted(match_id, "TicTacToe-v0", 0, 2, players, group_id=group, run_id=run, time=when)
    )


def _finish(bus: EventBus, match_id: str, when: float) -> None:
    from arena.events import MatchEnded

    bus.publish(MatchEnded(match_id, "finished", (1.0, -1.0), (0, 0), num_turns=5, time=when))


async def test_the_lobby_groups_a_runs_matches_and_watch_opens_one_still_live(
    browser_page: Any,
) -> None:
    """A run's training and evaluation matches and the warm-up's are one row each, with
    counts; their own rows come on demand; Watch asks the server at the click, so it opens
    a match live at that moment, or the replay of the last one to end."""
    from web.limits import ServerLimits

    page = browser_page
    bus = EventBus()
    # Lobby updates held back for a minute: the page keeps showing what it first got, so
    # only Watch's own question to the server can know that a match has just ended.
    limits = ServerLimits(lobby_interval_s=60.0)
    hub: WebHub = await serve(None, bus, port=0, limits=limits)
    try:
        t0 = time.time() - 60
        learners, mixed = ("learner", "learner"), ("learner", "random")
        for i, players in enumerate((learners, mixed, learners, learners)):
            _start(bus, f"train{i}", players, f"b0g{i}", "r1", t0 + i)
        for i in range(2):
            evaluation = ("checkpoint:r1@0", "random")
            _start(bus, f"eval{i}", evaluation, f"eval-random-s{i}", "r1", t0 + 5)
        for i in range(3):
            _start(bus, f"warm{i}", ("random", "random"), "warmup", None, t0 - 10 + i)
        _start(bus, "solo", ("random", "optimal"), None, None, t0 + 6)
        _finish(bus, "train3", t0 + 7)  # the newest training match is over already
        await until(lambda: _count(hub, 9))
        await page.goto(hub.url)
        groups = page.locator("#live tr.group-row")
        await groups.first.wait_for()
        counts = {
            await g.locator(".kind").text_content(): await g.get_attribute("data-count")
            for g in await groups.all()
        }
        assert counts == {"training": "3", "evaluation": "2", "warm-up": "3"}
        training = page.locator("#live tr.group-row", has=page.locator(".kind-training"))
        text = await training.text_content() or ""
        times = "\N{MULTIPLICATION SIGN}"
        assert "3 live" in text and f"learner vs learner {times}2" in text
        assert f"learner vs random {times}1" in text
        assert await page.locator("#live tr.match-row[data-id='solo']").count() == 1  # alone
        assert await page.locator("#live tr.match-row").count() == 1
        await training.locator("button.expand").click()
        children = page.locator("#live tr.child")
        ids = await children.evaluate_all("rows => rows.map(r => r.dataset.id)")
        assert ids == ["train2", "train1", "train0"]  # newest first
        await shot(page, "web-lobby-groups.png")
        await training.locator("button.expand").click()
        assert await page.locator("#live tr.child").count() == 0
        ended = page.locator("#recent tr.match-row[data-id='train3']")
        assert await ended.count() == 1

        await training.locator("a.watch").click()  # the newest live one, not train3
        await page.wait_for_url("**/match?id=train2")
        await page.wait_for_selector("#title .badge.live")

        await page.goto(hub.url)
        await training.locator("a.watch").wait_for()
        for i, match_id in enumerate(("train0", "train2", "train1")):
            _finish(bus, match_id, t0 + 10 + i)
        await until(lambda: _count(hub, 6))
        assert await training.count() == 1  # the page still shows them live
        await training.locator("a.watch").click()  # none is: the last to end, replayed
        await page.wait_for_url("**/replay?id=train1")
        await page.wait_for_selector("#moves li[data-step='0']")
        assert page.errors == []
    finally:
        await hub.close()


# -- runs: every metric charted, the runs index, playing a checkpoint ------------------------


@pytest.fixture(scope="module")
def kuhn_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A runs folder with one tiny Kuhn poker run, trained here: its metrics.jsonl holds
    what the trainer writes (the league's figures, evaluations vs random and the Nash bot,
    the exact exploitability at two steps, the branches and the advantages by move) and it
    saved a checkpoint."""
    from trainer.config import TrainConfig
    from trainer.train import Trainer

    runs = tmp_path_factory.mktemp("kuhn") / "runs"
    config = TrainConfig(
        game_id="KuhnPoker-v0", log_dir=str(runs / "kuhn"), run_name="kuhn", db="",
        num_batches=2, batch_size=2, group_size=2, warmup_steps=2, warmup_games=4,
        eval_every=2, eval_games=2, save_every=1, league_snapshot_every=1,
        branches=2, branch_points=1, drop_constant_reward_groups=False,
    )  # fmt: skip
    asyncio.run(Trainer(config).run())
    return runs


WINS_TITLE = "Wins by opponent and by seat: the learner's score (win 1, draw ½)"
"""The chart of the learner's score in its training games against each opponent and, in
self-play, seat 0's (a multi-game run's: one per game, its id after the title)."""


async def _charts(page: Any) -> list[tuple[str, list[str], int]]:
    """Each drawn chart: its title, the metrics it draws and its legend's series."""
    out = []
    for chart in await page.locator(".chart[data-keys]").all():
        keys = json.loads(await chart.get_attribute("data-keys") or "[]")
        series = await chart.locator(".u-legend .u-series").count()
        out.append((await chart.get_attribute("data-title") or "", keys, series))
    return out


async def test_the_run_page_charts_every_metric_a_training_run_writes(
    browser_page: Any, kuhn_runs: Path
) -> None:
    from storage.rundir import RunDirectory

    page = browser_page
    written = {k for row in RunDirectory(kuhn_runs / "kuhn").metrics() for k in row} - {"step"}
    assert "test/yardstick/exploitability" in written and "league/pool_size" in written
    hub: WebHub = await serve(None, None, port=0, run_sources=[str(kuhn_runs / "*")])
    try:
        await page.goto(hub.url + "run?name=kuhn")
        await page.wait_for_selector(".chart[data-keys] canvas")
        charts = await _charts(page)
        charted = [k for _title, keys, _n in charts for k in keys]
        assert sorted(charted) == sorted(written)  # every metric, each on one chart
        for title, keys, series in charts:
            assert series == len(keys) + 1, title  # the step, then one line per metric
        by_title = {title: keys for title, keys, _n in charts}
        exploitability = next(k for t, k in by_title.items() if t.startswith("Exploitability"))
        assert exploitability == [  # at temperature 1 and greedily
            "test/greedy/yardstick/exploitability", "test/yardstick/exploitability",
        ]  # fmt: skip
        bets = next(k for t, k in by_title.items() if t.startswith("Policy: how often it bets"))
        calls = next(k for t, k in by_title.items() if t.startswith("Policy: how often it calls"))
        assert sorted(k.rsplit("/", 1)[1] for k in bets) == ["J", "Jp", "K", "Kp", "Q", "Qp"]
        assert sorted(k.rsplit("/", 1)[1] for k in calls) == ["Jb", "Jpb", "Kb", "Kpb", "Qb", "Qpb"]
        greedy = by_title["Greedy policy (temperature 0): 1 where it bets or calls"]
        assert len(greedy) == 12 and all(k.startswith("test/greedy/yardstick/bet/") for k in greedy)
        scores = by_title[WINS_TITLE]
        assert "league/score/checkpoint:kuhn@0" in scores
        spread = next(k for t, k in by_title.items() if t.startswith("Advantage spread by move"))
        assert spread[0] == "advantage/move_1/std" and all(k.endswith("/std") for k in spread)
        assert by_title["Branching cost: continuation moves per move of the training games"] == [
            "branch/moves_per_move"
        ]
        assert by_title["League: opponent mix (share of groups)"] == [
            "league/past_share", "league/bot_share", "league/collapse"
        ]  # fmt: skip
        league = page.locator("#league-section")
        assert await league.is_visible() and await league.locator(".chart").count() >= 2
        assert await page.locator(f'#learning-section .chart[data-title="{WINS_TITLE}"]').count()
        assert await page.locator("#other-section .chart").count() >= 3  # env/..., time, ...
        facts = await page.text_content("#facts") or ""
        assert "KuhnPoker-v0" in facts and "yardstick exploitability" in facts
        assert "bet" not in facts  # the policy is charted, not spelled out in the summary
        assert await page.locator("#run-links a", has_text="Play its checkpoints").count() == 1
        assert "metrics.jsonl" not in (await page.text_content("#run-links") or "")
        await shot(page, "run-kuhn-every-metric.png")

        # The runs index: each run's game, steps, start and last evaluation.
        rows = RunDirectory(kuhn_runs / "kuhn").metrics()
        await page.goto(hub.url + "run")
        run = page.locator("table.runs tr[data-run='kuhn']")
        await run.wait_for()
        assert await run.locator(".game").text_content() == "KuhnPoker-v0"
        assert await run.locator(".steps").text_content() == str(rows[-1]["step"])
        assert (await run.locator(".started").text_content() or "").endswith("ago")
        evaluation = await run.locator(".eval").text_content() or ""
        last = next(r for r in reversed(rows) if "test/yardstick/exploitability" in r)
        assert f"step {last['step']}:" in evaluation
        assert f"yardstick exploitability {last['test/yardstick/exploitability']:.3f}" in evaluation
        assert "vs nash: won" in evaluation and "vs random: won" in evaluation
        await shot(page, "runs-index.png")
        await page.goto(hub.url)  # the lobby lists them the same way
        await page.wait_for_selector("#runs table.runs tr[data-run='kuhn'] .eval")
        assert page.errors == []
    finally:
        await hub.close()


@pytest.fixture(scope="module")
def multi_game_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A runs folder with one tiny run trained here on tic-tac-toe and Kuhn poker at once."""
    from trainer.config import TrainConfig
    from trainer.train import Trainer

    runs = tmp_path_factory.mktemp("multi") / "runs"
    config = TrainConfig(
        game_id="TicTacToe-v0,KuhnPoker-v0", log_dir=str(runs / "multi"), run_name="multi",
        db="", num_batches=2, batch_size=2, group_size=2, warmup_steps=2, warmup_games=4,
        eval_every=2, eval_games=2, save_every=1, league_snapshot_every=1, yardstick_samples=16,
    )  # fmt: skip
    asyncio.run(Trainer(config).run())
    return runs


async def test_a_multi_game_run_page_charts_each_game_apart(
    browser_page: Any, multi_game_runs: Path
) -> None:
    from storage.rundir import RunDirectory

    page = browser_page
    written = {k for row in RunDirectory(multi_game_runs / "multi").metrics() for k in row}
    written -= {"step"}
    hub: WebHub = await serve(None, None, port=0, runs_dir=str(multi_game_runs),
                              run_sources=[str(multi_game_runs / "*")])  # fmt: skip
    try:
        await page.goto(hub.url + "run?name=multi")
        await page.wait_for_selector(".chart[data-keys] canvas")
        charts = await _charts(page)
        charted = [k for _title, keys, _n in charts for k in keys]
        assert sorted(charted) == sorted(written)  # every metric, each on one chart
        by_title = {title: keys for title, keys, _n in charts}
        for game_id, bot in (("TicTacToe-v0", "optimal"), ("KuhnPoker-v0", "nash")):
            keys = by_title[f"Win / draw / loss vs {game_id}/{bot}"]  # each game's bots apart
            assert keys == [f"test/{game_id}/{bot}/{x}" for x in ("win", "draw", "loss")]
        exploitability = next(k for t, k in by_title.items() if t.startswith("Exploitability"))
        assert exploitability == [  # at temperature 1 and greedily
            "test/KuhnPoker-v0/yardstick/exploitability",
            "test/greedy/KuhnPoker-v0/yardstick/exploitability",
        ]
        scores = by_title["Evaluation: mean score vs each opponent (win 1, draw ½)"]
        assert "test/TicTacToe-v0/random/score" in scores
        for game_id in ("TicTacToe-v0", "KuhnPoker-v0"):  # each game's league apart
            mix = by_title[f"League: opponent mix (share of groups) ({game_id})"]
            assert mix == [f"league/{game_id}/{x}" for x in ("past_share", "bot_share", "collapse")]
            scores = by_title[f"{WINS_TITLE} ({game_id})"]
            assert scores and all(k.startswith(f"league/{game_id}/") for k in scores)
        legend = await page.locator(".chart", has_text="mean score vs each").first.text_content()
        assert "KuhnPoker-v0/nash" in (legend or "")
        await shot(page, "run-multi-game.png")
        await page.goto(hub.url + "run")  # the runs index: each game's opponents by name
        evaluation = await page.locator("table.runs tr[data-run='multi'] .eval").text_content()
        assert "vs KuhnPoker-v0/nash: won" in (evaluation or "")
        assert "TicTacToe-v0/nash" not in (evaluation or "") and "mean_score" in (evaluation or "")
        # Its checkpoints are offered as opponents in each of its games.
        status, body = await http_get(hub, "/api/games")
        assert status == 200
        games = json.loads(body)["games"]
        offered = {g["id"]: [c["player"] for c in g["checkpoints"]] for g in games}
        for game_id in ("TicTacToe-v0", "KuhnPoker-v0"):
            assert any(p.startswith("run:multi@") for p in offered[game_id]), game_id
        assert not any(p.startswith("run:multi@") for p in offered["ConnectFour-v0"])
        assert page.errors == []
    finally:
        await hub.close()


def write_long_run(path: Path, steps: range, eval_every: int = 40) -> int:
    """A long Kuhn poker run's rows as the trainer writes them: a row a step with the league's
    scores (two bots, self-play, a past checkpoint saved every 20 steps), evaluation figures
    in every ``eval_every``-th step's row and in a last row after the last step. Returns the
    evaluations written."""
    infosets = ["J", "Jp", "K", "Kp", "Q", "Qp", "Jb", "Jpb", "Kb", "Kpb", "Qb", "Qpb"]
    evaluations = 0
    with path.open("a") as f:
        for step in [*steps, steps[-1] + 1]:
            final = step == steps[-1] + 1
            row: dict[str, float] = {"step": step}
            if not final:
                row |= {
                    "env/all/reward/total": math.tanh(step / 300) - 0.2,
                    "optim/loss": 1.5 * math.exp(-step / 500) + 0.1,
                    "league/pool_size": float(min(8, step // 20)),
                    "league/past_share": 0.2,
                    "league/bot_share": 0.1,
                    "league/collapse": 0.0,
                    "league/self_play_seat0_score": 0.5 + 0.1 * math.sin(step / 50),
                    "league/score/bot:random": min(0.9, 0.5 + step / 4000),
                    "league/score/bot:nash": 0.45,
                }
                for saved in range(0, step, 20):
                    row[f"league/score/checkpoint:long@{saved}"] = 0.4 + (saved % 100) / 500
            if final or step % eval_every == 0:
                evaluations += 1
                swing = 0.205 + 0.115 * math.sin(evaluations)  # between 0.09 and 0.32
                row["test/yardstick/exploitability"] = swing
                for bot in ("random", "nash"):
                    row |= {
                        f"test/{bot}/win": 0.5 - swing / 2,
                        f"test/{bot}/draw": 0.0,
                        f"test/{bot}/loss": 0.5 + swing / 2,
                        f"test/{bot}/score": 0.5 - swing / 2,
                        f"test/{bot}/reward": -swing,
                    }
                for infoset in infosets:
                    row[f"test/yardstick/bet/{infoset}"] = (evaluations % 10) / 10
            f.write(json.dumps(row) + "\n")
    return evaluations


async def _run_rows(hub: WebHub, name: str) -> int:
    status, body = await http_get(hub, "/api/runs")  # reads what was appended (1 MiB a poll)
    assert status == 200
    return int(next(r["rows"] for r in json.loads(body)["runs"] if r["name"] == name))


async def test_a_long_runs_page_draws_every_evaluation_and_a_short_opponent_legend(
    browser_page: Any, tmp_path: Path
) -> None:
    page = browser_page
    run_dir = tmp_path / "runs" / "long"
    run_dir.mkdir(parents=True)
    metrics = run_dir / "metrics.jsonl"
    evaluations = write_long_run(metrics, range(2_140))
    assert evaluations == 55
    hub: WebHub = await serve(None, None, port=0, poll_interval_s=0.1,
                              run_sources=[str(tmp_path / "runs" / "*")])  # fmt: skip
    try:

        async def read_whole() -> bool:
            return await _run_rows(hub, "long") >= 2_141

        await until(read_whole)  # the whole file read before the page
        await page.goto(hub.url + "run?name=long")
        await page.wait_for_selector(".chart[data-keys] canvas")
        await until(lambda: _has_text(page, "#facts .steps", "2141 logged"))
        for summary in await page.locator("details.constant-charts:not([hidden]) > summary").all():
            await summary.click()  # the charts folded as constant (the league's mix) shown too
        panels = await page.locator(".chart[data-keys]").all()
        evaluation_charts = 0
        for panel in panels:
            title = await panel.get_attribute("data-title") or ""
            keys = json.loads(await panel.get_attribute("data-keys") or "[]")
            if all(k.startswith("test/") for k in keys):  # evaluation charts: every point
                evaluation_charts += 1
                assert await panel.get_attribute("data-points") == str(evaluations), title
            # each plot fills its card (less the card's padding)
            card = await panel.bounding_box()
            plot = await panel.locator(".uplot").bounding_box()
            assert card is not None and plot is not None
            assert plot["width"] >= card["width"] - 40, title
        assert evaluation_charts >= 5  # win/draw/loss x2, score, reward, exploitability, policy
        scores = page.locator(f'.chart[data-title="{WINS_TITLE}"]')
        keys = json.loads(await scores.get_attribute("data-keys") or "[]")
        past = len(range(0, 2_139, 20))  # checkpoints played by the last step: every one drawn
        assert sum(k.startswith("league/score/checkpoint:") for k in keys) == past > 100
        lines = json.loads(await scores.get_attribute("data-lines") or "[]")
        assert len(lines) <= 8 and await scores.locator(".u-legend .u-series").count() <= 9
        assert "bot:random" in lines and "bot:nash" in lines
        assert [line.split(":")[0] for line in lines if line.startswith("past")] == [
            "past, oldest third", "past, middle third", "past, newest third"
        ]  # fmt: skip
        path = tmp_path / "run-long.png"
        await page.screenshot(path=str(path), full_page=True)
        print(f"screenshot: {path}")

        more = write_long_run(metrics, range(2_141, 2_181))  # live: 40 more steps
        await until(lambda: _has_text(page, "#facts .steps", "2182 logged"))
        exploitability = page.locator(".chart[data-title^='Exploitability']")
        assert await exploitability.get_attribute("data-points") == str(evaluations + more)
        assert page.errors == []
    finally:
        await hub.close()


async def _in_view(page: Any, selector: str) -> bool:
    box = await page.locator(selector).first.bounding_box()
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= 900


async def test_a_person_plays_a_trained_checkpoint_from_the_play_page_then_again(
    browser_page: Any, kuhn_runs: Path, tmp_path: Path
) -> None:
    from matchmaking.recording import Recording
    from trainer.loaders import install

    install()  # as the arena command does: checkpoints' weights load through the trainer
    page = browser_page
    db = await open_database(str(tmp_path / "arena.db"))
    hub: WebHub = await serve(db, None, port=0, follow_db=False, runs_dir=str(kuhn_runs))
    recording = await Recording.start(db, hub.bus)  # recorded and rated, as arena serve does
    try:
        await page.goto(hub.url + "play?game=KuhnPoker-v0")
        await page.wait_for_selector("#conn.open")
        option = page.locator("#opponent option[value='run:kuhn@0']")
        await option.wait_for(state="attached")
        assert await page.input_value("#game") == "KuhnPoker-v0"
        label = await option.text_content() or ""
        assert label.startswith("kuhn @ step 0")
        bots = await page.locator("#opponent optgroup[label='Bots'] option").all_text_contents()
        assert "nash" in bots and "random" in bots  # the game's bots beside its checkpoints
        await page.select_option("#opponent", "run:kuhn@0")
        await page.select_option("#seat", "1")  # Kuhn poker's first to act: the person moves
        await page.click("#start-button")
        await page.wait_for_url("**/match?id=*")
        first_id = page.url.split("id=")[1]
        await page.wait_for_selector(".card-table")
        assert await _in_view(page, "#board-view .card-table")  # the board first, at 1280x900
        moves = 0
        while True:
            await page.wait_for_selector(
                "#play:not([hidden]) #legal button:not([disabled]), #title .badge.finished"
            )
            if await page.locator("#title .badge.finished").count():
                break
            assert await _in_view(page, "#legal button")  # and the moves beside it
            if moves == 0:
                await shot(page, "play-checkpoint.png")
            await page.locator("#legal button").first.click()
            moves += 1
        assert moves >= 1
        seats = await page.text_content("#seats") or ""
        assert "checkpoint:kuhn@0" in seats and "(you)" in seats
        assert await page.locator(".result-banner").count() == 1
        stored = json.loads((await _api(hub, first_id))[1])
        assert stored["match_info"]["players"] == ["checkpoint:kuhn@0", "human"]
        assert stored["status"] == "finished"
        await shot(page, "play-checkpoint-end.png")

        await page.click("#play-again")  # the same opponent, the same seat, a new match
        await until(lambda: _left(page, first_id))
        await page.locator("#seats .player", has_text="checkpoint:kuhn@0").wait_for()
        second = json.loads((await _api(hub, page.url.split("id=")[1]))[1])
        assert second["match_info"]["players"] == ["checkpoint:kuhn@0", "human"]
        assert page.errors == []

        # The first match rated the checkpoint: the play page shows its rating by its name.
        await recording.flush()
        status, body = await http_get(hub, "/api/ratings?game=KuhnPoker-v0&players=run:kuhn@0")
        rating = json.loads(body)["ratings"]["run:kuhn@0"]
        assert status == 200 and rating["games"] == 1
        await page.goto(hub.url + "play?game=KuhnPoker-v0")
        await until(lambda: _has_text(page, "#opponent option[value='run:kuhn@0']", "rating"))
        label = await page.text_content("#opponent option[value='run:kuhn@0']") or ""
        # step 0 is marked when it is the run's best (the exact exploitability decides
        # between its evaluations at steps 0 and 2)
        from storage.rundir import RunDirectory

        best = RunDirectory(kuhn_runs / "kuhn").best()
        mark = " (best)" if best is not None and best.get("step") == 0 else ""
        assert label == f"kuhn @ step 0{mark} · rating {rating['ordinal']:.1f}"
    finally:
        await hub.close()
        await recording.close()
        await db.close()


async def test_a_person_plays_a_language_model_the_server_offers(
    browser_page: Any, tmp_path: Path
) -> None:
    """``arena serve --fill model:DIR``: the play page lists the model under "Language
    models"; the match against it is recorded under the model's name and weights' hash
    (a tiny model with random weights: it plays invalid moves, which end the game)."""
    from matchmaking.recording import Recording
    from tests.tiny_models import write_tiny_model_dir

    path = write_tiny_model_dir(tmp_path / "tiny-llama", "llama")
    page = browser_page
    db = await open_database(str(tmp_path / "arena.db"))
    hub: WebHub = await serve(db, None, port=0, follow_db=False, fill=[f"model:{path}"])
    recording = await Recording.start(db, hub.bus)
    try:
        await page.goto(hub.url + "play?game=TicTacToe-v0")
        await page.wait_for_selector("#conn.open")
        group = page.locator("#opponent optgroup[label='Language models'] option")
        await group.first.wait_for(state="attached")
        assert await group.all_text_contents() == [f"model:{path}"]
        await page.select_option("#opponent", f"model:{path}")
        await page.select_option("#seat", "0")
        await page.click("#start-button")
        await page.wait_for_url("**/match?id=*")
        match_id = page.url.split("id=")[1]
        for _ in range(5):  # play free cells until the match ends
            await page.wait_for_selector(
                ".board-grid button.cell.playable:not([disabled]), #title .badge.finished"
            )
            if await page.locator("#title .badge.finished").count():
                break
            await page.locator(".board-grid button.cell.playable").first.click()
        await page.wait_for_selector("#title .badge.finished")
        stored = json.loads((await _api(hub, match_id))[1])
        model, human = stored["match_info"]["players"][1], stored["match_info"]["players"][0]
        assert human == "human" and model.startswith("model:tiny-llama@")
        assert stored["status"] == "finished"
        assert page.errors == []
        with pytest.raises(ValueError, match=r"model:smollm2 is not offered here .*--fill"):
            hub.browser.check_game("TicTacToe-v0", "model:smollm2")  # only what it offers
    finally:
        await hub.close()
        await recording.close()
        await db.close()


async def _left(page: Any, match_id: str) -> bool:
    return "/match?id=" in page.url and not page.url.endswith(match_id)


# -- replay keys; the generic board ----------------------------------------------------------


async def _step(page: Any) -> str:
    return (await page.text_content("#step-label") or "").strip()


async def test_one_key_press_is_one_move_in_the_replay_whatever_has_focus(
    browser_page: Any, served: tuple[WebHub, EventBus]
) -> None:
    page = browser_page
    hub, bus = served
    await play_matches("TicTacToe-v0", ["random", "random"], 1, bus=bus)
    (line,) = list(hub.lobby.recent)
    total = line["num_turns"]
    assert total >= 5
    await page.goto(hub.url + f"replay?id={line['id']}")
    await page.wait_for_selector("#moves li[data-step='1']")
    rewards = page.locator("#seats .reward")
    assert await rewards.all_text_contents() == ["", ""]  # no ending given away at the start
    await page.keyboard.press("ArrowRight")  # the page itself has focus
    assert await _step(page) == f"move 1 / {total}"
    await page.locator("#scrubber").focus()  # a focused slider moves by itself too: not twice
    await page.keyboard.press("ArrowRight")
    assert await _step(page) == f"move 2 / {total}"
    await page.keyboard.press("ArrowUp")
    assert await _step(page) == f"move 3 / {total}"
    await page.keyboard.press("ArrowLeft")
    assert await _step(page) == f"move 2 / {total}"
    assert await page.input_value("#scrubber") == "2"
    await page.locator("#forward").focus()
    await page.keyboard.press("ArrowRight")
    assert await _step(page) == f"move 3 / {total}"
    await page.keyboard.press("Enter")  # the focused button's own click: one move
    assert await _step(page) == f"move 4 / {total}"
    assert await rewards.all_text_contents() == ["", ""]
    await page.locator("#back").focus()
    await page.keyboard.press(" ")  # space plays, and does not click Back as well
    assert await page.text_content("#playpause") == "❚❚ pause"
    await page.keyboard.press(" ")
    assert await page.text_content("#playpause") == "▶ play"
    await page.keyboard.press("End")
    assert await _step(page) == f"move {total} / {total}"
    shown = await rewards.all_text_contents()
    stored = json.loads((await _api(hub, line["id"]))[1])["result"]["rewards"]
    assert shown == [f"+{r:g}" if r > 0 else f"{r:g}" for r in stored]  # at the end only
    await page.keyboard.press("Home")
    assert await _step(page) == f"move 0 / {total}"
    assert await rewards.all_text_contents() == ["", ""]
    await shot(page, "web-replay-keys.png")
    assert page.errors == []


async def test_a_game_without_a_board_kit_gets_a_board_of_its_scores_and_state(
    browser_page: Any, served: tuple[WebHub, EventBus], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """The scaffold of ``arena new-game`` (a plugin whose board has only ``extra`` and
    ``to_move``) is drawn as seats and figures with its text, not as an empty table."""
    import importlib
    import sys

    from games.registration import unregister_game
    from games.scaffold import write_package

    page = browser_page
    hub, bus = served
    written = write_package("dice-race", tmp_path, game_id="DiceRace-v0")
    monkeypatch.syspath_prepend(str(written.root / "src"))
    importlib.import_module(f"{written.package}.game")  # registers DiceRace-v0
    try:
        gate = asyncio.Event()
        games = asyncio.create_task(
            play_matches(
                "DiceRace-v0", ["random", "random"], 1, bus=bus, agent_wrapper=paced(0.3, gate)
            )
        )
        await _until_live(hub)
        match_id = hub.live_match_ids()[0]
        await page.goto(hub.url + f"match?id={match_id}")
        await page.wait_for_selector(".scoreboard")
        assert await page.locator(".card-table, .board-grid").count() == 0
        assert await page.locator(".scoreboard .score-seat").count() == 2
        assert await page.text_content(".fact[data-key='target'] .value") == "15"
        assert await page.text_content(".fact[data-key='total'] .value") == "0"
        assert await page.locator(".score-seat.turn").count() == 1  # whose turn it is
        gate.set()
        await until(lambda: _fact_is_not(page, "total", "0"))  # it follows the game live
        assert "Total:" in (await page.text_content("pre.public-state") or "")
        await shot(page, "board-generic.png")
        await page.wait_for_selector("#title .badge.finished")
        await games
        assert await page.text_content(".fact[data-key='total'] .value") == "15"
        assert await page.locator(".score-seat.turn").count() == 0
        assert " wins" in (await page.text_content(".result-banner") or "")
        await shot(page, "board-generic-end.png")
        assert page.errors == []
    finally:
        unregister_game("DiceRace-v0")
        for name in [m for m in sys.modules if m.startswith(written.package)]:
            del sys.modules[name]


async def _fact_is_not(page: Any, key: str, value: str) -> bool:
    return await page.text_content(f".fact[data-key='{key}'] .value") != value


# -- simultaneous moves -------------------------------------------------------------------------


async def _round_seats(page: Any) -> dict[int, str]:
    rows = page.locator("#moves li.round-seat")
    out = {}
    for i in range(await rows.count()):
        row = rows.nth(i)
        out[int(await row.get_attribute("data-seat") or -1)] = (
            await row.locator(".act").text_content() or ""
        )
    return out


async def _has_round(page: Any, expected: dict[int, str]) -> bool:
    """The open round's rows read ``expected`` (seat -> "to move" or "(hidden move)", each
    followed by its round tag)."""
    got = await _round_seats(page)
    return set(got) == set(expected) and all(
        got[seat].startswith(f"{text}round ") for seat, text in expected.items()
    )


async def test_a_goofspiel_from_the_docs_never_shows_a_pending_bid_live(
    browser_page: Any, served: tuple[WebHub, EventBus]
) -> None:
    from games.registration import unregister_game
    from tests.docs_examples import load_doc_game

    page = browser_page
    hub, bus = served
    load_doc_game("browser_mini_goofspiel", '"""MiniGoofspiel-v0')
    gate = asyncio.Event()  # seat 1 bids once it is set; seat 0 at once
    try:
        games = asyncio.create_task(
            play_matches(
                "MiniGoofspiel-v0",
                ["random", "random"],
                1,
                bus=bus,
                agent_wrapper=lambda seat, agent: Paced(agent, 0.0, gate if seat == 1 else None),
            )
        )
        await _until_live(hub)
        match_id = hub.live_match_ids()[0]
        await page.goto(hub.url + f"match?id={match_id}")
        # Seat 0 has bid, seat 1 has not: the page says who, never what.
        await page.wait_for_selector("#moves li.round-seat")
        await until(lambda: _has_round(page, {0: "(hidden move)", 1: "to move"}))
        assert await page.locator("#moves li:not(.hidden)").count() == 0
        assert await page.locator(".table-seat[data-seat='0'] .moved").count() == 1
        assert await page.locator(".table-seat[data-seat='1'] .to-move").count() == 1
        snapshot = json.loads((await _api(hub, match_id))[1])
        assert snapshot["turns"] == [] and snapshot["round"]["moved"] == [0]
        assert snapshot["board"] == snapshot["match_info"]["start_board"]  # no bid on it
        await shot(page, "goofspiel-docs-pending-bid.png")
        gate.set()
        await page.wait_for_selector("#title .badge.finished")
        await games
        assert await page.locator("#moves li[data-index]").count() == 10  # 5 rounds, 2 bids
        assert page.errors == []
    finally:
        unregister_game("MiniGoofspiel-v0")


async def test_goofspiel_with_three_and_four_seats_live_and_in_the_replay(
    browser_page: Any, served: tuple[WebHub, EventBus]
) -> None:
    page = browser_page
    hub, bus = served
    for players in (["match", "random", "random"], ["match", "random", "match", "random"]):
        moves_left = asyncio.Semaphore(0)
        asked = dict.fromkeys(range(len(players)), "to move")
        games = asyncio.create_task(
            play_matches("Goofspiel-v0", players, 1, bus=bus, agent_wrapper=stepped(moves_left))
        )
        await _until_live(hub)
        match_id = hub.live_match_ids()[0]
        await page.goto(hub.url + f"match?id={match_id}")
        await page.wait_for_selector(".card-table")
        assert await page.locator(".card-table .table-seat").count() == len(players)
        # Every seat is asked at once; nobody has bid yet.
        await until(lambda a=asked: _has_round(page, a))  # type: ignore[misc]
        assert await page.locator(".card-table .to-move").count() == len(players)
        allow(moves_left, len(players))  # the first round, and no more
        await page.wait_for_selector("#moves li[data-index] .tag")
        first = await page.locator("#moves li[data-index]").first.text_content() or ""
        assert "round 1" in first and "(hidden move)" not in first  # revealed with its round
        await until(lambda a=asked: _has_round(page, a))  # type: ignore[misc]  # round 2 open
        assert await page.locator("#moves li[data-index]").count() == len(players)
        await shot(page, f"goofspiel-{len(players)}-live.png")
        allow(moves_left, 13 * len(players))
        await page.wait_for_selector("#title .badge.finished")
        await games
        assert await page.locator("#moves li[data-index]").count() == 13 * len(players)
        snapshot = json.loads((await _api(hub, match_id))[1])
        assert snapshot["status"] == "finished"

        await page.click("#replay-link")
        await page.wait_for_url("**/replay?id=*")
        await page.wait_for_selector(".card-table")
        total = 13 * len(players)
        assert (await page.text_content("#step-label") or "").strip() == f"move 0 / {total}"
        await page.locator("#scrubber").fill(str(len(players)))  # after the first round
        turns = snapshot["turns"]
        last = turns[len(players) - 1]["board"]
        history = await page.text_content(".card-table .history li.last") or ""
        assert history == last["history"][-1] and history.startswith("R1 prize")
        await shot(page, f"goofspiel-{len(players)}-replay.png")
    assert page.errors == []


async def test_a_person_plays_goofspiel_against_its_bot_in_the_browser(
    browser_page: Any, served: tuple[WebHub, EventBus]
) -> None:
    page = browser_page
    hub, _bus = served
    await start_from_play_page(page, hub, "Goofspiel-v0", "match")
    for bid in range(13):
        await page.wait_for_selector("#play:not([hidden]) #legal button:not([disabled])")
        if bid == 0:
            # The bot bid at once: it has moved, what it bid is not shown.
            await until(lambda: _has_round(page, {0: "to move", 1: "(hidden move)"}))
            await shot(page, "goofspiel-play.png")
        buttons = page.locator("#legal button")
        assert await buttons.count() == 13 - bid
        await buttons.first.click()
        await page.wait_for_selector(f"#moves li[data-index='{2 * bid + 1}']")
    await page.wait_for_selector("#title .badge.finished")
    assert "(you)" in (await page.text_content("#seats") or "")
    assert page.errors == []


async def test_the_run_page_charts_the_steps_kl_the_magnets_and_the_entropy_per_answer(
    browser_page: Any, tmp_path: Path
) -> None:
    """The exact KL's figures (``trainer.step.exact_kl_metrics``) each on a chart of
    their own, named for what they measure."""
    page = browser_page
    run_dir = tmp_path / "runs" / "magnet"
    run_dir.mkdir(parents=True)
    rows = [
        {"step": s, "optim/loss": 0.1, "policy/step_kl": 0.01 / (s + 1), "kl/reverse": 0.02 * s,
         "kl/forward": 0.03 * s, "policy/answer_entropy": 0.6, "policy/guard_scale": 1.0}
        for s in range(5)
    ]  # fmt: skip
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    hub: WebHub = await serve(None, None, port=0, poll_interval_s=0.1,
                              run_sources=[str(tmp_path / "runs" / "*")])  # fmt: skip
    try:

        async def read_whole() -> bool:
            return await _run_rows(hub, "magnet") >= 5

        await until(read_whole)
        await page.goto(hub.url + "run?name=magnet")
        await page.wait_for_selector(".chart[data-keys] canvas")
        expected = {
            "How far each step moved the policy": ["policy/step_kl"],
            "Exact KL to the magnet": ["kl/forward", "kl/reverse"],
            "Entropy per answer": ["policy/answer_entropy", "policy/guard_scale"],
        }
        for title, keys in expected.items():
            chart = page.locator(f".chart[data-title^='{title}']")
            assert await chart.count() == 1, title
            assert sorted(json.loads(await chart.get_attribute("data-keys") or "[]")) == keys
        assert page.errors == []
    finally:
        await hub.close()


def smollm2_rows(steps: range, off_policy: float = 0.0) -> list[dict[str, float]]:
    """Rows shaped like a SmolLM2 run's (self-play on tic-tac-toe, the local backend): its
    invalid answers fall and its games grow longer, while the self-play reward stays 0 and
    no step is off-policy."""
    out = []
    for step in steps:
        invalid = max(0.05, 0.9 - 0.15 * step)
        env = {
            "invalid_per_answer": invalid, "invalid_moves": 0.5 * invalid / 0.9,
            "turns": 1.0 + 0.8 * step, "win": 0.5 - 0.02 * step, "draw": 0.04 * step,
            "loss": 0.5 - 0.02 * step, "score": 0.5, "reward/total": 0.0, "aborted": 0.0,
            "forfeit": 0.5 * invalid, "opponent_forfeit": 0.5 * invalid, "truncated": 0.0,
        }  # fmt: skip
        row: dict[str, float] = {"step": step}
        for tag in ("all", "TicTacToe-v0"):
            row |= {f"env/{tag}/{k}": v for k, v in env.items()}
        row |= {
            "env/all/aborted_games": 0.0, "env/all/failed_groups": 0.0, "env/all/workers_lost": 0.0,
            "env/all/constant_reward_groups": float(step % 3),
            "league/bot_share": 0.2, "league/past_share": 0.3, "league/collapse": 0.0,
            "league/pool_size": 1.0, "league/self_play_seat0_score": 0.5 + 0.05 * (step % 2),
            "optim/loss": 0.1 / (step + 1), "optim/lr": 0.001, "optim/datums": 16.0,
            "optim/entropy": 3.2 - 0.3 * step, "advantage/move_1/std": 0.0,
            "time/rollout": 10.0 + step, "time/train": 6.5 + 0.1 * step, "time/eval": 0.0,
            "time/total": 16.5 + 1.1 * step, "time/rollout_games": 9.9 + step,
            "train/off_policy_steps": off_policy,
            "sampler/tokens_computed": 4000.0 - 300 * step, "sampler/tokens_reused": 300.0 * step,
            "train/tokens_computed": 5000.0, "train/tokens_reused": 100.0 * step,
            "train/taught": float(step % 3 != 0), "train/steps_taught": float(step - step // 3),
        }  # fmt: skip
        out.append(row)
    return out


async def _y_range(page: Any, selector: str) -> list[float]:
    await until(lambda: _has_attribute(page, selector, "data-y-range"))
    return json.loads(await page.locator(selector).get_attribute("data-y-range") or "[]")


async def _has_attribute(page: Any, selector: str, name: str) -> bool:
    chart = page.locator(selector)
    return await chart.count() == 1 and await chart.get_attribute(name) is not None


async def test_a_real_models_run_page_puts_learning_first_and_folds_what_never_changes(
    browser_page: Any, tmp_path: Path
) -> None:
    page = browser_page
    run_dir = tmp_path / "runs" / "smol"
    run_dir.mkdir(parents=True)
    metrics = run_dir / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(r) + "\n" for r in smollm2_rows(range(6))))
    hub: WebHub = await serve(None, None, port=0, poll_interval_s=0.1,
                              run_sources=[str(tmp_path / "runs" / "*")])  # fmt: skip
    try:

        async def read_whole() -> bool:
            return await _run_rows(hub, "smol") >= 6

        await until(read_whole)
        await page.goto(hub.url + "run?name=smol")
        await page.wait_for_selector("#charts .chart[data-keys] canvas")
        shown = await page.locator("#charts > .chart").all()  # the learning charts, unfolded
        titles = [await c.get_attribute("data-title") for c in shown]
        assert (titles[0] or "").startswith("Invalid answers per answer (training games;")
        assert titles[1] == "Turns per game (training games)"
        assert titles[2] == WINS_TITLE
        keys = json.loads(await shown[0].get_attribute("data-keys") or "")
        assert keys == ["env/all/invalid_per_answer"]  # one game: env/all draws it
        assert "Tokens computed per step" in titles and "Steps that taught" in titles
        assert "Time per step (s): sampling and training" in titles
        dropped = next(t for t in titles if (t or "").startswith("Dropped per step"))
        assert dropped not in titles[:3]  # the dropped groups apart from invalid answers, turns

        # What never changed is folded away: the self-play reward, the off-policy steps.
        fold = page.locator("#learning-constant")
        assert await fold.is_visible() and await fold.get_attribute("open") is None
        reward = "#learning-constant .chart[data-title='Reward (training games)']"
        assert await page.locator(reward).get_attribute("data-constant") == "true"
        off_policy = ".chart[data-keys*='train/off_policy_steps']"
        assert await page.locator(f"details.constant-charts {off_policy}").count() == 1
        assert "Reward (training games)" not in titles
        assert "constant (folded)" in (await page.text_content("#chart-count") or "")

        # Each axis fits its values: turns 1-5 and counts 0-2 are not drawn on 0-100.
        low, high = await _y_range(page, ".chart[data-title='Turns per game (training games)']")
        assert 0 <= low <= 1 and 5 <= high <= 6
        low, high = await _y_range(page, f".chart[data-title='{dropped}']")
        assert low == 0 and 2 <= high <= 3
        assert await _y_range(page, reward) == [0, 1]  # all zero: not 0-100
        invalid = f".chart[data-title='{titles[0]}']"
        assert await _y_range(page, invalid) == [0, 1]  # a share keeps [0, 1]
        taught = page.locator(".chart[data-title='Steps that taught']")
        assert await taught.locator(".u-axis").count() == 3  # the step, the count, the 0/1
        await fold.locator("summary").click()  # opened, its plots take their cards' width
        card = await page.locator(reward).bounding_box()
        plot = await page.locator(f"{reward} .uplot").bounding_box()
        assert card is not None and plot is not None and plot["width"] >= card["width"] - 40
        await shot(page, "run-smollm2.png")

        # The file grows: the off-policy steps start to change, and their chart unfolds.
        with metrics.open("a") as f:
            f.writelines(json.dumps(r) + "\n" for r in smollm2_rows(range(6, 8), off_policy=1.0))
        await until(lambda: _has_text(page, "#facts .steps", "8 logged"))

        async def unfolded() -> bool:
            return await page.locator(f"details.constant-charts {off_policy}").count() == 0

        await until(unfolded)
        assert await page.locator(off_policy).get_attribute("data-constant") is None
        assert await page.locator(reward).count() == 1  # the reward is still all zero
        assert page.errors == []
    finally:
        await hub.close()
