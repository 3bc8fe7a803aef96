"""Per-game modules: one legal-move reader, compact views, public boards, hidden redraws;
the games the play page offers are really playable by the random bot."""

from __future__ import annotations

import random

import pytest

import games
from arena.play import play_matches
from arena.renderers import compact_observation
from games.api import GridRows
from games.legal import extract_legal_moves
from games.registry import game_kit, moves_are_public, read_legal_moves


@pytest.mark.parametrize(
    ("text", "moves"),
    [
        ("Current Board:\n 0 | 1 \n\nAvailable Moves: '[0]', '[4]'", ["[0]", "[4]"]),
        ("Your available actions are: '[check]', '[bet]'", ["[check]", "[bet]"]),
        # Game of Pure Strategy and High Society list a hand, not "moves".
        ("Your remaining hand: '[A]' '[2]' '[10]' '[K]'", ["[A]", "[2]", "[10]", "[K]"]),
        ("Your remaining money cards: '[1]' '[11]'", ["[1]", "[11]"]),
        # Templates are not moves (Indian poker's '[bet X]').
        ("Your possible actions: '[check]', '[bet X]'", ["[check]"]),
        ("Valid moves: [<number>]", None),
        ("Available Moves: up, down, left", ["[up]", "[down]", "[left]"]),
        ("no list here [4]", None),
    ],
)
def test_the_one_reader_reads_the_lists_games_print(text: str, moves: list[str] | None) -> None:
    assert extract_legal_moves(text) == moves


def test_the_last_list_wins_and_huge_texts_are_read_from_the_tail() -> None:
    text = "Available Moves: '[0]'\n\nlater\nAvailable Moves: '[7]', '[8]'"
    assert extract_legal_moves(text) == ["[7]", "[8]"]
    assert extract_legal_moves("x" * 1_000_000 + "\nValid moves: [a], [b]") == ["[a]", "[b]"]


def test_connect_four_moves_are_read_off_the_board_by_its_module() -> None:
    board = "Board state:\n0 1 2\n-----\nX . .\nO . X\nO X O"
    assert read_legal_moves(board, "ConnectFour-v0") == ["[1]", "[2]"]
    assert read_legal_moves(board) is None  # no list: the generic reader finds nothing
    assert game_kit("ConnectFour-v0").read_legal_moves is not None


# The games of the play page that the random bot could not play before (it fell back to
# '[0]' or played '[bet X]').
PREVIOUSLY_UNPLAYABLE = [
    "GameOfPureStrategy-v0",
    "HighSociety-v0",
    "IndianPoker-v0",
    "IndianPoker-v0-short",
    "IndianPoker-v0-medium",
    "IndianPoker-v0-long",
    "IndianPoker-v0-extreme",
]


@pytest.mark.parametrize("game_id", PREVIOUSLY_UNPLAYABLE)
async def test_the_random_bot_plays_only_legal_moves(game_id: str) -> None:
    stats = await play_matches(game_id, ["random", "random"], 6, seed=0)
    assert stats.finished == 6 and stats.aborted == 0
    if not game_id.startswith("IndianPoker"):
        assert [seat.invalid_moves for seat in stats.seats] == [0, 0]


@pytest.mark.parametrize("game_id", PREVIOUSLY_UNPLAYABLE[2:])
def test_indian_poker_lists_only_concrete_moves_and_each_is_accepted(game_id: str) -> None:
    rng = random.Random(0)
    for seed in range(3):
        session = games.make(game_id, 2, seed=seed)
        while not session.done:
            seat = session.current_player()
            moves = session.legal_moves(seat) or []
            assert all("X" not in move for move in moves), moves
            chips = session.game._env.state.game_state["player_chips"][seat]  # type: ignore[attr-defined]
            if chips < 0:
                # TextArena refuses every move of a bust seat: it lists none.
                assert moves == []
                break
            record = session.step(seat, rng.choice(moves))
            assert record.valid, (moves, record.reason)
        session.close()


def test_tic_tac_toe_compact_view_comes_from_its_module() -> None:
    session = games.make("TicTacToe-v0", 2, seed=0)
    seat = session.current_player()
    session.step(seat, "[4]")
    other = session.current_player()
    view = compact_observation(
        "TicTacToe-v0", session.seat_messages(other), other, session.legal_moves(other)
    )
    assert (seat, other) == (0, 1)
    assert view == "0123T5678"  # seen by seat 1: seat 0 put its mark in the centre
    session.close()


def test_connect_four_compact_view_shows_the_disc_and_rows() -> None:
    session = games.make("ConnectFour-v0", 2, seed=0)
    session.step(0, "[3]")
    view = compact_observation("ConnectFour-v0", session.seat_messages(1), 1, None)
    assert view == "/".join(["......."] * 5 + ["...T..."])  # seat 0's disc, seen by seat 1
    session.close()


