"""GameSession guards, on real TextArena games and the native game."""

from __future__ import annotations

import random

import pytest

import games
from games.limits import InvalidMovePolicy, SessionLimits
from games.session import Status
from games.sessionerrors import GameOver, NotYourTurn


def play_random(session: games.GameSession, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    moves = []
    while not session.done:
        seat = session.current_player()
        legal = session.legal_moves(seat) or ["[0]"]
        move = rng.choice(legal)
        moves.append(move)
        session.step(seat, move)
    return moves


@pytest.mark.parametrize("game_id", ["TicTacToe-v0", "ConnectFour-v0", "LowestUnique-v0"])
def test_random_play_finishes_without_invalid_moves(game_id: str) -> None:
    session = games.make(game_id, seed=3)
    play_random(session, seed=3)
    assert session.outcome is not None
    assert session.outcome.status is Status.FINISHED
    assert sum(session.invalid_moves) == 0
    assert set(session.outcome.rewards) == set(range(session.num_players))


def test_kuhn_poker_starts_with_player_one() -> None:
    session = games.make("KuhnPoker-v0", seed=0)
    assert session.current_player() == 1


@pytest.mark.parametrize("game_id", ["KuhnPoker-v0", "LowestUnique-v0"])
def test_same_seed_same_game_even_when_interleaved(game_id: str) -> None:
    def transcript(sessions: list[games.GameSession]) -> list[list[str]]:
        rngs = [random.Random(7) for _ in sessions]
        # Interleave moves of all sessions, as concurrent matches do.
        while not all(s.done for s in sessions):
            for s, rng in zip(sessions, rngs, strict=True):
                if not s.done:
                    seat = s.current_player()
                    s.step(seat, rng.choice(s.legal_moves(seat) or ["[0]"]))
                    random.random()  # other code drawing from the global RNG meanwhile
        return [[m.text for m in s.seat_messages(0)] for s in sessions]

    alone = transcript([games.make(game_id, seed=11)])[0]
    mixed = transcript([games.make(game_id, seed=s) for s in (11, 12, 11)])
    assert mixed[0] == alone
    assert mixed[2] == alone
    other = transcript([games.make(game_id, seed=12)])[0]
    if game_id == "KuhnPoker-v0":  # different deals
        assert other != alone


def test_forfeit_policy_first_invalid_move_loses_with_penalty() -> None:
    limits = SessionLimits(invalid_move_penalty=-2.0)
    session = games.make("TicTacToe-v0", seed=0, limits=limits)
    record = session.step(0, "I refuse to play")
    assert not record.valid and record.done
    assert session.outcome.status is Status.FINISHED
    assert session.outcome.rewards == {0: -2.0, 1: 1.0}
    assert session.outcome.forfeited == {0}


def test_retry_policy_allows_one_retry_then_loses() -> None:
    limits = SessionLimits(invalid_move_policy=InvalidMovePolicy.RETRY)
    session = games.make("TicTacToe-v0", seed=0, limits=limits)
    first = session.step(0, "nonsense")
    assert not first.valid and not first.done
    assert session.current_player() == 0  # same seat retries
    ok = session.step(0, "[4]")
    assert ok.valid and session.current_player() == 1
    session.step(1, "bad")
    last = session.step(1, "still bad")
    assert last.done
    assert session.outcome.rewards == {0: 1.0, 1: -1.0}
    assert session.invalid_moves == [1, 2]


@pytest.mark.parametrize("policy", ["forfeit", "retry"])
def test_first_move_invalid_each_seat_sees_only_its_own_prompt(policy: str) -> None:
    session = games.make("TicTacToe-v0", seed=0, limits=SessionLimits(invalid_move_policy=policy))
    session.step(0, "garbage")
    if not session.done:
        session.step(0, "[0]")
    seat1 = "\n".join(m.text for m in session.seat_messages(1))
    assert "You are Player 1" in seat1
    assert "You are Player 0" not in seat1
    seat0 = "\n".join(m.text for m in session.seat_messages(0))
    assert "You are Player 0" in seat0 and "You are Player 1" not in seat0


def test_huge_action_is_cut_to_the_cap_and_judged_by_the_game() -> None:
    session = games.make("TicTacToe-v0", seed=0)
    record = session.step(0, "[4]" + "x" * 100_000)
    assert record.truncated and len(record.action) == 2_000
    assert record.valid


def test_action_beyond_cap_cannot_hide_a_move() -> None:
    session = games.make("TicTacToe-v0", seed=0)
    record = session.step(0, "x" * 50_000 + "[4]")
    assert record.truncated and not record.valid
    assert session.outcome.status is Status.FINISHED  # forfeit, not a crash


@pytest.mark.parametrize(
    "action",
    ["[" + "9" * 5_000 + "]", "9" * 5_000, "", "\x00\x01\ufffd\udcff garbage \U0001f600", "   "],
)
@pytest.mark.parametrize("game_id", ["TicTacToe-v0", "ConnectFour-v0", "KuhnPoker-v0"])
def test_garbage_actions_get_a_defined_outcome(game_id: str, action: str) -> None:
    session = games.make(game_id, seed=0)
    seat = session.current_player()
    record = session.step(seat, action)
    assert not record.valid
    assert session.outcome is not None and session.outcome.status is Status.FINISHED
    assert session.outcome.rewards[seat] == -1.0


def test_no_step_after_the_game_is_over() -> None:
    session = games.make("TicTacToe-v0", seed=0)
    session.step(0, "bad")
    with pytest.raises(GameOver):
        session.step(1, "[4]")


def test_move_out_of_turn_is_refused() -> None:
    session = games.make("TicTacToe-v0", seed=0)
    with pytest.raises(NotYourTurn):
        session.step(1, "[4]")


def test_move_cap_stops_the_game_as_truncated() -> None:
    session = games.make("LowestUnique-v0", 2, seed=0, limits=SessionLimits(max_turns=3))
    play_random(session)
    assert len(session.turns) == 3
    assert session.outcome.status is Status.TRUNCATED
    assert session.outcome.rewards == {0: 0.0, 1: 0.0}


def test_game_prints_stay_out_of_our_output(capsys: pytest.CaptureFixture[str]) -> None:
    session = games.make("TicTacToe-v0", seed=0)
    play_random(session)
    captured = capsys.readouterr()
    assert captured.out == ""


def test_private_messages_reach_only_their_seat() -> None:
    session = games.make("KuhnPoker-v0", seed=0)
    private0 = [m for m in session.seat_messages(0) if not m.public]
    private1 = [m for m in session.seat_messages(1) if not m.public]
    assert private0 and private1
    assert all(m.to == 0 for m in private0)
    assert all(m.to == 1 for m in private1)
    public = session.public_messages()
    assert not any(m in public for m in private0 + private1)


def test_limits_are_validated() -> None:
    with pytest.raises(ValueError, match="max_action_chars"):
        SessionLimits(max_action_chars=0)
    with pytest.raises(ValueError):
        SessionLimits(invalid_move_policy="sometimes")  # type: ignore[arg-type]


SWAPPED_ARGUMENT_GAMES = ("Countdown-v0", "Cryptarithm-v0", "Slitherlink-v0", "ThreeCardMonte-v0")


@pytest.mark.parametrize("game_id", SWAPPED_ARGUMENT_GAMES)
def test_a_forfeit_is_penalised_when_textarena_passes_the_reason_as_reward(game_id: str) -> None:
    # These games call set_invalid_move(progress, reason): TextArena's reward is the text.
    session = games.make(game_id, seed=1)
    record = session.step(session.current_player(), "garbage with no brackets")
    assert not record.valid and record.done
    assert record.reason is not None and not record.reason[0].isdigit()  # the text, not 0.33
    assert session.outcome is not None and session.outcome.status is Status.FINISHED
    assert session.outcome.rewards == {0: -1.0} and session.outcome.forfeited == {0}


@pytest.mark.parametrize("game_id", SWAPPED_ARGUMENT_GAMES)
def test_retry_policy_lets_those_games_retry_an_invalid_move(game_id: str) -> None:
    limits = SessionLimits(invalid_move_policy=InvalidMovePolicy.RETRY)
    session = games.make(game_id, seed=1, limits=limits)
    record = session.step(session.current_player(), "garbage")
    assert not record.valid and not record.done and not session.done


def test_textarena_messages_with_odd_types_are_coerced_at_the_adapter() -> None:
    import enum

    import textarena as ta

    class Who(enum.IntEnum):
        SECOND = 1

    session = games.make("TicTacToe-v0", seed=0)
    state = session.game._env.state  # type: ignore[attr-defined]

    def odd() -> None:
        state.add_observation(message=12345, observation_type=ta.ObservationType.GAME_MESSAGE)
        state.add_observation(
            message="from an enum",
            observation_type=ta.ObservationType.PLAYER_ACTION,
            from_id=Who.SECOND,
            to_id=Who.SECOND,
        )

    session.game._call(odd)  # type: ignore[attr-defined]
    session._collect()
    seat1 = session.seat_messages(1)[-2:]
    assert [m.text for m in seat1] == ["12345", "from an enum"]
    assert all(type(m.text) is str and type(m.sender) is int for m in seat1)
    assert type(seat1[1].to) is int and seat1[1].to == 1
