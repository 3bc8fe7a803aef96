// Arena: helpers shared by every page (no build step, no dependencies).
"use strict";

const Arena = (() => {
  /** Build an element: el("a", {href: "/", class: "x"}, "text", child, ...). */
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : value);
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function clear(node) {
    while (node.firstChild) node.removeChild(node.firstChild);
    return node;
  }

  function params() {
    return new URLSearchParams(location.search);
  }

  function ago(t) {
    if (!t) return "";
    const s = Math.max(0, Date.now() / 1000 - t);
    if (s < 60) return `${Math.round(s)} s ago`;
    if (s < 3600) return `${Math.round(s / 60)} min ago`;
    if (s < 86400) return `${Math.round(s / 3600)} h ago`;
    return new Date(t * 1000).toLocaleDateString();
  }

  function clock(t) {
    return t ? new Date(t * 1000).toLocaleTimeString() : "";
  }

  function shortId(id) {
    return String(id || "").slice(0, 8);
  }

  function badge(status) {
    return el("span", { class: `badge ${status}`, text: status });
  }

  /** Who won (each seat's result comes from the server: games.outcome), or the status. */
  function resultText(line) {
    if (line.status === "live") return `${line.num_turns || 0} moves so far`;
    if (line.status === "aborted") return "aborted";
    const results = line.results || [];
    if (!results.length) return line.status;
    const winner = results.indexOf("win");
    if (winner >= 0) return `seat ${winner} (${(line.players || [])[winner] || "?"}) won`;
    if (results.every((r) => r === "draw")) return "draw";
    return results.map((r, i) => (r === "draw" ? i : -1)).filter((i) => i >= 0)
      .map((i) => `seat ${i} (${(line.players || [])[i] || "?"})`).join(", ") + " shared first";
  }

  /** The CSS class of a seat's result (win, draw, loss), or "" before the end. */
  function outcomeClass(result, seat) {
    const results = (result && result.results) || [];
    return results[seat] || "";
  }

  function playerName(info, seat) {
    const name = ((info && info.players) || [])[seat] || `seat ${seat}`;
    return `seat ${seat} · ${name}`;
  }

  /**
   * A WebSocket to /ws that reconnects with backoff and numbers requests. While it is
   * down, every page shows the offline banner (with when it tries again, and a button to
   * try now); ``onStatus(state, {first})`` lets a page grey what it can no longer vouch
   * for ("closed") and refresh it once the server is back ("open", with ``first`` false).
   */
  class Connection {
    constructor({ onMessage, onOpen, onStatus }) {
      this.onMessage = onMessage;
      this.onOpen = onOpen;
      this.onStatus = onStatus || null;
      this.nextId = 1;
      this.epoch = null;
      this.backoff = RECONNECT_FIRST_MS;
      this.ws = null;
      this.closedByUs = false;
      this.opened = 0; // hellos received: 1 on the first connection, more after reconnects
      this.retryAt = null;
      this.timer = null;
      this.connect();
    }

    status(state) {
      setStatus(state);
      offlineBanner(state === "closed" ? this : null);
      if (this.onStatus) this.onStatus(state, { first: this.opened <= 1 });
    }

    connect() {
      clearTimeout(this.timer);
      this.timer = null;
      this.retryAt = null;
      const scheme = location.protocol === "https:" ? "wss:" : "ws:";
      const ws = new WebSocket(`${scheme}//${location.host}/ws`);
      this.ws = ws;
      if (!this.opened) this.status("connecting");
      ws.onmessage = (event) => {
        if (ws !== this.ws) return;
        let message;
        try {
          message = JSON.parse(event.data);
        } catch (err) {
          console.warn("bad frame", err);
          return;
        }
        if (message.type === "hello") {
          this.epoch = message.epoch;
          this.backoff = RECONNECT_FIRST_MS;
          this.opened += 1;
          this.status("open");
          if (this.onOpen) this.onOpen(message);
          return;
        }
        this.onMessage(message);
      };
      ws.onclose = () => {
        if (this.closedByUs || ws !== this.ws) return;
        this.retryAt = Date.now() + this.backoff;
        this.timer = setTimeout(() => this.connect(), this.backoff);
        this.backoff = Math.min(this.backoff * 2, RECONNECT_MAX_MS);
        this.status("closed");
      };
    }

    /** Try at once instead of waiting for the next attempt (the banner's button). */
    retryNow() {
      if (this.ws && this.ws.readyState === WebSocket.CONNECTING) return;
      this.backoff = RECONNECT_FIRST_MS;
      this.connect();
    }

    get isOpen() {
      return Boolean(this.ws && this.ws.readyState === WebSocket.OPEN && this.opened);
    }

    send(message) {
      const id = this.nextId++;
      if (this.ws && this.ws.readyState === WebSocket.OPEN) {
        this.ws.send(JSON.stringify({ ...message, id }));
      }
      return id;
    }

    close() {
      this.closedByUs = true;
      clearTimeout(this.timer);
      if (this.ws) this.ws.close();
    }
  }

  const RECONNECT_FIRST_MS = 500;
  const RECONNECT_MAX_MS = 5000;

  function setStatus(state) {
    const node = document.getElementById("conn");
    if (!node) return;
    node.className = `conn ${state}`;
    const label = { open: "live", connecting: "connecting…", closed: "server gone" }[state];
    clear(node).append(el("span", { class: "dot" }), label || state);
  }

  let bannerTimer = null;
  /** The offline banner under the header while ``conn`` is down (null: take it away). */
  function offlineBanner(conn) {
    let node = document.getElementById("offline");
    clearInterval(bannerTimer);
    bannerTimer = null;
    if (!conn) {
      if (node) node.remove();
      document.body.classList.remove("offline");
      return;
    }
    if (!node) {
      node = el("div", { id: "offline", class: "offline-banner", role: "alert" },
        el("b", { text: "The Arena server is gone." }), " ",
        el("span", { class: "why" }),
        el("button", { type: "button", class: "retry", onclick: () => conn.retryNow() }, "Retry now"));
      const header = document.querySelector("header.top");
      if (header) header.after(node); else document.body.prepend(node);
    }
    document.body.classList.add("offline");
    const why = node.querySelector(".why");
    const tick = () => {
      const left = conn.retryAt ? Math.max(0, Math.ceil((conn.retryAt - Date.now()) / 1000)) : 0;
      why.textContent = `What this page shows may be out of date (live matches are marked ` +
        `"unknown"). If it stopped, start it again (arena serve shows everything stored); ` +
        (left ? `trying again in ${left} s. ` : "trying again now. ");
    };
    tick();
    bannerTimer = setInterval(tick, 1000);
  }

  function notice(text, isError) {
    const box = document.getElementById("notices");
    if (!box) return;
    const node = el("div", { class: `notice${isError ? " error" : ""}`, text });
    box.append(node);
    setTimeout(() => node.remove(), 6000);
  }

  async function getJSON(url) {
    const response = await fetch(url, { headers: { Accept: "application/json" } });
    const body = await response.json();
    if (!response.ok) throw new Error(body.message || response.statusText);
    return body;
  }

  /** The token of the seat this browser tab holds in a match, if any. */
  function seatToken(matchId) {
    try {
      return sessionStorage.getItem(`arena-seat-${matchId}`);
    } catch (err) {
      return null;
    }
  }

  function keepSeatToken(matchId, token) {
    try {
      sessionStorage.setItem(`arena-seat-${matchId}`, token);
    } catch (err) {
      console.warn("cannot keep the seat token", err);
    }
  }

  /** What this tab started a match with ({game, opponent, seat}), for "play again". */
  function playParams(matchId) {
    try {
      return JSON.parse(sessionStorage.getItem(`arena-play-${matchId}`) || "null");
    } catch (err) {
      return null;
    }
  }

  function keepPlayParams(matchId, params) {
    try {
      sessionStorage.setItem(`arena-play-${matchId}`, JSON.stringify(params));
    } catch (err) {
      console.warn("cannot keep the match's settings", err);
    }
  }

  /**
   * Players' ratings (Bradley-Terry, Elo scale) from /api/ratings, per game, kept for
   * RATINGS_TTL_MS: ratings(game, names) resolves to {name: rating or null}.
   */
  const RATINGS_TTL_MS = 15000;
  const ratingCache = new Map(); // game -> {at, names: Map(name -> rating or null)}
  async function ratings(game, names) {
    let entry = ratingCache.get(game);
    if (!entry || Date.now() - entry.at > RATINGS_TTL_MS) {
      entry = { at: Date.now(), names: new Map() };
      ratingCache.set(game, entry);
    }
    const missing = [...new Set(names)].filter((n) => n && !entry.names.has(n)).slice(0, 64);
    if (missing.length) {
      const query = `game=${encodeURIComponent(game)}&players=${encodeURIComponent(missing.join(","))}`;
      try {
        const body = await getJSON(`/api/ratings?${query}`);
        for (const [name, rating] of Object.entries(body.ratings || {})) entry.names.set(name, rating);
      } finally {
        for (const n of missing) if (!entry.names.has(n)) entry.names.set(n, null); // asked once per TTL
      }
    }
    const out = {};
    for (const n of names) out[n] = entry.names.get(n) || null;
    return out;
  }

  /** The rating already fetched for name in game: a rating, null (none), or undefined. */
  function cachedRating(game, name) {
    const entry = ratingCache.get(game);
    if (!entry || Date.now() - entry.at > RATINGS_TTL_MS) return undefined;
    return entry.names.get(name);
  }

  function forgetRatings(game) {
    ratingCache.delete(game);
  }

  /** A player's rating as a small badge: "1234" with its interval and games in its title. */
  function ratingBadge(rating) {
    if (!rating) return null;
    return el("span", {
      class: "rating",
      text: rating.rating.toFixed(0),
      title: `rating ${rating.rating.toFixed(0)} (95 %: ${rating.lower.toFixed(0)} – ` +
        `${rating.upper.toFixed(0)}), ${rating.games} rated games`,
    });
  }

  function figure(value) {
    if (value === null || value === undefined) return "–";
    const n = Number(value);
    return Number.isInteger(n) ? String(n) : Math.abs(n) >= 100 ? n.toFixed(0) : n.toFixed(3);
  }

  function percent(value) {
    return value === null || value === undefined ? "–" : `${Math.round(Number(value) * 100)} %`;
  }

  /**
   * An evaluation's figures in words, one item per opponent or yardstick:
   * ["vs random: won 72 %, drew 5 %, lost 23 %", "kuhn exploitability 0.312", ...].
   */
  function evalFigures(metrics) {
    const out = [];
    const byOpponent = new Map();
    for (const [key, value] of Object.entries(metrics || {})) {
      const m = key.match(/^test\/((?:[^/]+\/)?[^/]+)\/(win|draw|loss)$/); // (test/<game>/<opponent>/...)
      if (m) {
        if (!byOpponent.has(m[1])) byOpponent.set(m[1], {});
        byOpponent.get(m[1])[m[2]] = value;
      }
    }
    for (const [opponent, f] of [...byOpponent.entries()].sort()) {
      out.push(`vs ${opponent}: won ${percent(f.win)}, drew ${percent(f.draw)}, lost ${percent(f.loss)}`);
    }
    for (const [key, value] of Object.entries(metrics || {}).sort()) {
      if (/^test\/(?:[^/]+\/)?[^/]+\/(win|draw|loss|score|reward|games|aborted)$/.test(key) || /invalid/.test(key)) continue;
      if (/\/yardstick\/bet\//.test(key)) continue; // the policy itself: charted, not summed up
      out.push(`${key.replace(/^test\//, "").replaceAll("/", " ")} ${figure(value)}`);
    }
    return out;
  }

  /** The runs index: each run's game, steps, start, last evaluation and best checkpoint
   *  (``/api/runs``'s run infos). */
  function runsTable(runs) {
    const body = el("tbody");
    for (const run of runs) {
      const evaluation = run.last_eval;
      const figures = evaluation ? evalFigures(evaluation.metrics) : [];
      const best = run.best;
      body.append(el("tr", { "data-run": run.name },
        el("td", {}, el("a", { href: `/run?name=${encodeURIComponent(run.name)}`, class: "run-link" }, run.name)),
        el("td", { class: "game", text: run.game_id || "–" }),
        el("td", { class: "num steps", text: run.last_step === null || run.last_step === undefined ? "–"
          : String(run.last_step) }),
        el("td", { class: "muted started", title: run.started_at ? new Date(run.started_at * 1000).toLocaleString() : null,
          text: run.started_at ? ago(run.started_at) : "–" }),
        el("td", { class: "eval" }, evaluation
          ? [el("span", { class: "muted", text: `step ${evaluation.step}: ` }), figures.join(" · ")]
          : el("span", { class: "muted", text: "none yet" })),
        el("td", { class: "best" }, best ? `step ${best.step}` : el("span", { class: "muted", text: "–" }),
          run.checkpoints ? el("span", { class: "muted small", text: ` (${run.checkpoints} saved)` }) : null)));
    }
    return el("table", { class: "runs" },
      el("thead", {}, el("tr", {}, el("th", { text: "Run" }), el("th", { text: "Game" }),
        el("th", { class: "num", text: "Last step" }), el("th", { text: "Started" }),
        el("th", { text: "Last evaluation" }), el("th", { text: "Best checkpoint" }))),
      body);
  }

  return {
    el, clear, params, ago, clock, shortId, badge, resultText, outcomeClass, playerName,
    Connection, setStatus, notice, getJSON, seatToken, keepSeatToken, playParams, keepPlayParams, ratings, cachedRating,
    forgetRatings, ratingBadge, figure, percent, evalFigures, runsTable,
  };
})();