def test_kuhn_compact_view_shows_the_card_the_hand_and_the_chip_lead() -> None:
    """The seat's own card is in its compact view (the generic one showed only the moves,
    so a small model could not tell a king from a jack)."""
    session = games.make("KuhnPoker-v0", 2, seed=5)  # seat 0 gets J, then J, then Q
    first = session.current_player()
    session.step(first, "[bet]")
    other = session.current_player()
    view = compact_observation(
        "KuhnPoker-v0", session.seat_messages(other), other, session.legal_moves(other)
    )
    assert view == "Jb r1 +0 fold/call"
    session.step(other, "[call]")  # a showdown: player 1's Q beats the J
    seat = session.current_player()
    view = compact_observation(
        "KuhnPoker-v0", session.seat_messages(seat), seat, session.legal_moves(seat)
    )
    assert view == ("J r2 -2 check/bet" if seat == 0 else "Q r2 +2 check/bet")
    session.close()


def test_pure_strategy_compact_view_shows_the_prize_and_the_hand() -> None:
    session = games.make("GameOfPureStrategy-v0", 2, seed=5)  # the first prize is a 10
    view = compact_observation("GameOfPureStrategy-v0", session.seat_messages(0), 0, None)
    assert view == "10 w10 +0: A 2 3 4 5 6 7 8 9 10 J Q K"
    session.step(session.current_player(), "[K]")
    session.step(session.current_player(), "[2]")
    seat = session.current_player()
    view = compact_observation("GameOfPureStrategy-v0", session.seat_messages(seat), seat, None)
    hand = view.split(": ")[1].split()
    assert len(hand) == 12 and view.startswith("5 w5 ") and view.split()[2] in ("+10:", "-10:")
    session.close()


async def test_the_prize_bot_bids_the_prizes_own_card() -> None:
    from games.bots import BotView, make_bot

    results = await play_matches("GameOfPureStrategy-v0", ["prize", "random"], 20, seed=1)
    prize_seat = results.seats[0]
    assert prize_seat.wins > prize_seat.losses  # the heuristic beats random play
    session = games.make("GameOfPureStrategy-v0", 2, seed=5)  # the first prize is a 10
    seat = session.current_player()
    bot = make_bot("prize", 0, "GameOfPureStrategy-v0")
    moves = session.legal_moves(seat)
    view = BotView("GameOfPureStrategy-v0", seat, session.seat_messages(seat), moves)
    assert bot.act(view) == "[10]"
    session.close()


def test_boards_are_structured_and_public() -> None:
    session = games.make("TicTacToe-v0", 2, seed=0)
    session.step(session.current_player(), "[0]")
    board = session.public_board()
    assert board is not None and board["kind"] == "grid"
    assert board["grid"][0] == ["O", "", ""] and board["to_move"] == 1
    session.close()

    kuhn = games.make("KuhnPoker-v0", 2, seed=0)
    first = kuhn.current_player()
    kuhn.step(first, "[bet]")
    board = kuhn.public_board()
    assert board is not None
    # TextArena's Kuhn poker never adds a bet to the pot: it stays at the two antes.
    assert board["pot"] == 2.0 and board["history"] == [f"Player {first}: bet"]
    assert "cards" not in board  # no face-up cards while the hand is live
    assert kuhn.legal_moves(1 - first) == ["[fold]", "[call]"]
    kuhn.close()

    assert games.make("ConnectFour-v0-blind", 2).public_board() is None


def test_remembered_grid_rows_follow_every_move_of_every_match() -> None:
    # Two Connect Four matches at once: rows remembered from one never leak into the other.
    a, b = games.make("ConnectFour-v0", 2, seed=0), games.make("ConnectFour-v0", 2, seed=0)
    for move in ("[3]", "[3]", "[4]"):
        a.step(a.current_player(), move)
    b.step(b.current_player(), "[0]")
    for session in (a, b):
        rows = session.game._env.state.game_state["board"]  # TextArena's own grid
        expected = [["" if cell == "." else cell for cell in row] for row in rows]
        board = session.public_board()
        assert board is not None and board["grid"] == expected
    assert a.public_board()["grid"][-1][3:5] == ["X", "X"]  # type: ignore[index]
    assert b.public_board()["grid"][-1][:2] == ["X", ""]  # type: ignore[index]
    a.close()
    b.close()


def test_grid_rows_are_bounded_and_turn_unhashable_cells_anyway() -> None:
    rows = GridRows(lambda cell: str(cell).upper(), max_rows=2)
    assert rows([["a", "b"], ["c", "d"], ["e", "f"]]) == (("A", "B"), ("C", "D"), ("E", "F"))
    assert len(rows._rows) == 2  # the third row was turned, not remembered
    assert rows([["e", "f"]]) == (("E", "F"),)
    assert rows([[["x"], "y"]]) == (("['X']", "Y"),)  # a list is no dict key


