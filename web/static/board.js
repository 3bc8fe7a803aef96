// Boards drawn from the protocol's board objects (docs/protocol.md, "Boards"): a grid with
// the last move highlighted and clickable cells for the seat to move, a card table, a
// result banner, and the text as the fallback (and on demand). Shared by the match and
// replay pages; it knows no game, only the fields of a board.
"use strict";

const ArenaBoard = (() => {
  const { el, clear } = Arena;

  function seatName(info, seat) {
    const name = ((info && info.players) || [])[seat];
    return name ? `seat ${seat} (${name})` : `seat ${seat}`;
  }

  /** The seat a grid value belongs to (board.marks), or null. */
  function markSeat(board, value) {
    const marks = board.marks || {};
    return Object.prototype.hasOwnProperty.call(marks, value) ? Number(marks[value]) : null;
  }

  /** "r,c" of the cells that differ from the previous board (the last move); empty when
   *  there is no previous board or its grid has another shape. */
  function changed(board, prev) {
    const out = new Set();
    const rows = board.grid || [];
    const before = prev && prev.grid;
    if (!before || before.length !== rows.length) return out;
    rows.forEach((row, r) => {
      const old = before[r] || [];
      if (old.length !== row.length) return;
      row.forEach((cell, c) => { if (String(cell) !== String(old[c])) out.add(`${r},${c}`); });
    });
    return out;
  }

  function cellMove(template, r, c, width) {
    return String(template).replaceAll("{row}", String(r)).replaceAll("{col}", String(c))
      .replaceAll("{index}", String(r * width + c));
  }

  /** A grid board. ``play``: {legalMoves, onMove} when this browser's seat is to move. */
  function grid(board, prev, info, play) {
    const rows = board.grid || [];
    const width = Math.max(1, ...rows.map((row) => row.length));
    const size = width <= 3 ? 76 : width <= 8 ? 48 : 30;
    const discs = board.style === "discs";
    const last = changed(board, prev);
    const box = el("div", { class: `board-grid${discs ? " discs" : " marks"}`,
      "data-rows": rows.length, "data-cols": width });
    box.style.gridTemplateColumns = `repeat(${width}, ${size}px)`;
    box.style.setProperty("--cell", `${size}px`);
    const clickable = play && board.cell_move;
    const legal = play && Array.isArray(play.legalMoves) ? play.legalMoves : null;
    rows.forEach((row, r) => {
      for (let c = 0; c < width; c++) {
        const value = row[c] === undefined || row[c] === null ? "" : String(row[c]);
        const seat = value ? markSeat(board, value) : null;
        const classes = ["cell"];
        if (last.has(`${r},${c}`)) classes.push("last");
        if (seat !== null) classes.push(`p${seat % 6}`);
        const attrs = { class: classes.join(" "), "data-row": r, "data-col": c,
          "data-value": value, title: value ? `${value}${seat !== null ? ` · seat ${seat}` : ""}` : null };
        let node;
        if (clickable) {
          const move = cellMove(board.cell_move, r, c, width);
          const allowed = legal === null ? !value || discs : legal.includes(move);
          node = el("button", { ...attrs, type: "button", "data-move": move, disabled: !allowed,
            onclick: () => play.onMove(move) });
          if (allowed) node.classList.add("playable");
        } else {
          node = el("div", attrs);
        }
        if (discs) node.append(el("span", { class: "disc", text: "" }));
        else node.append(el("span", { class: "mark", text: value }));
        box.append(node);
      }
    });
    if (clickable && discs) {
      // A click anywhere in a column drops a disc there: light up the whole column.
      box.addEventListener("mouseover", (e) => {
        const cell = e.target.closest(".cell");
        box.querySelectorAll(".cell.column").forEach((n) => n.classList.remove("column"));
        if (!cell || cell.disabled) return;
        box.querySelectorAll(`.cell[data-col="${cell.dataset.col}"]`).forEach((n) => n.classList.add("column"));
      });
      box.addEventListener("mouseleave", () => {
        box.querySelectorAll(".cell.column").forEach((n) => n.classList.remove("column"));
      });
    }
    const legend = el("div", { class: "legend small" });
    for (const [value, seat] of Object.entries(board.marks || {})) {
      legend.append(el("span", { class: `key p${Number(seat) % 6}` },
        el("span", { class: discs ? "disc" : "mark", text: discs ? "" : value }),
        ` ${seatName(info, Number(seat))}`));
    }
    if (board.to_move !== undefined && board.to_move !== null) {
      legend.append(el("span", { class: "to-move" }, `${seatName(info, board.to_move)} to move`));
    }
    return el("div", { class: "board-wrap" }, box, legend);
  }

  function card(face) {
    return el("span", { class: "card face", "data-card": face, text: face });
  }

  function back() {
    return el("span", { class: "card back", title: "face down" });
  }

  function number(value) {
    if (value === null || value === undefined) return "";
    const n = Number(value);
    return Number.isInteger(n) ? String(n) : n.toFixed(2);
  }

  /** Whether ``seat`` is to act, and its tag: in a simultaneous round (``round``: {round,
   *  movers, moved}) who is still to move and who has moved (never what); else whose turn
   *  the board says it is. */
  function seatTurn(board, round, seat, label) {
    const asked = round && (round.movers || []).includes(seat);
    const moved = asked && (round.moved || []).includes(seat);
    const toAct = asked ? !moved : board.to_move === seat;
    const tag = toAct ? el("span", { class: "to-move", text: label })
      : moved ? el("span", { class: "moved", text: "moved" }) : null;
    return [toAct, tag];
  }

  /** A card table: seats with chips, scores and cards; the pot, the table's face-up cards,
   *  the round and the hand's moves, the last one highlighted. */
  function table(board, info, round) {
    const players = (info && info.players) || [];
    const seats = new Set(players.map((_, i) => i));
    for (const key of ["chips", "scores", "face_down"]) {
      Object.keys(board[key] || {}).forEach((s) => seats.add(Number(s)));
    }
    const cards = board.cards || {};
    const seatBoxes = [...seats].sort((a, b) => a - b).map((seat) => {
      const faces = cards[`seat ${seat}`];
      const down = Number((board.face_down || {})[seat] || 0);
      const hand = el("div", { class: "hand" });
      if (faces && faces.length) faces.forEach((f) => hand.append(card(String(f))));
      else for (let i = 0; i < down; i++) hand.append(back());
      const stats = el("div", { class: "stats small" });
      if (board.chips && board.chips[seat] !== undefined) {
        stats.append(el("span", { class: "chips", text: `chips ${number(board.chips[seat])}` }));
      }
      if (board.scores && board.scores[seat] !== undefined) {
        stats.append(el("span", { class: "score", text: `points ${number(board.scores[seat])}` }));
      }
      const [toAct, tag] = seatTurn(board, round, seat, "to act");
      return el("div", { class: `table-seat p${seat % 6}${toAct ? " turn" : ""}`,
        "data-seat": seat },
        el("div", { class: "name" }, seatName(info, seat), tag),
        hand, stats);
    });
    const middle = el("div", { class: "felt" });
    if (board.round !== undefined && board.round !== null) {
      const most = board.extra && board.extra.max_rounds;
      middle.append(el("div", { class: "round small", text: `round ${board.round}${most ? ` of ${most}` : ""}` }));
    }
    if (board.pot !== undefined && board.pot !== null) {
      middle.append(el("div", { class: "pot" }, el("span", { class: "chip" }), `pot ${number(board.pot)}`));
    }
    for (const [where, faces] of Object.entries(cards)) {
      if (where.startsWith("seat ")) continue;
      middle.append(el("div", { class: "table-cards" }, el("span", { class: "small muted", text: where }),
        ...(faces || []).map((f) => card(String(f)))));
    }
    const history = board.history || [];
    if (history.length) {
      const list = el("ol", { class: "history small" });
      history.forEach((move, i) => list.append(el("li",
        { class: i === history.length - 1 ? "last" : "", text: move })));
      middle.append(list);
    }
    const half = Math.ceil(seatBoxes.length / 2);
    return el("div", { class: `card-table kind-${board.kind}` },
      el("div", { class: "side" }, ...seatBoxes.slice(0, half)), middle,
      el("div", { class: "side" }, ...seatBoxes.slice(half)));
  }

  function shown(value) {
    if (value === null || value === undefined) return "";
    if (typeof value === "number") return number(value);
    if (typeof value === "string") return value;
    return JSON.stringify(value);
  }

  /** The generic board, for a board that is neither a grid nor a card table (a game of
   *  points, or a game's own kind): each seat with its score or chips and whose turn it is,
   *  then every other field the board holds (``round``, ``extra``, ``history``) as tiles.
   *  ``round``: the open simultaneous round, as for ``table``. */
  function scoreboard(board, info, round) {
    const players = (info && info.players) || [];
    const seats = new Set(players.map((_, i) => i));
    for (const key of ["chips", "scores"]) Object.keys(board[key] || {}).forEach((s) => seats.add(Number(s)));
    const seatBoxes = [...seats].sort((a, b) => a - b).map((seat) => {
      const score = (board.scores || {})[seat];
      const chips = (board.chips || {})[seat];
      const [toAct, tag] = seatTurn(board, round, seat, "to move");
      return el("div", { class: `score-seat p${seat % 6}${toAct ? " turn" : ""}`,
        "data-seat": seat },
        el("div", { class: "name" }, seatName(info, seat), tag),
        score !== undefined ? el("div", { class: "points", text: number(score) }) : null,
        score !== undefined ? el("div", { class: "small muted", text: "points" }) : null,
        chips !== undefined ? el("div", { class: "chips small", text: `chips ${number(chips)}` }) : null);
    });
    const facts = [];
    if (board.round !== undefined && board.round !== null) facts.push(["round", board.round]);
    if (board.pot !== undefined && board.pot !== null) facts.push(["pot", board.pot]);
    for (const [key, value] of Object.entries(board.extra || {})) facts.push([key, value]);
    const tiles = el("div", { class: "facts" }, ...facts.map(([key, value]) =>
      el("div", { class: "fact", "data-key": key },
        el("div", { class: "value", text: shown(value) }), el("div", { class: "key small muted", text: key }))));
    const history = board.history || [];
    const list = history.length ? el("ol", { class: "history small" }, ...history.map((move, i) =>
      el("li", { class: i === history.length - 1 ? "last" : "", text: move }))) : null;
    return el("div", { class: `scoreboard kind-${board.kind}` },
      el("div", { class: "score-seats" }, ...seatBoxes), facts.length ? tiles : null, list);
  }

  /** The result in one sentence: who won, a draw, or why the match was aborted. Each
   *  seat's result (win, draw, loss) comes from the server (games.outcome). */
  function resultSentence(result, info) {
    if (!result) return "";
    const reason = result.reason ? ` (${result.reason})` : "";
    if (result.status === "aborted") return `Aborted: ${result.reason || "no reason given"}`;
    const results = result.results || [];
    const forfeits = (result.forfeited || []).map((s) => `${seatName(info, s)} forfeited`);
    const extra = forfeits.length ? ` · ${forfeits.join(", ")}` : "";
    if (result.status === "truncated") return `Draw: ${result.reason || "stopped at the move limit"}`;
    if (!results.length) return `${result.status}${reason}`;
    const seatsWith = (kind) => results.map((r, i) => (r === kind ? i : -1)).filter((i) => i >= 0);
    const capital = (text) => `${text[0].toUpperCase()}${text.slice(1)}`;
    const winners = seatsWith("win");
    if (winners.length) return `${capital(seatName(info, winners[0]))} wins${reason}${extra}`;
    const drawn = seatsWith("draw");
    if (drawn.length === results.length) return `Draw${reason}${extra}`;
    const names = drawn.map((i) => seatName(info, i)).join(" and ");
    return `${capital(names)} share first place${reason}${extra}`;
  }

  function banner(result, info) {
    if (!result) return null;
    const won = (result.results || []).includes("win");
    const kind = result.status === "aborted" ? "aborted"
      : result.status === "truncated" || !won ? "draw" : "won";
    return el("div", { class: `result-banner ${kind}`, role: "status" }, resultSentence(result, info));
  }

  /** Draw into ``box``: the result banner (when ``result``), the board (grid, card table,
   *  or the text when there is no board to draw), and a toggle to read the text.
   *  opts: {board, prev, info, result, text, play, note, round} (``round``: the open
   *  simultaneous round, ``{round, movers, moved}``). */
  function render(box, opts) {
    clear(box);
    const { board, prev, info, result, text, play } = opts;
    const ban = banner(result, info);
    if (ban) box.append(ban);
    let drawn = null;
    let generic = false;
    if (board && board.kind === "grid" && Array.isArray(board.grid) && board.grid.length) {
      drawn = grid(board, prev, info, play);
    } else if (board && (board.kind === "cards" || board.cards || board.face_down)) {
      drawn = table(board, info, opts.round || null);
    } else if (board && typeof board === "object") {
      drawn = scoreboard(board, info, opts.round || null);
      generic = true;
    }
    const shown = text || "(this game shows no public board: follow the moves)";
    if (!drawn) {
      box.append(el("pre", { class: "board board-text", text: shown }));
      return;
    }
    if (generic) { // the game's own text is its public state: shown, not folded away
      box.append(drawn, el("pre", { class: "board board-text public-state", text: shown }));
      return;
    }
    box.append(drawn);
    const toggle = el("details", { class: "text-toggle" },
      el("summary", { class: "small", text: "Text view" }),
      el("pre", { class: "board board-text", text: shown }));
    if (opts.textOpen) toggle.open = true;
    toggle.addEventListener("toggle", () => { if (opts.onTextToggle) opts.onTextToggle(toggle.open); });
    box.append(toggle);
  }

  /** Once a match has ended: ``board`` with the faces of the seats' cards filled in from
   *  the latest earlier all-seeing board of the same round, when it shows none itself (the
   *  board after a hand's last move no longer holds that hand). */
  function withKnownCards(board, earlier) {
    if (!board || board.kind !== "cards") return board;
    const has = Object.keys(board.cards || {}).some((k) => k.startsWith("seat "));
    if (has) return board;
    for (let i = earlier.length - 1; i >= 0; i--) {
      const b = earlier[i];
      if (!b || b.round !== board.round) continue;
      const seatCards = Object.entries(b.cards || {}).filter(([k]) => k.startsWith("seat "));
      if (seatCards.length) {
        return { ...board, face_down: undefined, cards: { ...(board.cards || {}), ...Object.fromEntries(seatCards) } };
      }
    }
    return board;
  }

  return { render, banner, resultSentence, withKnownCards, changed };
})();
