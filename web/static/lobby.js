// The lobby: live matches appear, move and finish as they happen; recent ones; filters.
// A run's matches are one row per run and kind (training, evaluation, warm-up), with
// counts, and their own rows on demand; Watch opens one that is still live.
"use strict";
(() => {
  const { el, clear, ago, badge, resultText, shortId } = Arena;
  const live = new Map(); // id -> lobby line
  let recent = []; // newest first, from the lobby stream
  let stored = null; // finished matches matching the filters, from the database
  let liveTotal = 0;
  let offline = false; // the server is gone: live rows are shown as "unknown"
  const expanded = new Set(); // group keys whose matches are listed
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

  /** What a match is part of: training ("b..." groups of a run), evaluation ("eval-...",
   *  the cookbook's "test-..."), the format warm-up ("warmup"), or nothing (null). */
  function kindOf(line) {
    const group = line.group_id || "";
    if (group === "warmup") return "warm-up";
    if (group.startsWith("eval-") || group.startsWith("test-")) return "evaluation";
    if (line.run_id && group.startsWith("b")) return "training";
    return line.run_id ? "other" : null;
  }

  /** The group a line is shown in: a run's matches of one kind and game; the warm-up's;
   *  bot matches of the same players; a match with a person or an agent alone. */
  function groupOf(line) {
    const players = line.players || [];
    const kind = kindOf(line);
    if ((line.human_seats || []).length || players.some((p) => String(p).startsWith("agent:"))) {
      return { key: `m|${line.id}`, kind: null };
    }
    if (line.run_id) return { key: `r|${line.run_id}|${kind}|${line.game_id}`, kind };
    if (kind === "warm-up") return { key: `w|${line.game_id}`, kind };
    return { key: `p|${line.game_id}|${players.join(",")}`, kind: null };
  }

  /** Lines in groups, each group's lines newest first, groups by their newest line. */
  function grouped(lines, time) {
    const out = new Map();
    for (const line of lines) {
      const { key, kind } = groupOf(line);
      if (!out.has(key)) out.set(key, { key, kind, lines: [] });
      out.get(key).lines.push(line);
    }
    const groups = [...out.values()];
    for (const g of groups) g.lines.sort((a, b) => time(b) - time(a));
    groups.sort((a, b) => time(b.lines[0]) - time(a.lines[0]));
    return groups;
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

  /** "learner vs learner ×40 · learner vs random ×9": the line-ups of a group, each
   *  player with its rating once known (as in a match's own row). */
  function lineups(lines) {
    const counts = new Map();
    for (const line of lines) {
      const text = (line.players || []).join(" vs ");
      if (!counts.has(text)) counts.set(text, { n: 0, line });
      counts.get(text).n += 1;
    }
    const sorted = [...counts.values()].sort((a, b) => b.n - a.n);
    const out = [];
    sorted.slice(0, 3).forEach(({ n, line }, i) => {
      if (i) out.push(" · ");
      (line.players || []).forEach((p, seat) => {
        if (seat) out.push(" vs ");
        const known = Arena.cachedRating(line.game_id, p);
        out.push(el("span", { class: "player", "data-game": line.game_id, "data-name": p }, p,
          known ? " " : null, Arena.ratingBadge(known)));
      });
      out.push(el("span", { class: "muted", text: ` ×${n}` }));
    });
    if (sorted.length > 3) out.push(` · ${sorted.length - 3} more line-ups`);
    return out;
  }

  function runCell(line, kind) {
    return el("td", { class: "muted" }, line.run_id || "",
      kind ? el("span", { class: `kind kind-${kind.replace(/[^a-z]/g, "")}`, text: kind }) : null);
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

  function liveBadge() {
    return offline ? el("span", { class: "badge unknown", text: "unknown",
      title: "the server is gone: this match may have ended since" }) : badge("live");
  }

  /** Where Watch goes for a group, decided when it is clicked, from the server's own
   *  list (the lobby's may be a moment behind, and a short game ends in under a second):
   *  the newest of its matches that is live now, else the replay of the one that ended
   *  last. Without an answer (the server is gone), what the lobby last knew. */
  async function watchTarget(group) {
    const sample = group.lines[0];
    const scope = sample.run_id ? { run: sample.run_id } : { game: sample.game_id };
    const ours = (lines) => lines.filter((l) => groupOf(l).key === group.key);
    try {
      const query = (extra) => new URLSearchParams({ ...scope, ...extra, limit: "200" });
      const playing = ours((await Arena.getJSON(`/api/matches?${query({ status: "live" })}`)).matches)
        .sort((a, b) => b.started_at - a.started_at);
      if (playing.length) return `/match?id=${playing[0].id}`;
      const done = ours((await Arena.getJSON(`/api/matches?${query({})}`)).matches)
        .filter((l) => l.status !== "live")
        .sort((a, b) => (b.ended_at || b.started_at) - (a.ended_at || a.started_at));
      if (done.length) return `/replay?id=${done[0].id}`;
    } catch (err) {
      // the server is gone or cannot list matches: fall back on the lobby's own lines
    }
    const known = ours([...live.values()]).sort((a, b) => b.started_at - a.started_at);
    if (known.length) return `/match?id=${known[0].id}`;
    const finished = ours(finishedLines());
    return finished.length ? `/replay?id=${finished[0].id}` : null;
  }

  function watchLink(group) {
    return el("a", { href: `/match?id=${group.lines[0].id}`, class: "watch",
      title: "a match of this group that is live now, or the last one to end",
      onclick: (e) => {
        e.preventDefault();
        watchTarget(group).then((target) => { if (target) location.href = target; });
      } }, "Watch");
  }

  /** Show or hide a group's own rows (``table``: "live" or "recent", each apart). */
  function toggle(table, key, count) {
    const id = `${table}|${key}`;
    const open = expanded.has(id);
    return el("button", { type: "button", class: "link expand", "aria-expanded": String(open),
      onclick: () => {
        if (expanded.has(id)) expanded.delete(id); else expanded.add(id);
        if (table === "live") renderLive(); else renderRecent();
      } }, open ? "Hide" : `Show all ${count}`);
  }

  function liveRow(line, child) {
    return el("tr", { "data-id": line.id, class: `match-row${child ? " child" : ""}` },
      el("td", {}, liveBadge(), " ", line.game_id),
      players(line),
      runCell(line, child ? null : kindOf(line)),
      el("td", { class: "num", text: line.num_turns || 0 }),
      el("td", { class: "muted", text: ago(line.started_at) }),
      el("td", {}, el("a", { href: `/match?id=${line.id}`, class: "watch" }, "Watch")));
  }

  function renderLive() {
    const body = clear(document.querySelector("#live tbody"));
    const lines = [...live.values()].filter(passes);
    const groups = grouped(lines, (l) => l.started_at || 0);
    for (const group of groups) {
      const first = group.lines[0];
      const open = expanded.has(`live|${group.key}`);
      if (group.lines.length === 1 && !open) {
        body.append(liveRow(first, false));
        continue;
      }
      const n = group.lines.length;
      body.append(el("tr", { class: "group-row", "data-group": group.key, "data-count": n },
        el("td", {}, liveBadge(), " ", first.game_id),
        el("td", { class: "players" }, el("b", { class: "count", text: `${n} live` }), " · ",
          lineups(group.lines)),
        runCell(first, group.kind),
        el("td", { class: "num muted", text: "" }),
        el("td", { class: "muted", text: ago(first.started_at) }),
        el("td", {}, watchLink(group), " · ", toggle("live", group.key, n))));
      if (open) group.lines.forEach((line) => body.append(liveRow(line, true)));
    }
    document.getElementById("live-empty").hidden = lines.length > 0;
    document.getElementById("live").classList.toggle("stale", offline);
    showRatings();
    const hidden = liveTotal - live.size;
    document.getElementById("live-total").textContent = offline ? "live matches: unknown"
      : `${liveTotal} live` + (hidden > 0 ? ` (${hidden} not listed)` : "");
  }

  /** Ended matches from the stream and the database, newest first, once each. */
  function finishedLines() {
    const seen = new Set();
    const lines = [];
    for (const line of [...recent, ...(stored || [])]) {
      if (seen.has(line.id) || line.status === "live" || live.has(line.id) || !passes(line)) continue;
      seen.add(line.id);
      lines.push(line);
    }
    lines.sort((a, b) => (b.ended_at || b.started_at) - (a.ended_at || a.started_at));
    return lines;
  }

  function recentRow(line, child) {
    return el("tr", { "data-id": line.id, class: `match-row${child ? " child" : ""}` },
      el("td", {}, badge(line.status), " ", line.game_id),
      players(line),
      runCell(line, child ? null : kindOf(line)),
      el("td", { text: resultText(line) }),
      el("td", { class: "num", text: line.num_turns || 0 }),
      el("td", { class: "muted", text: ago(line.ended_at) }),
      el("td", {},
        el("a", { href: `/match?id=${line.id}`, title: shortId(line.id) }, "View"), " · ",
        el("a", { href: `/replay?id=${line.id}`, class: "replay" }, "Replay")));
  }

  /** "seat 0 (learner) won ×12 · draw ×5": what a group's matches ended with. */
  function outcomes(lines) {
    const counts = new Map();
    for (const line of lines) {
      const text = resultText(line);
      counts.set(text, (counts.get(text) || 0) + 1);
    }
    return [...counts.entries()].sort((a, b) => b[1] - a[1]).slice(0, 3)
      .map(([text, n]) => `${text} ×${n}`).join(" · ");
  }

  function renderRecent() {
    const body = clear(document.querySelector("#recent tbody"));
    const lines = finishedLines().slice(0, 200);
    const time = (l) => l.ended_at || l.started_at || 0;
    let rows = 0;
    for (const group of grouped(lines, time)) {
      if (rows >= 50) break;
      const first = group.lines[0];
      const open = expanded.has(`recent|${group.key}`);
      if (group.lines.length === 1 && !open) {
        body.append(recentRow(first, false));
        rows += 1;
        continue;
      }
      const n = group.lines.length;
      body.append(el("tr", { class: "group-row", "data-group": group.key, "data-count": n },
        el("td", {}, badge("finished"), " ", first.game_id),
        el("td", { class: "players" }, el("b", { class: "count", text: `${n} finished` }), " · ",
          lineups(group.lines)),
        runCell(first, group.kind),
        el("td", { text: outcomes(group.lines) }),
        el("td", { class: "num muted", text: "" }),
        el("td", { class: "muted", text: ago(time(first)) }),
        el("td", {},
          el("a", { href: `/match?id=${first.id}`, title: `the newest of these ${n}: ${shortId(first.id)}` }, "View"),
          " · ", el("a", { href: `/replay?id=${first.id}`, class: "replay", title: `the newest of these ${n}` }, "Replay"),
          " · ", toggle("recent", group.key, n))));
      rows += 1;
      if (open) group.lines.forEach((line) => body.append(recentRow(line, true)));
    }
    document.getElementById("recent-empty").hidden = lines.length > 0;
    showRatings();
  }

  async function loadStored() {
    const query = new URLSearchParams({ limit: "200" });
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
        box.textContent = "No training run has logged a step yet (runs write runs/<name>/metrics.jsonl; " +
          "a run's warm-up games show above while it warms up).";
        return;
      }
      box.append(Arena.runsTable(body.runs));
    } catch (err) {
      box.textContent = `Cannot list runs: ${err.message}`;
    }
  }

  const conn = new Arena.Connection({
    onOpen: () => conn.send({ type: "subscribe", stream: "lobby" }),
    onStatus: (state, { first }) => {
      offline = state === "closed";
      if (state === "open" && !first) { loadStored(); loadRuns(); } // back: catch up
      renderLive();
    },
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
          recent = [line, ...recent.filter((r) => r.id !== line.id)].slice(0, 200);
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
  setInterval(() => { if (!offline) loadRuns(); }, 15000); // a run's steps and evaluations
  loadStored();
  loadRuns();
})();
