"""The agent desk, sans I/O: requests and time in, frames, needs and forfeits out."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from arena.events import RatingsChanged
from arena.seats import SeatTurn
from games.api import GAME, GameMessage, MessageKind
from matchmaking.seek import MatchmakerConfig
from web.agents.agentdesk import Account, AgentDesk, PendingMatch
from web.connections import Client
from web.limits import ServerLimits
from web.live.human import SeatNotWaiting
from web.needs import Need
from web.protocol import ProtocolError, parse_request


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class FakeSeat:
    """A prompted seat: waits when given a turn."""

    def __init__(self) -> None:
        self.turn: SeatTurn | None = None
        self.deadline: float | None = None
        self.moves: list[str] = []

    @property
    def waiting(self) -> bool:
        return self.turn is not None

    def submit(self, text: str) -> int:
        if self.turn is None:
            raise SeatNotWaiting("not waiting")
        self.moves.append(text)
        index = self.turn.turn_index
        self.turn = None
        return index


def check_game(game_id: str, players: int | None, person: bool) -> int:
    if game_id not in ("TicTacToe-v0", "LowestUnique-v0"):
        raise ValueError(f"unknown game {game_id!r}")
    return players or 2


class Desk:
    """A desk with fake clocks (monotonic and Unix time) and its frames per client."""

    def __init__(self, limits: ServerLimits | None = None, **kwargs: Any) -> None:
        self.clock = Clock()
        self.wall = Clock()
        self.wall.now = 1_700_000_000.0
        self.frames: dict[int, list[dict[str, Any]]] = {}
        self.desk = AgentDesk(
            limits or ServerLimits(),
            send=lambda c, m: self.frames.setdefault(c.id, []).append(json.loads(json.dumps(m))),
            check_game=check_game,
            matchmaker=kwargs.pop("matchmaker", MatchmakerConfig(fill_after_s=None)),
            clock=self.clock,
            wall_clock=self.wall,
            seed=0,
            **kwargs,
        )

    def client(self, address: str = "10.0.0.1") -> Client:
        return Client(address, 20.0, 40, 0.0)

    def send(self, client: Client, message: dict[str, Any]) -> Need | None:
        request = parse_request(json.dumps(message))
        if request.type == "move":
            self.frames.setdefault(client.id, []).append(
                self.desk.move(client, request, message["text"])
            )
            return None
        return self.desk.receive(client, request)

    def error(self, client: Client, message: dict[str, Any]) -> ProtocolError:
        with pytest.raises(ProtocolError) as info:
            need = self.send(client, message)
            while isinstance(need, Need):  # a failing continuation raises too
                need = need.then(None)
        return info.value

    def auth(self, client: Client, name: str, **extra: Any) -> None:
        need = self.send(client, {"type": "auth", "token": f"token-of-{name}", **extra})
        assert isinstance(need, Need) and need.kind == "authenticate"
        assert need.then(Account(name)) is None

    def seek(self, client: Client, **fields: Any) -> str:
        need = self.send(client, {"type": "seek", "game": "TicTacToe-v0", "id": 7, **fields})
        if isinstance(need, Need):
            assert need.kind == "load_ratings"
            need.then({})
        return str(self.last(client, "seeking")["seek"])

    def last(self, client: Client, kind: str) -> dict[str, Any]:
        found = [f for f in self.frames.get(client.id, []) if f["type"] == kind]
        assert found, f"no {kind} frame for {client}: {self.frames.get(client.id)}"
        return found[-1]

    def kinds(self, client: Client) -> list[str]:
        return [f["type"] for f in self.frames.get(client.id, [])]


def alice_and_bob(d: Desk) -> tuple[Client, Client]:
    """Two connections, authenticated as agents alice and bob."""
    a, b = d.client(), d.client()
    d.auth(a, "alice")
    d.auth(b, "bob")
    return a, b


def pair(d: Desk, a: Client, b: Client) -> tuple[PendingMatch, dict[int, FakeSeat]]:
    d.seek(a)
    d.seek(b)
    work = d.desk.tick()
    (pending,) = work.start
    players = [p.player for p in pending.seats]
    handles = {p.seat: FakeSeat() for p in pending.seats}
    d.desk.started(pending, players, handles)
    assert "paired" not in d.kinds(a)  # not before the core has seen the match start
    d.desk.announced(pending.match_id)
    return pending, handles


def turn(index: int, messages: list[GameMessage], new_from: int, seat: int) -> SeatTurn:
    return SeatTurn(seat, messages, new_from, ["[1]", "[2]"], index)


def seat_of(d: Desk, pending: PendingMatch, name: str) -> int:
    return next(p.seat for p in pending.seats if p.player == f"agent:{name}")


# -- authentication ---------------------------------------------------------------------------


def test_auth_answers_authenticated_and_raises_the_rate_limit() -> None:
    d = Desk()
    c = d.client()
    d.auth(c, "alice")
    answer = d.last(c, "authenticated")
    assert answer["agent"] == "agent:alice" and answer["agent_protocol"] == 1
    assert c.rate_per_s == ServerLimits().agent_rate_per_s
    assert d.desk.account_of(c) == Account("alice")
    assert d.error(c, {"type": "auth", "token": "x"}).code == "bad_message"  # already


def test_a_refused_token_gets_unauthorized_and_failures_are_rate_limited(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    limits = ServerLimits(auth_failure_burst=3, auth_failure_refill_s=10.0)
    d = Desk(limits)
    c = d.client()
    for _ in range(3):
        need = d.send(c, {"type": "auth", "token": "arena_secret-guess"})
        assert isinstance(need, Need)
        assert "secret-guess" not in repr(need) and "secret-guess" not in str(need.args)
        with pytest.raises(ProtocolError) as info:
            need.then(None)
        assert info.value.code == "unauthorized" and "revoked" in info.value.message
    # the address has used its tries: refused before any token is looked at
    refused = d.error(d.client("10.0.0.1"), {"type": "auth", "token": "arena_secret-guess"})
    assert refused.code == "rate_limited" and "try again in 10 s" in refused.message
    assert d.error(d.client("10.0.0.2"), {"type": "auth", "token": 5}).code == "unauthorized"
    d.clock.now += 10.0  # one more try per refill period
    retry = d.send(c, {"type": "auth", "token": "arena_x"})
    assert isinstance(retry, Need)
    assert d.error(c, {"type": "auth", "token": "arena_x"}).code == "bad_message"  # in flight
    with pytest.raises(ProtocolError):
        retry.then(None)
    assert d.error(d.client(), {"type": "auth", "token": "arena_x"}).code == "rate_limited"
    assert "secret-guess" not in caplog.text


def test_successful_auths_use_no_tries_and_checks_in_flight_are_capped() -> None:
    d = Desk(ServerLimits(auth_failure_burst=1, auth_in_flight_per_address=2))
    for _ in range(3):
        d.auth(d.client(), "alice")
    a = d.send(d.client(), {"type": "auth", "token": "t"})
    b = d.send(d.client(), {"type": "auth", "token": "t"})
    assert isinstance(a, Need) and isinstance(b, Need)
    err = d.error(d.client(), {"type": "auth", "token": "t"})
    assert err.code == "rate_limited" and "auth_in_flight_per_address" in err.message
    a.then(Account("alice"))
    b.then(Account("bob"))
    d.auth(d.client(), "carol")  # answered: room again
    bad = d.error(d.client(), {"type": "auth", "token": "t", "agent_protocol": 9})
    assert bad.code == "bad_protocol" and "protocol 1" in bad.message


def test_connections_per_account_are_capped() -> None:
    d = Desk(ServerLimits(max_agent_connections=2))
    d.auth(d.client(), "alice")
    d.auth(d.client(), "alice")
    third = d.client()
    need = d.send(third, {"type": "auth", "token": "t"})
    assert isinstance(need, Need)
    with pytest.raises(ProtocolError, match="max_agent_connections") as info:
        need.then(Account("alice"))
    assert info.value.code == "too_many_connections"
    assert d.desk.account_of(third) is None


def test_a_server_without_a_database_has_no_accounts() -> None:
    d = Desk(has_db=False)
    assert d.error(d.client(), {"type": "auth", "token": "t"}).code == "unavailable"


# -- seeks ------------------------------------------------------------------------------------


def test_seeks_are_validated_with_what_to_do() -> None:
    d = Desk()
    c = d.client()
    d.auth(c, "alice")
    assert d.error(c, {"type": "seek", "game": "Nope-v0"}).code == "bad_game"
    assert d.error(c, {"type": "seek", "game": "TicTacToe-v0", "rated": "yes"}).code == (
        "bad_message"
    )
    for opponents in (["aliens"], [], "bot", ["bot"] * 9):
        err = d.error(c, {"type": "seek", "game": "TicTacToe-v0", "opponents": opponents})
        assert err.code == "bad_message" and "agent, human, bot, checkpoint" in err.message
    seek_id = d.seek(c, opponents=["bot", "agent"], rated=False)
    seeking = d.last(c, "seeking")
    assert seeking["ref"] == 7 and not seeking["rated"]
    assert seeking["opponents"] == ["agent", "bot"] and seeking["rating"]["mu"] == 1000.0
    d.send(c, {"type": "cancel_seek", "seek": seek_id})
    assert d.last(c, "seek_cancelled")["seek"] == seek_id and len(d.desk.queue) == 0
    assert d.error(c, {"type": "cancel_seek", "seek": seek_id}).code == "unknown_seek"


def test_a_seek_cannot_be_cancelled_by_someone_else() -> None:
    d = Desk()
    a, b = alice_and_bob(d)
    seek_id = d.seek(a)
    assert d.error(b, {"type": "cancel_seek", "seek": seek_id}).code == "unknown_seek"
    assert seek_id in d.desk.queue


def test_matches_and_seeks_are_capped_per_agent_and_per_connection() -> None:
    d = Desk(ServerLimits(max_agent_matches=3, max_agent_matches_per_connection=2))
    a1, a2 = d.client(), d.client()
    d.auth(a1, "alice")
    d.auth(a2, "alice")
    d.seek(a1)
    d.seek(a1)
    err = d.error(a1, {"type": "seek", "game": "TicTacToe-v0"})
    assert err.code == "too_many_matches" and "max_agent_matches_per_connection" in err.message
    d.seek(a2)
    err = d.error(a2, {"type": "seek", "game": "TicTacToe-v0"})
    assert err.code == "too_many_matches" and "max_agent_matches)" in err.message


def test_the_queue_is_bounded() -> None:
    d = Desk(ServerLimits(max_seeks=2))
    clients = [d.client() for _ in range(3)]
    for i, c in enumerate(clients):
        d.auth(c, f"agent{i}")
    d.seek(clients[0], opponents=["bot"])
    d.seek(clients[1], opponents=["bot"])
    assert d.error(clients[2], {"type": "seek", "game": "TicTacToe-v0"}).code == "too_many_seeks"


def test_seeks_expire() -> None:
    d = Desk(ServerLimits(seek_timeout_s=30.0))
    c = d.client()
    d.auth(c, "alice")
    seek_id = d.seek(c)
    d.clock.now += 29.0
    d.desk.tick()
    assert seek_id in d.desk.queue
    d.clock.now += 2.0
    d.desk.tick()
    expired = d.last(c, "seek_expired")
    assert expired["seek"] == seek_id and expired["ref"] == 7 and len(d.desk.queue) == 0


def test_stored_ratings_are_used_and_updated_live() -> None:
    d = Desk()
    c = d.client()
    d.auth(c, "alice")
    need = d.send(c, {"type": "seek", "game": "TicTacToe-v0"})
    assert isinstance(need, Need) and need.kind == "load_ratings"
    need.then({"agent:alice": (1031.0, 20.0, 4)})
    assert d.last(c, "seeking")["rating"] == {"mu": 1031.0, "sigma": 20.0}
    changed = RatingsChanged(
        "TicTacToe-v0", "m1", (("agent:alice", 1033.0, 15.0, 988.0),), games=(5,)
    )
    d.desk.ratings_changed(changed)
    assert d.desk.rating("TicTacToe-v0", "agent:alice") == (1033.0, 15.0)
    assert "rating" not in d.kinds(c)  # not a match of alice's that it was told ended


def test_a_rating_follows_the_match_end_it_was_told_and_only_then() -> None:
    """``rating`` goes to the connections told that match's end, after it; an agent
    away at the end gets the end, then the rating, when it is back; a refit that moves
    another agent's rating tells that agent nothing."""
    d = Desk()
    a, b = alice_and_bob(d)
    pending, _handles = pair(d, a, b)
    sa, sb = seat_of(d, pending, "alice"), seat_of(d, pending, "bob")
    d.desk.disconnected(b)  # bob is away when the match ends
    rewards = [1.0, -1.0] if sa == 0 else [-1.0, 1.0]
    d.desk.match_over(pending.match_id, "finished", "", rewards, [])
    assert d.last(a, "match_ended")["result"] == "win"
    d.desk.ratings_changed(
        RatingsChanged(
            "TicTacToe-v0", pending.match_id,
            (("agent:alice", 1100.0, 50.0, 950.0), ("agent:bob", 900.0, 50.0, 750.0),
             ("agent:carol", 1010.0, 80.0, 770.0)),
            games=(1, 1, 7),
        )
    )  # fmt: skip
    assert d.kinds(a)[-2:] == ["match_ended", "rating"]
    rating = d.last(a, "rating")
    assert rating["agent"] == "agent:alice" and rating["match"] == pending.match_id
    assert rating["rating"] == rating["mu"] == 1100.0 and rating["ordinal"] == 950.0
    assert rating["games"] == 1 and rating["lower"] == pytest.approx(1100.0 - 1.96 * 50.0, 0.01)
    back = d.client()
    d.auth(back, "bob")
    assert d.kinds(back) == ["authenticated", "match_ended", "rating"]
    ended = d.last(back, "match_ended")
    assert ended["replayed"] is True and ended["result"] == "loss" and ended["seat"] == sb
    assert d.last(back, "rating")["rating"] == 900.0
    again = d.client()
    d.auth(again, "bob")
    assert d.kinds(again) == ["authenticated"]  # told once
    carol = d.client()
    d.auth(carol, "carol")
    assert d.kinds(carol) == ["authenticated"]


