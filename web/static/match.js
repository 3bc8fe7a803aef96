// One match, live move by move (versioned stream, resumed after a reconnect), and the
// seat this tab holds, if it started the match.
"use strict";
(() => {
  const { el, clear, badge, resultText, outcomeClass, playerName, shortId } = Arena;
  const matchId = Arena.params().get("id") || "";
  let token = Arena.seatToken(matchId);
  const state = {
    v: null, epoch: null, info: null, turns: [], status: "live", result: null,
    reveal: null, pending: null, publicState: null, seat: null, transcript: "",
    round: null, // the open simultaneous round: {round, movers, moved} (who, never what)
  };
  let subscribeRef = null;
  let offline = false; // the server is gone: a live match's status is unknown until it is back
  let gone = false; // the server we reconnected to does not know this match
  const playing = Arena.playParams(matchId); // {game, opponent, seat} when this tab started it

  function subscribe() {
    const request = { type: "subscribe", stream: "match", match_id: matchId };
    if (state.v !== null) Object.assign(request, { since: state.v, epoch: state.epoch });
    if (token) request.token = token;
    subscribeRef = conn.send(request);
  }

  function applySnapshot(m) {
    Object.assign(state, {
      v: m.v, epoch: m.epoch, info: m.match_info, turns: m.turns, status: m.status,
      result: m.result, reveal: m.reveal || null, pending: m.pending, publicState: m.public_state,
      seat: m.seat, round: m.round || null,
    });
    state.transcript = (m.pending && m.pending.prompt) || state.transcript;
  }

  function applyEvent(m) {
    if (state.v === null) return;
    if (m.v !== state.v + 1) {
      if (m.v > state.v + 1) subscribe(); // a gap: ask for what was missed
      return;
    }
    state.v = m.v;
    if (m.kind === "turn") {
      state.turns.push(m.turn);
      state.publicState = m.turn.public_state;
      state.pending = null;
      if (state.round && m.turn.round === state.round.round) state.round = null;
    } else if (m.kind === "round") {
      state.round = { round: m.round, movers: m.movers, moved: m.moved };
    } else if (m.kind === "waiting") {
      state.pending = { seat: m.seat, deadline: m.deadline };
      if (m.prompt !== undefined) {
        state.pending.prompt = m.prompt;
        state.pending.legal_moves = m.legal_moves;
        state.transcript = state.transcript ? `${state.transcript}\n${m.prompt}` : m.prompt;
      }
    } else if (m.kind === "ended") {
      state.status = m.result.status;
      state.result = m.result;
      state.reveal = m.reveal;
      state.turns = m.reveal.turns;
      state.pending = null;
      state.round = null;
      state.info = { ...state.info, seed: m.reveal.seed,
        start_full_board: m.reveal.start_full_board };
    }
  }

  function renderHeader() {
    const info = state.info || {};
    const title = clear(document.getElementById("title"));
    const unknown = state.status === "live" && (offline || gone);
    title.append(unknown ? el("span", { class: "badge unknown", text: "unknown" }) : badge(state.status),
      " ", info.game_id || "Match", " ", el("span", { class: "muted small mono", text: shortId(matchId) }));
    const sub = clear(document.getElementById("subtitle"));
    const bits = [];
    if (info.run_id) bits.push(`run ${info.run_id}`);
    if (info.seed !== undefined && info.seed !== null) bits.push(`seed ${info.seed}`);
    if (state.result) bits.push(resultText({ ...state.result, players: info.players }));
    if (state.result && state.result.reason) bits.push(state.result.reason);
    if (unknown) {
      bits.push(offline ? "the server is gone: this match may have ended since (the page catches up when it is back)"
        : "the server now serving has no record of this match: how it ended is unknown");
    }
    if (bits.length) sub.append(bits.join(" · "), " · ");
    sub.append(el("a", { href: `/replay?id=${matchId}`, id: "replay-link" }, "Replay"));
    if (info.run_id && state.status !== "live") {
      sub.append(" · ", el("a", { href: `/?run=${encodeURIComponent(info.run_id)}`, id: "next-live",
        onclick: (e) => { e.preventDefault(); nextLive(info.run_id); } }, `a live match of run ${info.run_id}`));
    }
    document.title = `Arena · ${info.game_id || "match"} ${shortId(matchId)}`;
  }

  let ratingsAsked = null; // the state ("live" or ended) whose ratings were fetched
  /** [" ", badge] for a player whose rating is known, else [] (and fetch the ratings once
   * while live and once more after the end, when the match has changed them). */
  function ratingOf(info, player) {
    if (!info.game_id) return [];
    const phase = state.status === "live" ? "live" : "ended";
    if (ratingsAsked !== phase) {
      ratingsAsked = phase;
      if (phase === "ended") Arena.forgetRatings(info.game_id);
      const delay = phase === "ended" ? 1500 : 0; // the new ratings are stored just after
      setTimeout(() => Arena.ratings(info.game_id, info.players || [])
        .then(renderSeats).catch(() => {}), delay);
    }
    const known = Arena.cachedRating(info.game_id, player);
    return known ? [" ", Arena.ratingBadge(known)] : [];
  }

  function renderSeats() {
    const box = clear(document.getElementById("seats"));
    const info = state.info || { players: [] };
    const toMove = state.pending ? state.pending.seat : null;
    const round = state.status === "live" ? state.round : null;
    (info.players || []).forEach((player, seat) => {
      const asked = round ? round.movers.includes(seat) && !round.moved.includes(seat)
        : toMove === seat;
      const reward = state.result && state.result.rewards ? state.result.rewards[seat] : null;
      const invalid = state.turns.filter((t) => t.seat === seat && !t.valid).length;
      const mine = state.seat === seat;
      box.append(el("div", { class: `seat${asked ? " turn" : ""}` },
        el("div", { class: "name" }, `Seat ${seat}`, mine ? " (you)" : ""),
        el("div", { class: "muted small player" }, player +
          ((info.human_seats || []).includes(seat) ? " · person" : ""),
          ...ratingOf(info, player)),
        el("div", { class: `reward ${outcomeClass(state.result, seat)}`,
          text: reward === null || reward === undefined ? (state.status === "live" ? "…" : "–")
            : (reward > 0 ? `+${+reward.toFixed(3)}` : `${+reward.toFixed(3)}`) }),
        el("div", { class: "muted small", text: `${invalid} invalid move${invalid === 1 ? "" : "s"}` +
          (state.result && (state.result.forfeited || []).includes(seat) ? " · forfeited" : "") })));
    });
  }

  let textOpen = false;
  function renderBoard() {
    const note = document.getElementById("board-note");
    const ended = state.status !== "live";
    const info = state.info || {};
    // Live: the public boards; once ended: the all-seeing ones where the game has them.
    const pick = (t) => (ended ? t.full_board || t.board : t.board) || null;
    const start = (ended ? info.start_full_board || info.start_board : info.start_board) || null;
    const boards = [start, ...state.turns.map(pick)];
    let board = boards[boards.length - 1];
    const prev = boards.length > 1 ? boards[boards.length - 2] : null;
    if (ended) board = ArenaBoard.withKnownCards(board, boards.slice(0, -1));
    const full = ended && state.reveal ? state.reveal.full_state : null;
    const text = full || state.publicState || info.start_state || "";
    const myTurn = state.seat !== null && state.seat !== undefined && state.status === "live" &&
      state.pending && state.pending.seat === state.seat;
    ArenaBoard.render(document.getElementById("board-view"), {
      board, prev, info, result: ended ? state.result : null, text,
      round: ended ? null : state.round,
      play: myTurn ? { legalMoves: state.pending.legal_moves, onMove: sendMove } : null,
      textOpen, onTextToggle: (open) => { textOpen = open; },
    });
    document.getElementById("board-title").textContent = ended ? "Final board" : "Board";
    note.textContent = ended
      ? "The match is over: everything is shown, hidden information included."
      : myTurn && board && board.cell_move ? "Your move: click a cell, or use the move buttons."
      : "Spectators see public information only; hidden cards and roles are shown when the match ends.";
  }

  function moveItem(turn) {
    const hidden = turn.hidden && !turn.action;
    const act = hidden ? "(hidden move)" : turn.action;
    const round = turn.round ? el("span", { class: "tag round", text: `round ${turn.round}` }) : null;
    return el("li", { class: `${turn.valid ? "" : "invalid"}${hidden ? " hidden" : ""}`,
      "data-index": turn.index },
      el("span", { class: "idx", text: turn.index + 1 }),
      el("span", { class: "muted", text: playerName(state.info, turn.seat) }),
      el("span", { class: "act" }, act, round,
        turn.valid ? null : el("span", { class: "tag", text: "invalid" }),
        turn.reason ? el("div", { class: "muted small", text: turn.reason }) : null));
  }

  function renderMoves() {
    const list = clear(document.getElementById("moves"));
    state.turns.forEach((t) => list.append(moveItem(t)));
    if (state.round && state.status === "live") {
      // A simultaneous round: each seat asked, moved or not; what it played comes later.
      for (const seat of state.round.movers) {
        const moved = state.round.moved.includes(seat);
        list.append(el("li", { class: "hidden round-seat", "data-seat": seat },
          el("span", { class: "idx", text: "…" }),
          el("span", { class: "muted", text: playerName(state.info, seat) }),
          el("span", { class: "act", text: moved ? "(hidden move)" : "to move" },
            el("span", { class: "tag round", text: `round ${state.round.round}` }))));
      }
    } else if (state.pending && state.status === "live") {
      list.append(el("li", { class: "hidden" }, el("span", { class: "idx", text: "…" }),
        el("span", { class: "muted", text: playerName(state.info, state.pending.seat) }),
        el("span", { class: "act", text: "to move" })));
    }
    document.getElementById("moves-empty").hidden =
      state.turns.length > 0 || (state.round !== null && state.status === "live");
    list.scrollTop = list.scrollHeight;
  }

  function renderReveal() {
    const section = document.getElementById("reveal");
    if (!state.reveal) { section.hidden = true; return; }
    section.hidden = false;
    const box = clear(document.getElementById("views"));
    const players = (state.info && state.info.players) || [];
    players.forEach((_, seat) => {
      const turns = state.reveal.turns.filter((t) => t.seat === seat);
      const details = el("details", {}, el("summary", { text:
        `${playerName(state.info, seat)}: ${turns.length} moves` }));
      for (const t of turns) {
        details.append(el("div", { class: "small muted", text: `before move ${t.index + 1} it saw:` }),
          el("pre", { class: "text", text: t.observation || "(not recorded)" }),
          el("div", { class: "small" }, "and played ", el("b", { class: "mono", text: t.action })));
      }
      box.append(details);
    });
  }

  let countdown = null;
  function renderPlay() {
    const panel = document.getElementById("play");
    const status = document.getElementById("seat-status");
    const mine = state.seat !== null && state.seat !== undefined;
    const myTurn = mine && state.status === "live" && state.pending && state.pending.seat === state.seat;
    panel.hidden = !myTurn;
    status.hidden = !mine || myTurn;
    if (mine && !myTurn) {
      clear(status);
      if (state.status === "live") {
        status.append(`Waiting for ${(state.info.players || [])[1 - state.seat] || "the other seat"}…`);
      } else {
        status.append(`Match over: ${resultText({ ...state.result, players: state.info.players })}.`);
        if (playing) {
          const other = Number(playing.seat) === 0 ? 1 : 0;
          status.append(el("span", { class: "again" },
            el("button", { type: "button", class: "primary", id: "play-again",
              onclick: () => playAgain(playing.seat) }, "Play again"),
            el("button", { type: "button", id: "play-again-swap",
              onclick: () => playAgain(other) }, `Play again as seat ${other}`),
            el("a", { href: `/play?game=${encodeURIComponent(playing.game)}&opponent=` +
              `${encodeURIComponent(playing.opponent)}&seat=${playing.seat}` }, "Another opponent")));
        }
      }
    }
    clearInterval(countdown);
    if (!myTurn) return;
    document.getElementById("play-seat").textContent = playerName(state.info, state.seat);
    const prompt = document.getElementById("prompt");
    prompt.textContent = state.transcript || state.pending.prompt || "";
    prompt.scrollTop = prompt.scrollHeight;
    const legal = clear(document.getElementById("legal"));
    for (const move of state.pending.legal_moves || []) {
      legal.append(el("button", { class: "move", type: "button", onclick: () => sendMove(move) }, move));
    }
    const deadline = document.getElementById("deadline");
    const tick = () => {
      const left = Math.max(0, Math.round(state.pending ? state.pending.deadline - Date.now() / 1000 : 0));
      deadline.textContent = `${left} s left, then you forfeit`;
    };
    tick();
    countdown = setInterval(tick, 1000);
  }

  /** A new match against the same opponent, from this tab (its seat token kept). */
  function playAgain(seat) {
    document.querySelectorAll("#seat-status button").forEach((b) => { b.disabled = true; });
    againRef = conn.send({ type: "start_match", game: playing.game, opponent: playing.opponent,
      seat: Number(seat) });
  }
  let againRef = null;

  /** Go to a match of the run that is live now (the lobby's Watch does the same). */
  async function nextLive(run) {
    try {
      const body = await Arena.getJSON(`/api/matches?run=${encodeURIComponent(run)}&status=live&limit=1`);
      if (body.matches.length) { location.href = `/match?id=${body.matches[0].id}`; return; }
      Arena.notice(`No match of run ${run} is live now.`);
    } catch (err) {
      Arena.notice(err.message, true);
    }
  }

  function sendMove(text) {
    if (!text) return;
    conn.send({ type: "move", match_id: matchId, token, text });
    document.querySelectorAll("#legal button, #move-send, #board-view .cell")
      .forEach((b) => { b.disabled = true; });
  }

  function render() {
    renderHeader();
    renderSeats();
    renderBoard();
    renderMoves();
    renderReveal();
    renderPlay();
    document.querySelectorAll("#legal button, #move-send").forEach((b) => { b.disabled = false; });
  }

  document.getElementById("move-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const input = document.getElementById("move-text");
    sendMove(input.value.trim());
    input.value = "";
  });

  const conn = new Arena.Connection({
    onOpen: subscribe,
    onStatus: (connState) => {
      offline = connState === "closed";
      if (state.info) render();
    },
    onMessage: (m) => {
      if (m.type === "match_created" && m.ref === againRef) {
        Arena.keepSeatToken(m.match, m.token);
        Arena.keepPlayParams(m.match, { ...playing, seat: m.seat });
        location.href = `/match?id=${m.match}`;
      } else if (m.type === "snapshot" && m.match) {
        gone = false;
        applySnapshot(m);
        render();
      } else if (m.type === "event" && m.match === state.info?.id) {
        applyEvent(m);
        render();
      } else if (m.type === "event" && state.info === null) {
        return;
      } else if (m.type === "error") {
        Arena.notice(m.message, true);
        if (m.ref === subscribeRef && m.code === "unknown_match") {
          if (state.info) { gone = true; render(); } // seen before, on a server now gone
          else document.getElementById("title").textContent = "No such match";
        }
        if (m.ref === againRef) render();
        if (m.ref === subscribeRef && m.code === "forbidden" && token) {
          token = null; // the seat is gone (the server restarted): watch as a spectator
          subscribe();
        }
        if (m.code === "not_your_turn" || m.code === "forbidden") render();
      }
    },
  });
})();
