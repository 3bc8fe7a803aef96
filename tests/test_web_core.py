"""The web server's sans-I/O core (``web.core``, ``web.pages.api``): frames and requests in,
frames and answers out, no sockets, no database, no clock."""

from __future__ import annotations

import json
from dataclasses import replace
from http import HTTPStatus
from typing import Any

import pytest
from websockets.http11 import Response

from arena.events import MatchEnded, MatchStarted, RoundProgress, Turn, TurnPlayed
from arena.seats import SeatTurn
from storage import MatchDetail, MatchSummary
from storage.queries import SeatSummary
from web.connections import Client
from web.core import HubCore, Need, StartedMatch
from web.limits import ServerLimits
from web.pages.api import HttpApi
from web.pages.hosts import HostCheck
from web.protocol import moves_are_public

HOST = {"Host": "127.0.0.1:8765"}


def make_core(**limits: Any) -> HubCore:
    return HubCore(
        ServerLimits(**limits),
        moves_public=moves_are_public,
        host_check=HostCheck("127.0.0.1"),
        has_db=True,
    )


def frames_for(core: HubCore, client: Client) -> list[dict[str, Any]]:
    """Every frame the core produced for ``client`` (others' are dropped), decoded."""
    out = []
    for clients, frame in core.take_frames():
        frame.encode("utf-8")  # every frame must be encodable
        if client in clients:
            out.append(json.loads(frame))
    return out


def connected(core: HubCore, address: str = "10.0.0.1") -> Client:
    client = Client(address, 1000.0, 1000, 0.0)
    core.connect(client)
    assert frames_for(core, client)[0]["type"] == "hello"
    return client


def send(core: HubCore, client: Client, message: dict[str, Any] | str) -> Any:
    frame = message if isinstance(message, str) else json.dumps(message)
    return core.receive(client, frame, 0.0)


def play(core: HubCore, match_id: str, game_id: str, actions: list[tuple[str, str]]) -> None:
    """A whole match through the core, as bus events."""
    core.event(MatchStarted(match_id, game_id, 7, 2, ("random", "random")))
    for i, (action, move) in enumerate(actions):
        core.event(TurnPlayed(match_id, i, i % 2, f"obs {i}", action, True, move=move))
    core.event(
        MatchEnded(match_id, "finished", (1.0, -1.0), (0, 0), (), "seat 0 won", len(actions))
    )


def stored(match_id: str, game_id: str, actions: list[str]) -> MatchDetail:
    """The same match as the database gives it back."""
    seats = tuple(SeatSummary(s, "random", "bot", r, 1, 0, False) for s, r in ((0, 1.0), (1, -1.0)))
    summary = MatchSummary(
        match_id, game_id, "finished", "seat 0 won", 7, 2, len(actions), 1.0, 2.0, None, None, seats
    )
    turns = tuple(
        Turn(
            index=i,
            seat=i % 2,
            observation=f"obs {i}",
            action=a,
            valid=True,
            reason=None,
            truncated=False,
            time=1.0,
            move=a,
        )
        for i, a in enumerate(actions)
    )
    return MatchDetail(summary, turns, None, "final")


# -- encodable frames ----------------------------------------------------------------------------


def test_a_lone_surrogate_in_a_request_id_is_answered_with_an_encodable_frame() -> None:
    core = make_core()
    client = connected(core)
    assert send(core, client, '{"type": "ping", "id": "\\ud800"}') is None
    pong = frames_for(core, client)
    assert pong[0]["type"] == "pong" and pong[0]["ref"] == "\ufffd"
    send(core, client, '{"type": "subscribe", "stream": "match", "match_id": 3, "id": "\\udc80"}')
    refused = frames_for(core, client)
    assert refused[0]["code"] == "bad_message" and refused[0]["ref"] == "\ufffd"


# -- time is given ------------------------------------------------------------------------------