def test_a_move_or_resign_after_the_end_is_match_over() -> None:
    d = Desk()
    a, b = alice_and_bob(d)
    pending, _handles = pair(d, a, b)
    d.desk.match_over(pending.match_id, "finished", "", [0.0, 0.0], [])
    move = {"type": "move", "match_id": pending.match_id, "text": "[1]"}
    assert d.error(a, move).code == "match_over"
    assert d.error(b, {"type": "resign", "match_id": pending.match_id}).code == "match_over"
    carol = d.client()
    d.auth(carol, "carol")
    assert d.error(carol, move).code == "unknown_match"  # not a match of carol's


def test_an_auth_may_list_the_matches_it_held_and_hears_how_each_ended() -> None:
    d = Desk()
    a, b = alice_and_bob(d)
    pending, _handles = pair(d, a, b)
    d.desk.match_over(pending.match_id, "aborted", "the server stopped", None, [])
    back = d.client()
    need = d.send(
        back, {"type": "auth", "id": 3, "token": "t", "matches": [pending.match_id, "f" * 32]}
    )
    assert isinstance(need, Need)
    lookup = need.then(Account("alice"))
    assert d.kinds(back) == ["authenticated", "match_ended"]  # in memory: replayed at once
    assert d.last(back, "match_ended")["status"] == "aborted"
    assert isinstance(lookup, Need) and lookup.kind == "ended_matches"
    assert lookup.args == {"account": "agent:alice", "ids": ["f" * 32]}
    lookup.then({})
    unknown = d.last(back, "error")
    assert unknown["code"] == "unknown_match" and unknown["ref"] == 3
    assert unknown["match"] == "f" * 32
    for bad in ("x", ["x"] * 65, [3]):
        assert d.error(d.client(), {"type": "auth", "token": "t", "matches": bad}).code == (
            "bad_message"
        )


