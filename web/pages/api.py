"""The HTTP side of the web server, without I/O: pages, static files and the JSON API.

``HttpApi.answer`` takes a request (method, target, headers) and gives its ``Response``, or
a ``Need`` when the answer needs the database (``web.core``), or None for a WebSocket
handshake to accept. Every request is checked first: its ``Host`` (``web.pages.hosts``: DNS
rebinding), its method (only GET: 405 with ``Allow``), and for the JSON API every
parameter (numbers are digits within their bounds, text is bounded: 400 with a message
otherwise).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from websockets.http11 import Response

from arena.identity import PolicyRef, player_kind, policy_key
from matchmaking.leaderboard import METHODS
from storage.errors import StorageError
from storage.queries import MAX_PAGE, check_status
from storage.ratings import StoredRating
from web.core import HubCore, Need
from web.live.convert import rating_json, summary_line
from web.live.livematches import check_match_id
from web.live.streams import PUBLIC
from web.pages import http
from web.protocol import MAX_ID_CHARS, ProtocolError

MAX_OFFSET = 1_000_000_000
"""Largest ``offset`` the JSON API takes."""
MAX_NUMBER_DIGITS = 10
"""Digits a numeric query parameter may have (a longer one is refused before parsing)."""
MAX_RUN_NAME_CHARS = 256
"""Longest run name in ``/api/runs/NAME``."""
MAX_RATED_PLAYERS = 64
"""Most player names one ``/api/ratings`` request asks about."""
LEADERBOARD_METHODS: tuple[str, ...] = METHODS
"""``/api/leaderboard?method=``: ``bt`` (the default: the Bradley-Terry fit that the live
ratings keep current) or ``openskill`` (replayed over the stored results)."""
ALLOWED_METHODS = ("GET",)
"""HTTP methods the server answers; any other gets 405 with ``Allow``."""
_DIGITS = re.compile(rf"^[0-9]{{1,{MAX_NUMBER_DIGITS}}}$")


def int_param(query: Mapping[str, list[str]], name: str, default: int, low: int, high: int) -> int:
    """Query parameter ``name`` as an int from ``low`` to ``high`` (``default`` when
    absent). Raises ValueError, with a message for the client, for anything else."""
    values = query.get(name)
    if not values or values[-1] == "":
        return default
    text = values[-1]
    if not _DIGITS.match(text) or not low <= int(text) <= high:
        raise ValueError(f"{name} must be an integer from {low} to {high}; got {text[:20]!r}")
    return int(text)


def text_param(query: Mapping[str, list[str]], name: str) -> str | None:
    """Query parameter ``name`` (None when absent or empty). Raises ValueError when it is
    longer than ``MAX_ID_CHARS``."""
    values = query.get(name)
    if not values or not values[-1]:
        return None
    if len(values[-1]) > MAX_ID_CHARS:
        raise ValueError(f"{name} is longer than {MAX_ID_CHARS} characters")
    return values[-1]


class HttpApi:
    """The HTTP answers of a ``HubCore`` (its state, its limits, its host check)."""

    def __init__(self, core: HubCore) -> None:
        self.core = core

    def answer(
        self, method: str, target: str, headers: Mapping[str, str]
    ) -> Response | Need | None:
        """Answer an HTTP request: a ``Response``, a ``Need`` (the JSON API reading the
        database), or None for a WebSocket handshake to accept. Never raises."""
        host_problem = self.core.host_check.host_error(headers.get("Host"))
        if host_problem is not None:
            self.core.stats.refused_hosts += 1
            return http.text(HTTPStatus.FORBIDDEN, host_problem)
        if method not in ALLOWED_METHODS:
            return method_not_allowed(method)
        parts = urlsplit(target)
        path = parts.path
        if path == "/ws":
            if "websocket" not in headers.get("Upgrade", "").lower():
                return http.text(HTTPStatus.UPGRADE_REQUIRED, "connect with a WebSocket")
            origin_problem = self.core.host_check.origin_error(headers.get("Origin"))
            if origin_problem is not None:
                self.core.stats.refused_hosts += 1
                return http.text(HTTPStatus.FORBIDDEN, origin_problem)
            if len(self.core.clients) >= self.core.limits.max_connections:
                self.core.stats.refused_connections += 1
                return http.text(
                    HTTPStatus.SERVICE_UNAVAILABLE,
                    f"too many connections (the limit is {self.core.limits.max_connections})",
                )
            return None
        if path.startswith("/api/"):
            return _api_guard(lambda: self._api(path, parse_qs(parts.query)))
        if path.startswith("/static/"):
            return http.static_file(self.core.static_dir, path[len("/static/") :])
        return http.page(self.core.static_dir, path) or http.not_found()

    def _api(self, path: str, query: dict[str, list[str]]) -> Response | Need:
        """A JSON API route. Raises ValueError (bad parameters), ProtocolError."""
        if path == "/api/matches":
            return self._list_matches(query)
        if path.startswith("/api/matches/"):
            match_id = check_match_id(unquote(path[len("/api/matches/") :]))
            return self.core.find_stream(
                match_id, lambda s: http.json_response(s.snapshot(PUBLIC, self.core.epoch))
            )
        if path == "/api/runs":

            def runs(stored: Any) -> Response:
                listed = [] if isinstance(stored, BaseException) else stored
                return http.json_response(
                    {"runs": [s.info() for s in self.core.runs.values()], "stored_runs": listed}
                )

            return Need("poll_runs", {}, lambda _: Need("list_runs", {}, runs))
        if path.startswith("/api/runs/"):
            name = unquote(path[len("/api/runs/") :])
            if name.endswith("/ratings"):
                name = name[: -len("/ratings")]
                if len(name) > MAX_RUN_NAME_CHARS:
                    raise ValueError(f"a run name has at most {MAX_RUN_NAME_CHARS} characters")
                return self._run_ratings(name)
            if len(name) > MAX_RUN_NAME_CHARS:
                raise ValueError(f"a run name has at most {MAX_RUN_NAME_CHARS} characters")
            series = self.core.runs.get(name)
            if series is None:
                raise ProtocolError("unknown_run", f"no training run {name!r} is watched")
            return http.json_response({"info": series.info(), "rows": list(series.rows)})
        if path == "/api/games":
            return http.json_response({"games": self.core.games()})
        if path == "/api/status":
            return http.json_response(
                {
                    "epoch": self.core.epoch,
                    "clients": len(self.core.clients),
                    "live": len(self.core.live),
                    "stats": self.core.stats.as_dict(),
                    "agents": self.core.agents.status(),
                }
            )
        if path == "/api/agents":
            desk = self.core.agents
            return http.json_response({"agents": desk.agents(), "status": desk.status()})
        if path == "/api/leaderboard":
            return self._leaderboard(query)
        if path == "/api/ratings":
            return self._ratings(query)
        return http.json_error(HTTPStatus.NOT_FOUND, "not_found", f"no API route {path}")

    def _leaderboard(self, query: dict[str, list[str]]) -> Response | Need:
        game = self._rated_game(query, "/api/leaderboard?game=TicTacToe-v0")
        method = text_param(query, "method") or LEADERBOARD_METHODS[0]
        if method not in LEADERBOARD_METHODS:
            raise ValueError(f"method must be one of {', '.join(LEADERBOARD_METHODS)}")

        def board(result: Any) -> Response:
            if isinstance(result, BaseException):
                raise ProtocolError("unavailable", f"cannot read the ratings: {result}")
            return http.json_response(result)

        if not self.core.has_db:
            return board(
                {"game": game, "game_id": game, "method": method, "matches": 0, "rows": [],
                 "seat0_score": None, "notes": ["this server has no database"]}
            )  # fmt: skip
        return Need("leaderboard", {"game": game, "method": method}, board)

    def _ratings(self, query: dict[str, list[str]]) -> Response | Need:
        game = self._rated_game(query, "/api/ratings?game=TicTacToe-v0&players=random,optimal")
        raw = query.get("players", [""])[-1]
        if len(raw) > MAX_RATED_PLAYERS * (MAX_ID_CHARS + 1):
            raise ValueError(f"players: at most {MAX_RATED_PLAYERS} names, comma-separated")
        names = list(dict.fromkeys(n for n in raw.split(",") if n))
        if not names or len(names) > MAX_RATED_PLAYERS:
            raise ValueError(
                f"players: from 1 to {MAX_RATED_PLAYERS} player names, comma-separated"
            )
        if any(len(n) > MAX_ID_CHARS for n in names):
            raise ValueError(f"players: a name has at most {MAX_ID_CHARS} characters")

        def ratings(result: Any) -> Response:
            if isinstance(result, BaseException):
                raise ProtocolError("unavailable", f"cannot read the ratings: {result}")
            stored = {r.policy: r for r in result}
            out: dict[str, Any] = {}
            for name in names:
                key = policy_key(name, player_kind(name))  # "human" is human:human
                r = stored.get(key)
                out[name] = None if r is None else rating_json(key, r.mu, r.sigma, r.games)
            return http.json_response({"game_id": game, "ratings": out})

        if not self.core.has_db:
            return ratings([])
        return Need("stored_ratings", {"game": game}, ratings)

    def _run_ratings(self, name: str) -> Response | Need:
        series = self.core.runs.get(name)
        if series is None:
            raise ProtocolError("unknown_run", f"no training run {name!r} is watched")
        run = series.run_id or series.name
        prefix = PolicyRef.checkpoint_prefix(run)
        game = series.game_id

        def current(result: Any) -> Response:
            if isinstance(result, BaseException):
                raise ProtocolError("unavailable", f"cannot read the ratings: {result}")
            return http.json_response(
                {"run": name, "game_id": game, "policy_prefix": prefix,
                 "checkpoints": checkpoint_ratings(result, prefix)}
            )  # fmt: skip

        if game is None or not self.core.has_db:
            return current([])
        return Need("stored_ratings", {"game": game}, current)

    def _rated_game(self, query: dict[str, list[str]], example: str) -> str:
        game = text_param(query, "game")
        if game is None:
            raise ValueError(f"give the game: {example}")
        check = self.core.check_seek
        if check is not None:
            check(game, None, False)  # ValueError: 400 with the reason
        return game

    def _list_matches(self, query: dict[str, list[str]]) -> Response | Need:
        limit = int_param(query, "limit", 50, 1, MAX_PAGE)
        offset = int_param(query, "offset", 0, 0, MAX_OFFSET)
        game, run = text_param(query, "game"), text_param(query, "run")
        policy, status = text_param(query, "policy"), text_param(query, "status")
        check_status(status)  # ValueError: 400
        if not self.core.has_db:
            streams = [*self.core.live.values(), *reversed(self.core.ended.values())]
            lines = [
                s.summary()
                for s in streams
                if (game is None or s.info.game_id == game)
                and (run is None or s.info.run_id == run)
                and (status is None or s.status == status)
            ]
            return http.json_response({"matches": lines[offset : offset + limit]})

        def listed(result: Any) -> Response:
            if isinstance(result, BaseException):
                raise ProtocolError("unavailable", f"cannot read the database: {result}")
            return http.json_response({"matches": [summary_line(s) for s in result]})

        args = dict(game=game, run=run, policy=policy, status=status, limit=limit, offset=offset)
        return Need("list_matches", args, listed)


def method_not_allowed(method: str) -> Response:
    """405 with ``Allow``: only GET is served."""
    response = http.json_error(
        HTTPStatus.METHOD_NOT_ALLOWED,
        "method_not_allowed",
        f"{method[:20]} is not served here; use {', '.join(ALLOWED_METHODS)}",
    )
    response.headers["Allow"] = ", ".join(ALLOWED_METHODS)
    return response


def _api_guard(step: Callable[[], Any]) -> Any:
    """Turn a JSON API step's errors into answers: ValueError -> 400, ProtocolError -> 404
    (unknown ...), 503 (unavailable) or 400; a ``Need``'s continuation likewise."""
    try:
        result = step()
    except ValueError as exc:
        return http.json_error(HTTPStatus.BAD_REQUEST, "bad_request", str(exc))
    except ProtocolError as exc:
        if exc.code.startswith("unknown"):
            status = HTTPStatus.NOT_FOUND
        elif exc.code == "unavailable":
            status = HTTPStatus.SERVICE_UNAVAILABLE
        else:
            status = HTTPStatus.BAD_REQUEST
        return http.json_error(status, exc.code, exc.message)
    except StorageError as exc:
        return http.json_error(HTTPStatus.SERVICE_UNAVAILABLE, "unavailable", str(exc))
    if isinstance(result, Need):
        then = result.then
        return Need(result.kind, result.args, lambda value: _api_guard(lambda: then(value)))
    return result


def checkpoint_ratings(stored: list[StoredRating], prefix: str) -> list[dict[str, Any]]:
    """The current rating of each checkpoint whose key is ``prefix`` + a step, by step:
    ``step`` and the fields of ``web.live.convert.rating_json``."""
    out: list[dict[str, Any]] = []
    for r in stored:
        step = r.policy[len(prefix) :]
        if r.policy.startswith(prefix) and step.isdigit():
            out.append({"step": int(step), **rating_json(r.policy, r.mu, r.sigma, r.games)})
    out.sort(key=lambda row: row["step"])
    return out