def test_the_times_the_core_shows_come_from_its_wall_clock() -> None:
    """The core reads no clock of its own: a pong's time, a prompt's and an end's (when the
    source gives none) come from the ``wall_clock`` it was built with."""
    now = [1_700_000_000.0]
    core = HubCore(
        ServerLimits(),
        moves_public=moves_are_public,
        host_check=HostCheck("127.0.0.1"),
        wall_clock=lambda: now[0],
    )
    client = connected(core)
    send(core, client, {"type": "ping", "id": 1})
    assert frames_for(core, client) == [{"type": "pong", "ref": 1, "time": 1_700_000_000.0}]
    core.event(MatchStarted("m1", "TicTacToe-v0", 7, 2, ("human", "random")))
    send(core, client, {"type": "subscribe", "stream": "match", "match_id": "m1"})
    frames_for(core, client)
    now[0] += 2.5
    turn = SeatTurn(seat=0, messages=[], new_from=0, legal_moves=["[4]"], turn_index=0)
    core.prompt("m1", 0, turn, deadline=now[0] + 60)
    (waiting,) = frames_for(core, client)
    assert waiting["kind"] == "waiting" and waiting["t"] == 1_700_000_002.5
    now[0] += 1.0
    core.bus_dropped()  # no database to follow it from: the match is lost, at the given time
    (ended,) = frames_for(core, client)
    assert ended["kind"] == "ended" and ended["t"] == 1_700_000_003.5
    assert ended["result"]["status"] == "aborted"


# -- resume after the ended cache let a match go ------------------------------------------------


def test_a_match_read_back_from_the_database_is_never_resumed_from_old_versions() -> None:
    core = make_core(ended_cache=1)
    client = connected(core)
    actions = [(f"[{i}]", f"[{i}]") for i in range(55)]
    play(core, "old", "TicTacToe-v0", actions)
    stream = core.stream("old")
    assert stream is not None and stream.version == 57
    play(core, "newer", "TicTacToe-v0", actions[:1])  # the cache keeps one: "old" goes
    assert core.stream("old") is None
    need = send(
        core,
        client,
        {"type": "subscribe", "stream": "match", "match_id": "old", "since": 2,
         "epoch": core.epoch, "id": 1},
    )  # fmt: skip
    assert isinstance(need, Need) and need.kind == "get_match"
    assert need.then(stored("old", "TicTacToe-v0", [a for a, _ in actions])) is None
    answer = frames_for(core, client)
    # Its versions were numbered afresh (v = 2): a resume would send nothing; a snapshot
    # tells the client it ended.
    assert answer[0]["type"] == "snapshot" and answer[0]["resync"] is True
    assert answer[0]["status"] == "finished" and len(answer[0]["turns"]) == 55
    send(
        core,
        client,
        {"type": "subscribe", "stream": "match", "match_id": "old", "since": answer[0]["v"],
         "epoch": core.epoch, "id": 2},
    )  # fmt: skip
    again = frames_for(core, client)
    assert again[0]["type"] == "snapshot" and again[0]["resync"] is True


# -- live spectators see the parsed move ---------------------------------------------------------


def test_spectators_of_a_live_match_see_the_parsed_move_not_the_seats_text() -> None:
    core = make_core()
    client = connected(core)
    core.event(MatchStarted("kp", "KuhnPoker-v0", 7, 2, ("learner", "learner")))
    send(core, client, {"type": "subscribe", "stream": "match", "match_id": "kp"})
    frames_for(core, client)
    thinking = "Thinking: Your card is: 'J' so [check]"
    core.event(TurnPlayed("kp", 0, 1, "Your card is: 'J'", thinking, True, move="[check]"))
    live = frames_for(core, client)
    assert live[0]["turn"]["action"] == "[check]"
    assert "Your card" not in json.dumps(live)
    core.event(MatchEnded("kp", "finished", (1.0, -1.0), (0, 0), (), "", 1))
    reveal = frames_for(core, client)[0]["reveal"]["turns"][0]
    assert reveal["action"] == thinking and reveal["move"] == "[check]"  # after the end