# -- seats ------------------------------------------------------------------------------------


def test_paired_agents_get_their_seat_and_only_their_own_prompts() -> None:
    d = Desk()
    a, b = alice_and_bob(d)
    pending, handles = pair(d, a, b)
    sa = seat_of(d, pending, "alice")
    paired = d.last(a, "paired")
    assert paired["match"] == pending.match_id and paired["seat"] == sa and paired["ref"] == 7
    assert set(paired["players"]) == {"agent:alice", "agent:bob"} and paired["rated"]
    messages = [
        GameMessage(GAME, f"you are seat {sa}: secret", MessageKind.PROMPT, sa),
        GameMessage(GAME, "board", MessageKind.BOARD),
    ]
    handles[sa].turn = turn(0, messages, 0, sa)
    handles[sa].deadline = 2e9
    d.wall.now = 2e9 - 45.5
    d.desk.prompt(pending.match_id, sa, handles[sa].turn, 2e9)
    prompt = d.last(a, "your_turn")
    assert prompt["seat"] == sa and prompt["turn"] == 0 and prompt["from"] == 0
    assert prompt["deadline"] == 2e9 and prompt["time_left_s"] == 45.5  # by the given clock
    assert prompt["messages"][0] == {
        "from": -1,
        "to": sa,
        "kind": "prompt",
        "text": f"you are seat {sa}: secret",
    }
    assert prompt["legal_moves"] == ["[1]", "[2]"] and "secret" in prompt["prompt"]
    assert "your_turn" not in d.kinds(b)  # never another seat's prompt
    # only the holder moves its seat; the other agent is refused
    err = d.error(b, {"type": "move", "match_id": pending.match_id, "text": "[1]"})
    assert err.code == "not_your_turn"  # bob's own seat is not to move
    err = d.error(a, {"type": "move", "match_id": pending.match_id, "text": "[1]", "turn": 5})
    assert err.code == "not_your_turn" and "turn 0" in err.message
    d.send(a, {"type": "move", "match_id": pending.match_id, "text": "[1]", "turn": 0, "id": 3})
    ack = d.last(a, "move_ack")
    assert ack["index"] == 0 and ack["ref"] == 3 and handles[sa].moves == ["[1]"]
    assert d.error(a, {"type": "move", "match_id": pending.match_id, "text": "[2]"}).code == (
        "not_your_turn"
    )


