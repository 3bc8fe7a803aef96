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

  /** A WebSocket to /ws that reconnects with backoff and numbers requests. */
  class Connection {
    constructor({ onMessage, onOpen, onStatus }) {
      this.onMessage = onMessage;
      this.onOpen = onOpen;
      this.onStatus = onStatus || setStatus;
      this.nextId = 1;
      this.epoch = null;
      this.backoff = 500;
      this.ws = null;
      this.closedByUs = false;
      this.connect();
    }

    connect() {
      const scheme = location.protocol === "https:" ? "wss:" : "ws:";
      const ws = new WebSocket(`${scheme}//${location.host}/ws`);
      this.ws = ws;
      this.onStatus("connecting");
      ws.onmessage = (event) => {
        let message;
        try {
          message = JSON.parse(event.data);
        } catch (err) {
          console.warn("bad frame", err);
          return;
        }
        if (message.type === "hello") {
          this.epoch = message.epoch;
          this.backoff = 500;
          this.onStatus("open");
          if (this.onOpen) this.onOpen(message);
          return;
        }
        this.onMessage(message);
      };
      ws.onclose = () => {
        if (this.closedByUs) return;
        this.onStatus("closed");
        setTimeout(() => this.connect(), this.backoff);
        this.backoff = Math.min(this.backoff * 2, 10000);
      };
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
      if (this.ws) this.ws.close();
    }
  }

  function setStatus(state) {
    const node = document.getElementById("conn");
    if (!node) return;
    node.className = `conn ${state}`;
    const label = { open: "live", connecting: "connecting…", closed: "reconnecting…" }[state];
    clear(node).append(el("span", { class: "dot" }), label || state);
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

  return {
    el, clear, params, ago, clock, shortId, badge, resultText, outcomeClass, playerName,
    Connection, setStatus, notice, getJSON, seatToken, keepSeatToken, ratings, cachedRating,
    forgetRatings, ratingBadge,
  };
})();