def test_a_move_shown_to_single_seats_is_hidden_even_in_a_game_registered_public() -> None:
    core = make_core()
    client = connected(core)
    core.event(MatchStarted("tt", "TicTacToe-v0", 7, 2, ("random", "random")))
    send(core, client, {"type": "subscribe", "stream": "match", "match_id": "tt"})
    frames_for(core, client)
    core.event(TurnPlayed("tt", 0, 0, "", "[4]", True, move="[4]", private=True))
    core.event(TurnPlayed("tt", 1, 1, "", "[0]", True, move="[0]"))
    turns = [f["turn"] for f in frames_for(core, client)]
    assert [(t["action"], t["hidden"]) for t in turns] == [(None, True), ("[0]", False)]


def test_a_simultaneous_round_shows_who_has_moved_then_its_moves_together() -> None:
    core = make_core()
    client = connected(core)
    core.event(MatchStarted("gs", "Goofspiel-v0", 7, 2, ("random", "random")))
    send(core, client, {"type": "subscribe", "stream": "match", "match_id": "gs"})
    frames_for(core, client)
    core.event(RoundProgress("gs", 1, (0, 1)))
    core.event(RoundProgress("gs", 1, (0, 1), (1,)))
    progress = frames_for(core, client)
    assert [(f["kind"], f["moved"]) for f in progress] == [("round", []), ("round", [1])]
    api = HttpApi(core)
    live = json.loads(answer(api, "/api/matches/gs").body)
    assert live["turns"] == [] and live["round"] == {"round": 1, "movers": [0, 1], "moved": [1]}
    core.event(TurnPlayed("gs", 0, 0, "", "[5]", True, move="[5]", round=1))
    core.event(TurnPlayed("gs", 1, 1, "", "[9]", True, move="[9]", round=1))
    turns = [f["turn"] for f in frames_for(core, client)]
    assert [(t["seat"], t["action"], t["round"]) for t in turns] == [(0, "[5]", 1), (1, "[9]", 1)]
    assert json.loads(answer(api, "/api/matches/gs").body)["round"] is None


# -- browser matches: no one client takes every slot --------------------------------------------


def start(core: HubCore, client: Client, n: int) -> dict[str, Any]:
    """A start_match request, its game built at once; the answer."""
    need = send(core, client, {"type": "start_match", "game": "TicTacToe-v0", "id": n})
    if isinstance(need, Need):
        need.then(StartedMatch(f"m{client.id}-{n}", handle=None, is_over=lambda: False))  # type: ignore[arg-type]
    return frames_for(core, client)[-1]


def test_browser_matches_are_capped_per_connection_per_address_and_in_all() -> None:
    core = make_core(
        max_human_matches=5, max_human_matches_per_connection=2, max_human_matches_per_address=3
    )
    first, second = connected(core, "10.0.0.1"), connected(core, "10.0.0.1")
    assert [start(core, first, i)["type"] for i in range(2)] == ["match_created"] * 2
    refused = start(core, first, 2)
    assert refused["code"] == "too_many_matches" and "this connection" in refused["message"]
    assert start(core, second, 0)["type"] == "match_created"
    refused = start(core, second, 1)
    assert refused["code"] == "too_many_matches" and "your address" in refused["message"]
    others = [connected(core, f"10.0.0.{n}") for n in (2, 3)]
    assert start(core, others[0], 0)["type"] == "match_created"
    assert start(core, others[0], 1)["type"] == "match_created"  # 5 in all now
    refused = start(core, others[1], 0)
    assert refused["code"] == "too_many_matches" and "in all" in refused["message"]


def test_a_slot_is_taken_while_the_game_is_being_built() -> None:
    core = make_core(max_human_matches_per_connection=1)
    client = connected(core)
    pending = send(core, client, {"type": "start_match", "game": "TicTacToe-v0"})
    assert isinstance(pending, Need)
    assert start(core, client, 1)["code"] == "too_many_matches"  # the first is not built yet
    pending.then(RuntimeError("the game broke"))
    assert frames_for(core, client)[-1]["code"] == "bad_game"
    assert start(core, client, 2)["type"] == "match_created"  # the failed one freed its slot


# -- HTTP: hosts, methods and parameters ---------------------------------------------------------