def test_a_third_agent_and_an_anonymous_client_move_nothing() -> None:
    d = Desk()
    a, b, c, anon = d.client(), d.client(), d.client(), d.client()
    d.auth(a, "alice")
    d.auth(b, "bob")
    d.auth(c, "carol")
    pending, handles = pair(d, a, b)
    for h in handles.values():
        h.turn = turn(0, [], 0, 0)
    err = d.error(c, {"type": "move", "match_id": pending.match_id, "text": "[1]"})
    assert err.code == "forbidden" and "agent:carol holds no seat" in err.message
    err = d.error(anon, {"type": "move", "match_id": pending.match_id, "text": "[1]"})
    assert err.code == "forbidden"
    err = d.error(c, {"type": "move", "match_id": "f" * 32, "text": "[1]"})
    assert err.code == "unknown_match"
    assert all(h.moves == [] for h in handles.values())


def test_consecutive_prompts_send_only_the_new_messages() -> None:
    d = Desk()
    a, b = alice_and_bob(d)
    pending, _handles = pair(d, a, b)
    sa = seat_of(d, pending, "alice")
    msgs = [GameMessage(GAME, f"m{i}", MessageKind.INFO) for i in range(5)]
    d.desk.prompt(pending.match_id, sa, turn(0, msgs[:2], 0, sa), 2e9)
    d.desk.prompt(pending.match_id, sa, turn(2, msgs, 2, sa), 2e9)
    prompt = d.last(a, "your_turn")
    assert prompt["from"] == 2 and prompt["new_from"] == 2
    assert [m["text"] for m in prompt["messages"]] == ["m2", "m3", "m4"]


