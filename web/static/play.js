// Start a match against a bot; this tab keeps the seat's token and plays on the match page.
"use strict";
(() => {
  const { el, clear } = Arena;
  const gameSelect = document.getElementById("game");
  const opponentSelect = document.getElementById("opponent");
  let games = [];
  let limits = null;

  function fillOpponents() {
    const game = games.find((g) => g.id === gameSelect.value);
    const bots = game ? game.bots : ["random"];
    const previous = opponentSelect.value;
    clear(opponentSelect);
    bots.forEach((b) => opponentSelect.append(el("option", { value: b, text: b })));
    if (bots.includes(previous)) opponentSelect.value = previous;
  }

  function rules() {
    const timeout = limits ? limits.human_move_timeout_s : 60;
    document.getElementById("rules").textContent =
      `You have ${timeout} s for each move; past it your seat forfeits (an invalid move loses ` +
      "the game). Only this browser tab can move for your seat. Spectators see public " +
      "information only until the match ends.";
  }

  Arena.getJSON("/api/games").then((body) => {
    games = body.games;
    const current = gameSelect.value;
    clear(gameSelect);
    for (const game of games) gameSelect.append(el("option", { value: game.id, text: game.id }));
    gameSelect.value = games.some((g) => g.id === current) ? current : (games[0] || {}).id;
    fillOpponents();
  }).catch((err) => Arena.notice(err.message, true));
  gameSelect.addEventListener("change", fillOpponents);

  const conn = new Arena.Connection({
    onOpen: (hello) => { limits = hello.limits; rules(); },
    onMessage: (m) => {
      if (m.type === "match_created") {
        Arena.keepSeatToken(m.match, m.token);
        location.href = `/match?id=${m.match}`;
      } else if (m.type === "error") {
        Arena.notice(m.message, true);
        document.getElementById("start-button").disabled = false;
      }
    },
  });

  document.getElementById("start").addEventListener("submit", (e) => {
    e.preventDefault();
    document.getElementById("start-button").disabled = true;
    conn.send({ type: "start_match", game: gameSelect.value, opponent: opponentSelect.value,
      seat: Number(document.getElementById("seat").value) });
  });
  rules();
})();
