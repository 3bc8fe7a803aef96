// The leaderboard of a game, best first: Bradley-Terry fitted to every stored rated result
// (the default; the live ratings are this fit kept current, so it reloads as rated matches
// end), each rating's 95 % interval drawn as a bar; or openskill replayed for comparison.
"use strict";
(() => {
  const { el, clear } = Arena;
  const gameSelect = document.getElementById("game");
  const methodSelect = document.getElementById("method");
  const params = Arena.params();
  let game = params.get("game") || "";
  methodSelect.value = params.get("method") === "openskill" ? "openskill" : "bt";
  let conn = null;
  let watched = null; // the game whose ratings stream this page follows
  let reloadTimer = null;

  function policyCell(row) {
    const label = row.label || row.policy;
    return el("td", {}, label,
      label !== row.policy ? el("span", { class: "muted small mono" }, `  ${row.policy}`) : null);
  }

  /** A rating's 95 % interval as a bar on the board's common scale, the rating a tick. */
  function intervalCell(row, low, high) {
    const span = high - low || 1;
    const at = (x) => `${(100 * (x - low)) / span}%`;
    const bar = el("div", { class: "interval" },
      el("span", { class: "interval-bar", style: `left:${at(row.lower)};width:${
        (100 * (row.upper - row.lower)) / span}%` }),
      el("span", { class: "interval-tick", style: `left:${at(row.rating)}` }));
    bar.title = `${row.rating.toFixed(0)} (95 %: ${row.lower.toFixed(0)} – ${row.upper.toFixed(0)})`;
    return el("td", { class: "interval-cell" }, bar);
  }

  function render(board) {
    const head = clear(document.querySelector("#board thead"));
    const body = clear(document.querySelector("#board tbody"));
    const bt = board.method === "bt";
    head.append(el("tr", {}, el("th", { class: "num", text: "Rank" }), el("th", { text: "Player" }),
      ...(bt
        ? [el("th", { class: "num", text: "Rating" }), el("th", { class: "num", text: "95 % interval" }),
          el("th", { text: "" })]
        : [el("th", { class: "num", text: "μ − 3σ" }), el("th", { class: "num", text: "μ" }),
          el("th", { class: "num", text: "σ" })]),
      el("th", { class: "num", text: "Games" })));
    const low = Math.min(...board.rows.map((r) => r.lower ?? 0));
    const high = Math.max(...board.rows.map((r) => r.upper ?? 0));
    board.rows.forEach((row) => {
      body.append(el("tr", { "data-policy": row.policy },
        el("td", { class: "num", text: row.rank }), policyCell(row),
        ...(bt
          ? [el("td", { class: "num", text: row.rating.toFixed(0) }),
            el("td", { class: "num", text: `${row.lower.toFixed(0)} – ${row.upper.toFixed(0)}` }),
            intervalCell(row, low, high)]
          : [el("td", { class: "num", text: row.ordinal.toFixed(2) }),
            el("td", { class: "num", text: row.mu.toFixed(2) }),
            el("td", { class: "num", text: row.sigma.toFixed(2) })]),
        el("td", { class: "num", text: row.games })));
    });
    const empty = document.getElementById("board-empty");
    empty.hidden = board.rows.length > 0;
    empty.textContent = board.rows.length ? "" : `No rated player in ${board.game_id} yet.`;
    const notes = clear(document.getElementById("board-notes"));
    const bits = [`${board.matches} rated matches`];
    const adv = board.seat0_score;
    if (adv) {
      bits.push(`first mover scores ${(100 * adv.score).toFixed(1)} % ` +
        `(95 %: ${(100 * adv.lower).toFixed(1)}–${(100 * adv.upper).toFixed(1)} %, ${adv.games} two-seat games)`);
    }
    notes.append(bits.join(" · "));
    for (const note of board.notes || []) notes.append(el("div", { text: note }));
    document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  }

  async function load() {
    if (!game) return;
    const query = new URLSearchParams({ game, method: methodSelect.value });
    history.replaceState(null, "", `/leaderboard?${query}`);
    document.getElementById("title").textContent = `Leaderboard · ${game}`;
    try {
      render(await Arena.getJSON(`/api/leaderboard?${query}`));
    } catch (err) {
      Arena.notice(err.message, true);
    }
    follow();
  }

  /** Follow the game's ratings stream: each rated match's new ratings reload the board. */
  function follow() {
    if (!conn || !game || watched === game) return;
    if (watched) conn.send({ type: "unsubscribe", stream: "ratings", game: watched });
    watched = game;
    conn.send({ type: "subscribe", stream: "ratings", game });
  }

  function reloadSoon() {
    clearTimeout(reloadTimer);
    reloadTimer = setTimeout(load, 500); // a burst of ended matches: one reload
  }

  async function games() {
    const ids = new Set(game ? [game] : []);
    try {
      (await Arena.getJSON("/api/games")).games.forEach((g) => ids.add(g.id));
    } catch (err) { /* the stored matches still name games */ }
    try {
      (await Arena.getJSON("/api/matches?limit=1000")).matches.forEach((m) => ids.add(m.game_id));
    } catch (err) { /* no database */ }
    clear(gameSelect);
    for (const id of [...ids].sort()) gameSelect.append(el("option", { value: id, text: id }));
    if (!game && ids.size) game = ids.has("TicTacToe-v0") ? "TicTacToe-v0" : [...ids].sort()[0];
    gameSelect.value = game;
    load();
  }

  gameSelect.addEventListener("change", () => { game = gameSelect.value; load(); });
  methodSelect.addEventListener("change", load);
  conn = new Arena.Connection({
    onOpen: () => { watched = null; follow(); },
    onMessage: (m) => {
      if (m.type === "ratings_changed" && m.game_id === game) reloadSoon();
      else if (m.type === "error") Arena.notice(m.message, true);
    },
  });
  games();
})();