def test_a_dropped_agent_resumes_its_seats_with_the_whole_transcript() -> None:
    d = Desk(ServerLimits(agent_reconnect_grace_s=30.0))
    a, b = alice_and_bob(d)
    pending, handles = pair(d, a, b)
    sa = seat_of(d, pending, "alice")
    d.desk.disconnected(a)
    msgs = [GameMessage(GAME, f"m{i}", MessageKind.INFO) for i in range(4)]
    handles[sa].turn = turn(2, msgs, 3, sa)
    handles[sa].deadline = 2e9
    d.desk.prompt(pending.match_id, sa, handles[sa].turn, 2e9)  # nobody holds it: not sent
    d.clock.now += 29.0
    assert d.desk.tick().forfeits == []
    back = d.client()
    d.auth(back, "alice")
    assert d.kinds(back) == ["authenticated", "your_turn"]
    (resumed,) = d.last(back, "authenticated")["resumed"]
    assert resumed["match"] == pending.match_id and resumed["seat"] == sa
    prompt = d.last(back, "your_turn")
    assert prompt["from"] == 0 and len(prompt["messages"]) == 4 and prompt["new_from"] == 3
    d.send(back, {"type": "move", "match_id": pending.match_id, "text": "[1]", "turn": 2})
    assert handles[sa].moves == ["[1]"]
    d.clock.now += 100.0
    assert d.desk.tick().forfeits == []  # it came back: no forfeit