def answer(api: HttpApi, target: str, method: str = "GET", **headers: str) -> Response:
    result = api.answer(method, target, {**HOST, **headers})
    while isinstance(result, Need):
        result = result.then([])
    assert isinstance(result, Response)
    return result


@pytest.mark.parametrize(
    "query",
    [
        "offset=99999999999999999999",
        "offset=-1",
        "offset=1e3",
        "offset=%205",
        "limit=0",
        "limit=1001",
        "limit=abc",
        "limit=1_0",
        "status=bogus",
        "game=" + "x" * 200,
    ],
)
def test_every_numeric_and_text_parameter_is_checked(query: str) -> None:
    response = answer(HttpApi(make_core()), f"/api/matches?{query}")
    body = json.loads(response.body)
    assert response.status_code == HTTPStatus.BAD_REQUEST and body["error"] == "bad_request"
    assert body["message"]


def test_good_parameters_reach_the_database_query() -> None:
    need = HttpApi(make_core()).answer("GET", "/api/matches?limit=1000&offset=1000000000", HOST)
    assert isinstance(need, Need) and need.kind == "list_matches"
    assert need.args["limit"] == 1000 and need.args["offset"] == 1_000_000_000


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "HEAD", "OPTIONS"])
def test_other_methods_get_405_with_allow(method: str) -> None:
    response = answer(HttpApi(make_core()), "/api/matches", method)
    assert response.status_code == HTTPStatus.METHOD_NOT_ALLOWED
    assert response.headers["Allow"] == "GET"


@pytest.mark.parametrize(
    ("host", "allowed", "status"),
    [
        ("127.0.0.1:8765", (), 200),
        ("localhost:8765", (), 200),
        ("[::1]:8765", (), 200),
        ("evil.example", (), 403),
        ("evil.example:8765", (), 403),
        ("arena.lan:8765", ("arena.lan",), 200),
        ("", (), 403),
    ],
)
def test_the_host_header_must_name_this_server(
    host: str, allowed: tuple[str, ...], status: int
) -> None:
    core = make_core()
    core.host_check = HostCheck("127.0.0.1", allowed)
    response = answer(HttpApi(core), "/api/status", Host=host)
    assert response.status_code == status


def test_a_websocket_from_another_origin_is_refused() -> None:
    api = HttpApi(make_core())
    upgrade = {"Upgrade": "websocket"}
    assert api.answer("GET", "/ws", {**HOST, **upgrade}) is None  # a script: no Origin
    same = api.answer("GET", "/ws", {**HOST, **upgrade, "Origin": "http://127.0.0.1:8765"})
    assert same is None
    for origin in ("http://evil.example", "null", "file://x", "http://evil.example:8765"):
        refused = api.answer("GET", "/ws", {**HOST, **upgrade, "Origin": origin})
        assert isinstance(refused, Response) and refused.status_code == 403


# -- boards ----------------------------------------------------------------------------------------

FACE_DOWN = {
    "kind": "cards",
    "pot": 2.0,
    "chips": {"0": -1.0, "1": -1.0},
    "face_down": {"0": 1, "1": 1},
}


def _faces(k: str, j: str) -> dict[str, Any]:
    public = {key: value for key, value in FACE_DOWN.items() if key != "face_down"}
    return {**public, "cards": {"seat 0": [k], "seat 1": [j]}}


