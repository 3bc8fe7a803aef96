// The lobby: live matches appear, move and finish as they happen; recent ones; filters.
"use strict";
(() => {
  const { el, clear, ago, badge, resultText, shortId } = Arena;
  const live = new Map(); // id -> lobby line
  let recent = []; // newest first, from the lobby stream
  let stored = null; // finished matches matching the filters, from the database
  let liveTotal = 0;
  const games = new Set();
  const runs = new Set();
  const gameFilter = document.getElementById("game-filter");
  const runFilter = document.getElementById("run-filter");

  function passes(line) {
    const game = gameFilter.value;
    const run = runFilter.value;
    if (game && line.game_id !== game) return false;
    if (run === "-" && line.run_id) return false;
    if (run && run !== "-" && line.run_id !== run) return false;
    return true;
  }

  function learn(line) {
    if (line.game_id && !games.has(line.game_id)) {
      games.add(line.game_id);
      gameFilter.append(el("option", { value: line.game_id, text: line.game_id }));
    }
    if (line.run_id && !runs.has(line.run_id)) {
      runs.add(line.run_id);
      runFilter.append(el("option", { value: line.run_id, text: line.run_id }));
    }
  }

  /** The players, each with its rating in the game once known (filled in later). */
  function players(line) {
    const cell = el("td", { class: "players" });
    (line.players || []).forEach((p, i) => {
      if (i) cell.append(" vs ");
      const known = Arena.cachedRating(line.game_id, p);
      cell.append(el("span", { class: "player", "data-game": line.game_id, "data-name": p },
        (line.human_seats || []).includes(i) ? `${p} (person)` : p,
        known ? " " : null, Arena.ratingBadge(known)));
    });
    return cell;
  }

  let ratingTimer = null;
  /** Put each listed player's rating beside its name (one request per game shown). */
  function showRatings() {
    if (ratingTimer) return; // one pass at a time, at most every 300 ms
    ratingTimer = setTimeout(async () => {
      try {
        const byGame = new Map();
        for (const node of document.querySelectorAll("td.players .player")) {
          const game = node.dataset.game;
          if (!game) continue;
          if (!byGame.has(game)) byGame.set(game, []);
          byGame.get(game).push(node);
        }
        for (const [game, nodes] of byGame) {
          let found;
          try {
            found = await Arena.ratings(game, nodes.map((n) => n.dataset.name));
          } catch (err) {
            continue; // no ratings for this game here (or not now): names alone
          }
          for (const node of nodes) {
            if (node.querySelector(".rating")) continue;
            const badgeNode = Arena.ratingBadge(found[node.dataset.name]);
            if (badgeNode) node.append(" ", badgeNode);
          }
        }
      } finally {
        ratingTimer = null;
      }
    }, 300);
  }

  function renderLive() {
    const body = clear(document.querySelector("#live tbody"));
    const lines = [...live.values()].filter(passes).sort((a, b) => b.started_at - a.started_at);
    for (const line of lines) {
      body.append(el("tr", { "data-id": line.id },
        el("td", {}, badge("live"), " ", line.game_id),
        players(line),
        el("td", { class: "muted", text: line.run_id || "" }),
        el("td", { class: "num", text: line.num_turns || 0 }),
        el("td", { class: "muted", text: ago(line.started_at) }),
        el("td", {}, el("a", { href: `/match?id=${line.id}`, class: "watch" }, "Watch"))));
    }
    document.getElementById("live-empty").hidden = lines.length > 0;
    showRatings();
    const hidden = liveTotal - live.size;
    document.getElementById("live-total").textContent =
      `${liveTotal} live` + (hidden > 0 ? ` (${hidden} not listed)` : "");
  }

  function renderRecent() {
    const body = clear(document.querySelector("#recent tbody"));
    const seen = new Set();
    const lines = [];
    for (const line of [...recent, ...(stored || [])]) {
      if (seen.has(line.id) || line.status === "live" || !passes(line)) continue;
      seen.add(line.id);
      lines.push(line);
    }
    lines.sort((a, b) => (b.ended_at || b.started_at) - (a.ended_at || a.started_at));
    for (const line of lines.slice(0, 50)) {
      body.append(el("tr", { "data-id": line.id },
        el("td", {}, badge(line.status), " ", line.game_id),
        players(line),
        el("td", { class: "muted", text: line.run_id || "" }),
        el("td", { text: resultText(line) }),
        el("td", { class: "num", text: line.num_turns || 0 }),
        el("td", { class: "muted", text: ago(line.ended_at) }),
        el("td", {},
          el("a", { href: `/match?id=${line.id}`, title: shortId(line.id) }, "View"), " · ",
          el("a", { href: `/replay?id=${line.id}`, class: "replay" }, "Replay"))));
    }
    document.getElementById("recent-empty").hidden = lines.length > 0;
    showRatings();
  }

  async function loadStored() {
    const query = new URLSearchParams({ limit: "50" });
    if (gameFilter.value) query.set("game", gameFilter.value);
    if (runFilter.value && runFilter.value !== "-") query.set("run", runFilter.value);
    try {
      const body = await Arena.getJSON(`/api/matches?${query}`);
      stored = body.matches;
      stored.forEach(learn);
    } catch (err) {
      stored = [];
    }
    renderRecent();
  }

  async function loadRuns() {
    const box = document.getElementById("runs");
    try {
      const body = await Arena.getJSON("/api/runs");
      clear(box);
      if (!body.runs.length) {
        box.textContent = "No training run is watched (runs write runs/<name>/metrics.jsonl).";
        return;
      }
      for (const run of body.runs) {
        box.append(el("div", {},
          el("a", { href: `/run?name=${encodeURIComponent(run.name)}` }, run.name),
          el("span", { class: "muted small" },
            `  ${run.rows} steps logged` + (run.run_id ? ` · run id ${run.run_id}` : ""))));
      }
    } catch (err) {
      box.textContent = `Cannot list runs: ${err.message}`;
    }
  }

  const conn = new Arena.Connection({
    onOpen: () => conn.send({ type: "subscribe", stream: "lobby" }),
    onMessage: (m) => {
      if (m.type === "lobby") {
        live.clear();
        m.live.forEach((line) => { live.set(line.id, line); learn(line); });
        recent = m.recent;
        recent.forEach(learn);
        liveTotal = m.live_total;
      } else if (m.type === "lobby_update") {
        m.started.forEach((line) => { live.set(line.id, line); learn(line); });
        for (const [id, n] of Object.entries(m.moved)) {
          const line = live.get(id);
          if (line) line.num_turns = n;
        }
        for (const line of m.ended) {
          live.delete(line.id);
          learn(line);
          recent = [line, ...recent.filter((r) => r.id !== line.id)].slice(0, 100);
        }
        liveTotal = m.live_total;
      } else if (m.type === "error") {
        Arena.notice(m.message, true);
        return;
      } else {
        return;
      }
      renderLive();
      renderRecent();
    },
  });

  const wanted = Arena.params();
  if (wanted.get("game")) { learn({ game_id: wanted.get("game") }); gameFilter.value = wanted.get("game"); }
  if (wanted.get("run")) { learn({ run_id: wanted.get("run") }); runFilter.value = wanted.get("run"); }
  gameFilter.addEventListener("change", () => { renderLive(); loadStored(); });
  runFilter.addEventListener("change", () => { renderLive(); loadStored(); });
  setInterval(renderLive, 5000); // refresh the "ago" column
  loadStored();
  loadRuns();
})();