def test_an_agent_not_back_within_the_grace_period_forfeits_once() -> None:
    d = Desk(ServerLimits(agent_reconnect_grace_s=30.0))
    a, b = alice_and_bob(d)
    pending, _handles = pair(d, a, b)
    d.desk.disconnected(a)
    d.clock.now += 30.0
    (forfeit,) = d.desk.tick().forfeits
    assert forfeit.match_id == pending.match_id and forfeit.seat == seat_of(d, pending, "alice")
    assert "not back within 30 s" in forfeit.reason
    assert d.desk.tick().forfeits == []
    late = d.client()
    d.auth(late, "alice")
    assert d.last(late, "authenticated")["resumed"] == []  # a forfeiting seat is not given back


def test_a_resume_false_connection_takes_no_seats_and_another_one_does() -> None:
    d = Desk()
    a, b = alice_and_bob(d)
    pending, _ = pair(d, a, b)
    watcher = d.client()
    d.auth(watcher, "alice", resume=False)
    other = d.client()
    d.auth(other, "alice")
    d.desk.disconnected(a)  # the seats move to the connection that resumes, at once
    assert "resumed" not in d.kinds(watcher)
    assert d.last(other, "resumed")["matches"][0]["match"] == pending.match_id
    assert d.desk.seats[(pending.match_id, seat_of(d, pending, "alice"))].conn is other


def test_a_revoked_agent_is_closed_and_its_seats_forfeit() -> None:
    d = Desk()
    a, b = alice_and_bob(d)
    pending, _ = pair(d, a, b)
    closes, forfeits = d.desk.revoked(["alice"])
    assert [c for c, _ in closes] == [a] and closes[0][1].code == 1008
    assert d.last(a, "error")["code"] == "revoked"
    assert [(f.match_id, f.seat) for f in forfeits] == [
        (pending.match_id, seat_of(d, pending, "alice"))
    ]
    assert d.desk.account_of(a) is None and d.desk.online() == ["bob"]


def test_resign_asks_for_a_forfeit_of_the_holders_seat_only() -> None:
    d = Desk()
    a, b, c = d.client(), d.client(), d.client()
    d.auth(a, "alice")
    d.auth(b, "bob")
    d.auth(c, "carol")
    pending, _ = pair(d, a, b)
    assert d.error(c, {"type": "resign", "match_id": pending.match_id}).code == "forbidden"
    need = d.send(a, {"type": "resign", "match_id": pending.match_id, "id": 9})
    assert isinstance(need, Need) and need.kind == "forfeit"
    forfeit = need.args["forfeit"]
    assert forfeit.seat == seat_of(d, pending, "alice") and "resigned" in forfeit.reason
    need.then(True)
    assert d.last(a, "resigned")["ref"] == 9