def test_boards_go_out_public_while_live_and_in_full_once_the_match_ended() -> None:
    core = make_core()
    client = connected(core)
    core.event(
        MatchStarted(
            "kb", "KuhnPoker-v0", 7, 2, ("random", "random"), board=FACE_DOWN,
            full_board=_faces("K", "J"),
        )
    )  # fmt: skip
    send(core, client, {"type": "subscribe", "stream": "match", "match_id": "kb"})
    snapshot = frames_for(core, client)[0]
    assert snapshot["board"] == FACE_DOWN and snapshot["match_info"]["start_board"] == FACE_DOWN
    bet = {**FACE_DOWN, "history": ["Player 1: bet"]}
    core.event(
        TurnPlayed(
            "kb", 0, 1, "Your card is: 'J'", "[bet]", True, move="[bet]", board=bet,
            full_board={**_faces("K", "J"), "history": ["Player 1: bet"]},
        )
    )  # fmt: skip
    live = frames_for(core, client)
    assert live[0]["turn"]["board"] == bet and "full_board" not in live[0]["turn"]
    late = connected(core, "10.0.0.2")  # a snapshot taken while live: public boards only
    send(core, late, {"type": "subscribe", "stream": "match", "match_id": "kb"})
    snapshot = frames_for(core, late)[0]
    assert snapshot["board"] == bet and [t["board"] for t in snapshot["turns"]] == [bet]
    text = json.dumps([live, snapshot])
    assert '"seat 0"' not in text and "full_board" not in text and "start_full_board" not in text
    core.event(MatchEnded("kb", "finished", (1.0, -1.0), (0, 0), (), "", 1))
    reveal = frames_for(core, client)[0]["reveal"]
    assert reveal["start_full_board"]["cards"] == {"seat 0": ["K"], "seat 1": ["J"]}
    assert reveal["turns"][0]["board"] == bet
    assert reveal["turns"][0]["full_board"]["cards"] == {"seat 0": ["K"], "seat 1": ["J"]}
    send(core, late, {"type": "subscribe", "stream": "match", "match_id": "kb"})
    ended = frames_for(core, late)[0]
    assert ended["audience"] == "full" and ended["board"]["cards"]["seat 1"] == ["J"]
    assert ended["match_info"]["start_full_board"]["cards"]["seat 0"] == ["K"]


def test_a_stored_match_is_replayed_with_its_boards() -> None:
    core = make_core()
    client = connected(core)
    grids = [[["O", "", ""]], [["O", "X", ""]]]
    detail = stored("ttt", "TicTacToe-v0", ["[0]", "[1]"])
    turns = tuple(
        replace(t, board={"kind": "grid", "grid": grid})
        for t, grid in zip(detail.turns, grids, strict=True)
    )
    start = {"kind": "grid", "grid": [["", "", ""]]}
    detail = replace(detail, turns=turns, start_board=start)
    need = send(core, client, {"type": "subscribe", "stream": "match", "match_id": "ttt"})
    assert isinstance(need, Need) and need.then(detail) is None
    snapshot = frames_for(core, client)[0]
    assert snapshot["match_info"]["start_board"] == start
    assert [t["board"]["grid"] for t in snapshot["turns"]] == grids
    assert [t["full_board"] for t in snapshot["turns"]] == [None, None]  # nothing hidden
    assert snapshot["board"]["grid"] == grids[-1]  # the final board: the last turn's


def test_whether_moves_are_public_is_the_games_answer_and_unknown_games_hide_them() -> None:
    assert moves_are_public("KuhnPoker-v0")  # hidden cards, public bets
    assert moves_are_public("TicTacToe-v0")
    assert not moves_are_public("GameOfPureStrategy-v0")  # secret bids
    assert not moves_are_public("NoSuchGame-v0")  # games.moves_are_public raises UnknownGame


def test_ratings_streams_count_against_the_subscription_limit() -> None:
    core = make_core(max_subscriptions=2)
    client = connected(core)
    for game in ("TicTacToe-v0", "ConnectFour-v0"):
        need = send(core, client, {"type": "subscribe", "stream": "ratings", "game": game})
        assert isinstance(need, Need) and need.kind == "load_ratings"
        need.then({})
    assert [f["type"] for f in frames_for(core, client)] == ["ratings", "ratings"]
    send(core, client, {"type": "subscribe", "stream": "ratings", "game": "KuhnPoker-v0"})
    (refused,) = frames_for(core, client)
    assert refused["code"] == "too_many_subscriptions"
    send(core, client, {"type": "unsubscribe", "stream": "ratings", "game": "ConnectFour-v0"})
    assert frames_for(core, client)[0]["type"] == "unsubscribed"
    need = send(core, client, {"type": "subscribe", "stream": "ratings", "game": "KuhnPoker-v0"})
    assert isinstance(need, Need)  # room again
