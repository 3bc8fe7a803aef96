// Start a match against a bot, a stored checkpoint of the game or a language model; this tab keeps the
// seat's token and plays on the match page.
"use strict";
(() => {
  const { el, clear } = Arena;
  const gameSelect = document.getElementById("game");
  const opponentSelect = document.getElementById("opponent");
  const seatSelect = document.getElementById("seat");
  const startButton = document.getElementById("start-button");
  const wanted = Arena.params(); // ?game=&opponent=&seat= (the match page's "another opponent")
  let games = [];
  let limits = null;

  /** Each checkpoint's rating in its game, beside its name once known. */
  async function rateCheckpoints(game) {
    const names = (game.checkpoints || []).map((c) => c.player);
    if (!names.length) return;
    let found;
    try {
      found = await Arena.ratings(game.id, names);
    } catch (err) {
      return; // no ratings here: names and steps alone
    }
    if (gameSelect.value !== game.id) return;
    for (const option of opponentSelect.querySelectorAll("option[data-kind='checkpoint']")) {
      const rating = found[option.value];
      option.dataset.rating = rating ? rating.ordinal.toFixed(1) : "";
      option.textContent = checkpointLabel(JSON.parse(option.dataset.entry), rating);
    }
  }

  function checkpointLabel(entry, rating) {
    return `${entry.run} @ step ${entry.step}` + (entry.best ? " (best)" : "") +
      (rating ? ` · rating ${rating.ordinal.toFixed(1)}` : rating === null ? " · unrated" : "");
  }

  function fillOpponents() {
    const game = games.find((g) => g.id === gameSelect.value);
    const bots = game ? game.bots : ["random"];
    const checkpoints = game ? game.checkpoints || [] : [];
    const previous = opponentSelect.value || wanted.get("opponent");
    clear(opponentSelect);
    const botGroup = el("optgroup", { label: "Bots" });
    bots.forEach((b) => botGroup.append(el("option", { value: b, text: b, "data-kind": "bot" })));
    opponentSelect.append(botGroup);
    if (checkpoints.length) {
      const group = el("optgroup", { label: `Trained checkpoints (${checkpoints.length})` });
      for (const c of checkpoints) {
        group.append(el("option", { value: c.player, "data-kind": "checkpoint",
          "data-entry": JSON.stringify(c), text: checkpointLabel(c, undefined) }));
      }
      opponentSelect.append(group);
    }
    const models = game ? game.models || [] : [];
    if (models.length) {
      const group = el("optgroup", { label: "Language models" });
      models.forEach((m) => group.append(el("option", { value: m, text: m, "data-kind": "model" })));
      opponentSelect.append(group);
    }
    const names = [...opponentSelect.options].map((o) => o.value);
    const asked = previous && previous.startsWith("checkpoint:") ? `run:${previous.slice(11)}` : previous;
    if (names.includes(asked)) opponentSelect.value = asked;
    document.getElementById("no-checkpoints").hidden = checkpoints.length > 0 || !game;
    if (game) rateCheckpoints(game);
  }

  function rules() {
    const timeout = limits ? limits.human_move_timeout_s : 60;
    document.getElementById("rules").textContent =
      `You have ${timeout} s for each move; past it your seat forfeits (an invalid move loses ` +
      "the game). Only this browser tab can move for your seat. Spectators see public " +
      "information only until the match ends. A checkpoint plays as it did in training.";
  }

  Arena.getJSON("/api/games").then((body) => {
    games = body.games;
    const current = wanted.get("game") || gameSelect.value;
    clear(gameSelect);
    for (const game of games) gameSelect.append(el("option", { value: game.id, text: game.id }));
    gameSelect.value = games.some((g) => g.id === current) ? current : (games[0] || {}).id;
    if (wanted.get("seat") === "1") seatSelect.value = "1";
    fillOpponents();
  }).catch((err) => Arena.notice(err.message, true));
  gameSelect.addEventListener("change", () => { opponentSelect.value = ""; fillOpponents(); });

  let startRef = null;
  let started = null;
  const conn = new Arena.Connection({
    onOpen: (hello) => { limits = hello.limits; rules(); startButton.disabled = false; },
    onStatus: (state) => { if (state !== "open") startButton.disabled = true; },
    onMessage: (m) => {
      if (m.type === "match_created" && m.ref === startRef) {
        Arena.keepSeatToken(m.match, m.token);
        Arena.keepPlayParams(m.match, { ...started, seat: m.seat });
        location.href = `/match?id=${m.match}`;
      } else if (m.type === "error") {
        Arena.notice(m.message, true);
        startButton.disabled = false;
      }
    },
  });

  document.getElementById("start").addEventListener("submit", (e) => {
    e.preventDefault();
    startButton.disabled = true;
    started = { game: gameSelect.value, opponent: opponentSelect.value, seat: Number(seatSelect.value) };
    startRef = conn.send({ type: "start_match", ...started });
  });
  rules();
})();