def test_kuhn_moves_are_public_but_its_cards_are_not() -> None:
    assert moves_are_public("KuhnPoker-v0") and moves_are_public("TicTacToe-v0")
    assert not moves_are_public("GameOfPureStrategy-v0")  # bids are secret
    assert games.get_spec("KuhnPoker-v0").hidden_information


def test_redrawing_hidden_cards_keeps_what_the_seat_knows() -> None:
    session = games.make("KuhnPoker-v0", 2, seed=1)
    seat = session.current_player()
    env = session.game._env  # type: ignore[attr-defined]
    mine = env.state.game_state["player_cards"][seat]
    seen = set()
    for i in range(20):
        twin = session.game.resample_hidden(seat, random.Random(i))
        assert twin is not None
        cards = twin._env.state.game_state["player_cards"]  # type: ignore[attr-defined]
        assert cards[seat] == mine and cards[1 - seat] != mine
        seen.add(cards[1 - seat])
        assert twin.public_board() == session.game.public_board()
    assert len(seen) == 2  # both cards the seat does not hold come up
    # The original is untouched.
    assert env.state.game_state["player_cards"][seat] == mine
    session.close()


def test_grid_boards_say_whose_marks_and_what_a_click_plays() -> None:
    ttt = games.make("TicTacToe-v0", 2, seed=0)
    ttt.step(ttt.current_player(), "[5]")
    board = ttt.public_board()
    assert board is not None
    assert board["grid"][1] == ["", "", "O"]  # cell 5 is row 1, column 2
    assert board["marks"] == {"O": 0, "X": 1} and board["cell_move"] == "[{index}]"
    assert ttt.full_board() is None  # nothing hidden
    ttt.close()
    c4 = games.make("ConnectFour-v0", 2, seed=0)
    c4.step(0, "[3]")
    board = c4.public_board()
    assert board is not None
    assert board["grid"][-1][3] == "X" and board["grid"][0][3] == ""  # it fell to the bottom
    assert (board["style"], board["cell_move"], board["marks"]) == (
        "discs",
        "[{col}]",
        {"X": 0, "O": 1},
    )
    c4.close()


def test_kuhn_cards_are_face_down_in_public_and_face_up_in_the_full_board() -> None:
    session = games.make("KuhnPoker-v0", 2, seed=4)
    env = session.game._env  # type: ignore[attr-defined]
    dealt = {f"seat {s}": ["JQK"[c]] for s, c in env.state.game_state["player_cards"].items()}
    views = session.views()
    assert views.board is not None and views.full_board is not None
    assert views.board["face_down"] == {"0": 1, "1": 1} and "cards" not in views.board
    assert views.full_board["cards"] == dealt and "face_down" not in views.full_board
    while not session.done:
        seat = session.current_player()
        session.step(seat, "[check]")
    end = session.views()
    assert end.board is not None and end.full_board is None
    # The hand TextArena deals after the last one is never played: no cards, no pot, and
    # the chips are the match's result (its antes are given back).
    assert end.board["pot"] == 0.0 and "face_down" not in end.board
    assert end.board["round"] == 3 and "history" not in end.board
    outcome = session.outcome
    assert outcome is not None
    chips = end.board["chips"]
    assert sum(chips.values()) == 0.0
    winner = max(outcome.rewards, key=lambda s: outcome.rewards[s])
    assert chips[str(winner)] > chips[str(1 - winner)]
    session.close()


@pytest.mark.parametrize("game_id", ["TicTacToe-v0", "ConnectFour-v0"])
def test_moves_read_from_the_state_are_the_moves_the_text_lists(game_id: str) -> None:
    """Games whose module reads legal moves off the game state (no text parsing per move)
    list exactly what the seat's latest text shows, at every turn of random games."""
    assert game_kit(game_id).legal_moves is not None
    rng = random.Random(5)
    turns = 0
    for seed in range(40):
        session = games.make(game_id, 2, seed=seed)
        while not session.done:
            seat = session.current_player()
            moves = session.legal_moves(seat)
            text = "\n".join(m.text for m in session.seat_messages(seat))
            assert moves == read_legal_moves(text, game_id), (seed, len(session.turns))
            assert moves is not None
            # mostly legal moves, now and then a bad one (the game must list moves after it)
            session.step(seat, rng.choice(moves) if rng.random() < 0.95 else "[9]")
            turns += 1
        assert session.legal_moves(0) is None and session.legal_moves(1) is None
    assert turns > 200
