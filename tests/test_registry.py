"""The catalogue and make(): ids, player counts, availability, clear errors."""

from __future__ import annotations

import sys

import pytest

import games
from games.registry import GameUnavailable, UnknownGame, catalogue, get_spec


def test_catalogue_lists_textarena_and_native_games() -> None:
    specs = {s.game_id: s for s in catalogue()}
    assert specs["TicTacToe-v0"].source == "textarena"
    assert specs["TicTacToe-v0"].min_players == specs["TicTacToe-v0"].max_players == 2
    assert specs["LowestUnique-v0"].source == "native"
    assert (specs["LowestUnique-v0"].min_players, specs["LowestUnique-v0"].max_players) == (2, 15)
    assert specs["KuhnPoker-v0"].hidden_information
    assert not specs["TicTacToe-v0"].hidden_information
    assert any(s.max_players >= 3 and s.available for s in specs.values())


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="Chess runs on 3.12+")
def test_python_312_games_are_unavailable_with_the_reason() -> None:
    spec = get_spec("Chess-v0")
    assert not spec.available
    assert "3.12" in (spec.reason or "")
    with pytest.raises(GameUnavailable, match=r"3\.12"):
        games.make("Chess-v0")


def test_every_unavailable_game_says_why() -> None:
    for spec in catalogue():
        if not spec.available:
            assert spec.reason, spec.game_id


def test_unknown_game_names_close_matches_and_choices() -> None:
    with pytest.raises(UnknownGame) as info:
        games.make("TicTacToe-v9")
    message = str(info.value)
    assert "TicTacToe-v0" in message and "arena games" in message


def test_bad_player_count_names_the_supported_counts() -> None:
    with pytest.raises(ValueError, match="TicTacToe-v0 takes 2 players, not 3"):
        games.make("TicTacToe-v0", 3)
    with pytest.raises(ValueError, match="2-15"):
        games.make("LowestUnique-v0", 16)


def test_register_game_refuses_duplicates_and_unversioned_ids() -> None:
    with pytest.raises(ValueError, match="already registered"):
        games.register_game("LowestUnique-v0", min_players=2, max_players=3)(object)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="version"):
        games.register_game("NoVersion", min_players=2, max_players=3)


@pytest.mark.slow
def test_every_available_game_can_start_at_its_minimum_player_count() -> None:
    failures = []
    for spec in catalogue(available_only=True):
        players = spec.player_counts[0] if spec.player_counts else spec.min_players
        try:
            session = games.make(spec.game_id, players, seed=0)
            session.close()
        except Exception as exc:  # collect them all, report at once
            failures.append(f"{spec.game_id}: {type(exc).__name__}: {exc}")
    assert not failures, "\n".join(failures)


def test_register_game_refuses_textarena_ids_and_bad_reward_ranges() -> None:
    from games.native.lowest_unique import LowestUniqueGame

    with pytest.raises(ValueError, match="already registered"):
        games.register_game("TicTacToe-v0", min_players=2, max_players=2)(LowestUniqueGame)
    with pytest.raises(ValueError, match="reward_range"):
        games.register_game("Odd-v0", min_players=2, max_players=2, reward_range=(1.0, -1.0))


def test_specs_say_where_a_game_comes_from_and_what_it_declares() -> None:
    native = get_spec("LowestUnique-v0")
    assert (native.source, native.package) == ("native", "arena-selfplay")
    assert native.reward_sum is None  # winners +1, losers -1: the sum varies
    ta = get_spec("ConnectFour-v0")
    assert (ta.source, ta.package, ta.version) == ("textarena", "textarena", "0.7.4")
    assert ta.reward_sum == 0.0 and ta.reward_range == (-1.0, 1.0)
    assert get_spec("KuhnPoker-v0").public_moves and not ta.public_moves


def test_kits_compact_views_and_public_moves_for_known_and_unknown_ids() -> None:
    from games.api import NO_KIT
    from games.registry import compact_view, game_kit, moves_are_public

    assert game_kit("NoSuchGame-v0") is NO_KIT
    assert compact_view("NoSuchGame-v0", [], 0) is None
    assert "optimal" in game_kit("TicTacToe-v0").bots
    with pytest.raises(UnknownGame):
        moves_are_public("NoSuchGame-v0")


def test_a_failing_public_board_is_none_is_logged_once_and_changes_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from games.api import PublicBoard
    from games.native.lowest_unique import LowestUniqueGame
    from games.session import GameSession

    class BadBoard(LowestUniqueGame):
        def public_board(self) -> PublicBoard:
            raise RuntimeError("no board")

    session = GameSession(BadBoard(), "BadBoard-v0", 2, seed=0)
    session.start()
    assert session.public_board() is None
    assert session.public_board() is None
    assert session.outcome is None  # the game goes on: only spectators lose the board
    session.step(session.current_player(), "[1]")
    assert session.views().board is None and session.views().public_state
    assert sum("public_board" in r.getMessage() for r in caplog.records) == 1
    board = games.make("LowestUnique-v0", 3).public_board()
    assert (
        board is not None
        and board["kind"] == "scores"
        and board["scores"]
        == {
            "0": 0.0,
            "1": 0.0,
            "2": 0.0,
        }
    )


@pytest.mark.parametrize(
    ("flaw", "expected"),
    [
        ("nan", "NaN or an infinity"),
        ("set", "set"),
        ("huge", "MAX_BOARD_CHARS"),
        ("not_a_board", "not a PublicBoard"),
    ],
)
def test_a_board_json_cannot_carry_is_dropped_with_the_reason(
    flaw: str, expected: str, caplog: pytest.LogCaptureFixture
) -> None:
    from games.api import PublicBoard
    from games.boardjson import MAX_BOARD_CHARS
    from games.native.lowest_unique import LowestUniqueGame
    from games.session import GameSession

    class OddBoard(LowestUniqueGame):
        def public_board(self) -> PublicBoard:
            if flaw == "nan":
                return PublicBoard(kind="scores", pot=float("nan"))
            if flaw == "set":
                return PublicBoard(kind="scores", extra={"picked": {1, 2}})
            if flaw == "huge":
                return PublicBoard(kind="grid", grid=(("x" * MAX_BOARD_CHARS,),))
            return "a string"  # type: ignore[return-value]

    session = GameSession(OddBoard(), f"OddBoard-{flaw}-v0", 2, seed=0)
    session.start()
    assert session.public_board() is None
    assert session.outcome is None
    assert any(expected in r.getMessage() for r in caplog.records)