def test_match_end_is_told_with_each_agents_result() -> None:
    d = Desk()
    a, b = alice_and_bob(d)
    pending, _ = pair(d, a, b)
    sa = seat_of(d, pending, "alice")
    rewards = [0.0, 0.0]
    rewards[sa], rewards[1 - sa] = -1.0, 1.0
    d.desk.match_over(pending.match_id, "finished", "agent:alice lost on time", rewards, [sa])
    ended_a, ended_b = d.last(a, "match_ended"), d.last(b, "match_ended")
    assert ended_a["result"] == "loss" and ended_b["result"] == "win"
    assert ended_a["forfeited"] == [sa] and ended_a["rated"]
    assert d.desk.seats == {} and d.desk.matches == {}
    err = d.error(a, {"type": "move", "match_id": pending.match_id, "text": "[1]"})
    assert err.code == "match_over"  # documented: a move after the end


def test_a_browser_person_seeks_and_gets_a_seat_token() -> None:
    tokens: list[str] = []

    def human_seat(pending: PendingMatch, plan: Any, handle: Any) -> str:
        tokens.append(f"tok-{plan.seat}")
        return tokens[-1]

    d = Desk(human_seat=human_seat)
    person, agent = d.client(), d.client()
    d.auth(agent, "alice")
    d.seek(person)
    d.seek(agent)
    (pending,) = d.desk.tick().start
    assert {p.player for p in pending.seats} == {"human", "agent:alice"}
    d.desk.started(pending, [p.player for p in pending.seats], {0: FakeSeat(), 1: FakeSeat()})
    d.desk.announced(pending.match_id)
    created = d.last(person, "match_created")
    assert created["token"] == tokens[0] and created["match"] == pending.match_id
    assert "paired" in d.kinds(agent)


def test_fill_ins_take_the_seats_of_a_lonely_seek() -> None:
    fills = [("random", "bot", "bot:random@1")]
    d = Desk(matchmaker=MatchmakerConfig(fill_after_s=2.0), fillers=lambda g, n: fills)
    a = d.client()
    d.auth(a, "alice")
    d.seek(a)
    assert d.desk.tick().start == []
    d.clock.now += 2.0
    (pending,) = d.desk.tick().start
    assert sorted(p.player for p in pending.seats) == ["agent:alice", "random"]
    assert {p.kind for p in pending.seats} == {"agent", "bot"}


def test_a_resumed_seat_not_to_move_gets_its_whole_transcript_with_its_next_prompt() -> None:
    d = Desk(ServerLimits(agent_reconnect_grace_s=30.0))
    a, b = alice_and_bob(d)
    pending, _handles = pair(d, a, b)
    sa = seat_of(d, pending, "alice")
    msgs = [GameMessage(GAME, f"m{i}", MessageKind.INFO) for i in range(6)]
    d.desk.prompt(pending.match_id, sa, turn(0, msgs[:2], 0, sa), 2e9)
    d.desk.disconnected(a)  # drops while the other seat thinks
    back = d.client()
    d.auth(back, "alice")
    assert d.kinds(back) == ["authenticated"]  # nothing to answer yet
    d.desk.prompt(pending.match_id, sa, turn(2, msgs[:4], 2, sa), 2e9)
    first = d.last(back, "your_turn")
    assert first["from"] == 0 and [m["text"] for m in first["messages"]] == [
        "m0", "m1", "m2", "m3"
    ]  # fmt: skip
    d.desk.prompt(pending.match_id, sa, turn(4, msgs, 4, sa), 2e9)
    second = d.last(back, "your_turn")
    assert second["from"] == 4 and [m["text"] for m in second["messages"]] == ["m4", "m5"]
