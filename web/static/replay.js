// Replay a stored (or live) match: step forward and back, scrub, autoplay.
"use strict";
(() => {
  const { el, clear, badge, resultText, outcomeClass, playerName, shortId } = Arena;
  const matchId = Arena.params().get("id") || "";
  let match = null;
  let step = 0;
  let timer = null;
  const scrubber = document.getElementById("scrubber");

  function total() {
    return match ? match.turns.length : 0;
  }

  /** The board after move ``k`` (0: the start): the all-seeing one once the match has
   *  ended, the public one while it is live. */
  function rawBoardAt(k) {
    const ended = match.status !== "live";
    const info = match.match_info;
    if (k === 0) return (ended ? info.start_full_board || info.start_board : info.start_board) || null;
    const turn = match.turns[k - 1];
    return (ended ? turn.full_board || turn.board : turn.board) || null;
  }

  function boardAt(k) {
    const board = rawBoardAt(k);
    if (match.status === "live") return board;
    const earlier = [];
    for (let i = 0; i < k; i++) earlier.push(rawBoardAt(i));
    return ArenaBoard.withKnownCards(board, earlier);
  }

  function textAt(k) {
    const ended = match.status !== "live";
    if (ended && k === total() && match.reveal && match.reveal.full_state) return match.reveal.full_state;
    const text = k === 0 ? match.match_info.start_state : match.turns[k - 1].public_state;
    return text || "(no public board at this point)";
  }

  /** The seats; each one's reward and result only at the end (before, they would give
   *  the ending away). */
  function renderSeats(atEnd) {
    const info = match.match_info;
    const seats = clear(document.getElementById("seats"));
    info.players.forEach((player, seat) => {
      const reward = atEnd && match.result && match.result.rewards ? match.result.rewards[seat] : null;
      seats.append(el("div", { class: "seat", "data-seat": seat },
        el("span", { class: "name", text: `Seat ${seat}` }),
        el("span", { class: "muted" }, ` ${player} `),
        el("span", { class: `reward ${atEnd ? outcomeClass(match.result, seat) : ""}`,
          text: reward === null || reward === undefined ? "" : (reward > 0 ? `+${reward}` : reward) })));
    });
  }

  let textOpen = false;
  function show(k) {
    step = Math.max(0, Math.min(total(), k));
    scrubber.value = String(step);
    document.getElementById("step-label").textContent = `move ${step} / ${total()}`;
    const last = step === total() && match.status !== "live";
    renderSeats(last);
    ArenaBoard.render(document.getElementById("board-view"), {
      board: boardAt(step), prev: step > 0 ? rawBoardAt(step - 1) : null, info: match.match_info,
      result: last ? match.result : null, text: textAt(step),
      textOpen, onTextToggle: (open) => { textOpen = open; },
    });
    document.getElementById("board-title").textContent = step === 0 ? "Start"
      : last ? "Final board (everything shown)" : `Board after move ${step}`;
    const now = clear(document.getElementById("move-now"));
    const obsBox = document.getElementById("obs-box");
    if (step > 0) {
      const turn = match.turns[step - 1];
      now.append(`Move ${step}: ${playerName(match.match_info, turn.seat)} played `,
        el("b", { class: "mono", text: turn.action === null ? "(hidden)" : turn.action }),
        turn.valid ? "" : el("span", { class: "loss" }, " — invalid", turn.reason ? `: ${turn.reason}` : ""));
      obsBox.hidden = !turn.observation;
      document.getElementById("observation").textContent = turn.observation || "";
      document.getElementById("obs-summary").textContent =
        `What ${playerName(match.match_info, turn.seat)} saw before this move`;
    } else {
      now.textContent = "Before the first move.";
      obsBox.hidden = true;
    }
    document.querySelectorAll("#moves li").forEach((li) => {
      li.classList.toggle("current", Number(li.dataset.step) === step);
    });
    const current = document.querySelector("#moves li.current");
    if (current) current.scrollIntoView({ block: "nearest" });
    document.getElementById("back").disabled = step === 0;
    document.getElementById("first").disabled = step === 0;
    document.getElementById("forward").disabled = step === total();
    document.getElementById("last").disabled = step === total();
  }

  function render() {
    const info = match.match_info;
    const title = clear(document.getElementById("title"));
    title.append("Replay · ", badge(match.status), " ", info.game_id, " ",
      el("span", { class: "muted small mono", text: shortId(info.id) }));
    const sub = clear(document.getElementById("subtitle"));
    const bits = [];
    if (info.run_id) bits.push(`run ${info.run_id}`);
    if (info.seed !== undefined) bits.push(`seed ${info.seed}`);
    if (match.result) bits.push(resultText({ ...match.result, players: info.players }));
    if (match.status === "live") bits.push("live: the moves so far, public view");
    sub.append(bits.join(" · "), " · ", el("a", { href: `/match?id=${info.id}` },
      match.status === "live" ? "Watch live" : "Match page"));
    const list = clear(document.getElementById("moves"));
    list.append(el("li", { class: "clickable", "data-step": 0, onclick: () => show(0) },
      el("span", { class: "idx", text: "0" }), el("span", { class: "muted", text: "start" }), el("span")));
    match.turns.forEach((turn, i) => {
      list.append(el("li", { class: `clickable${turn.valid ? "" : " invalid"}`, "data-step": i + 1,
        onclick: () => show(i + 1) },
        el("span", { class: "idx", text: i + 1 }),
        el("span", { class: "muted", text: playerName(info, turn.seat) }),
        el("span", { class: "act" }, turn.action === null ? "(hidden move)" : turn.action,
          turn.valid ? null : el("span", { class: "tag", text: "invalid" }))));
    });
    scrubber.max = String(total());
  }

  function stop() {
    clearInterval(timer);
    timer = null;
    document.getElementById("playpause").textContent = "▶ play";
  }

  function toggle() {
    if (timer) { stop(); return; }
    if (step >= total()) show(0);
    document.getElementById("playpause").textContent = "❚❚ pause";
    timer = setInterval(() => { if (step >= total()) stop(); else show(step + 1); }, 700);
  }

  document.getElementById("first").onclick = () => { stop(); show(0); };
  document.getElementById("back").onclick = () => { stop(); show(step - 1); };
  document.getElementById("forward").onclick = () => { stop(); show(step + 1); };
  document.getElementById("last").onclick = () => { stop(); show(total()); };
  document.getElementById("playpause").onclick = toggle;
  scrubber.addEventListener("input", () => { stop(); show(Number(scrubber.value)); });
  // One key press is one move, whatever has focus: the handler runs first (capture) and
  // takes the key, so a focused scrubber or button does not move or click as well.
  const KEYS = {
    ArrowLeft: () => show(step - 1), ArrowRight: () => show(step + 1),
    Home: () => show(0), End: () => show(total()),
  };
  const SCRUBBER_KEYS = {
    ArrowDown: () => show(step - 1), ArrowUp: () => show(step + 1),
    PageDown: () => show(step - 1), PageUp: () => show(step + 1),
  };
  function typing(target) {
    return target && (target.tagName === "TEXTAREA" || target.isContentEditable ||
      (target.tagName === "INPUT" && target.type !== "range"));
  }
  window.addEventListener("keydown", (e) => {
    if (!match || e.altKey || e.ctrlKey || e.metaKey || typing(e.target)) return;
    const action = KEYS[e.key] || (e.target === scrubber ? SCRUBBER_KEYS[e.key] : null);
    if (e.key === " ") {
      e.preventDefault();
      e.stopPropagation();
      if (!e.repeat) toggle();
      return;
    }
    if (!action) return;
    e.preventDefault();
    e.stopPropagation();
    stop();
    action();
  }, { capture: true });
  window.addEventListener("keyup", (e) => {
    // A focused button would click on the space bar's release: the key down played it.
    if (e.key === " " && !typing(e.target)) { e.preventDefault(); e.stopPropagation(); }
  }, { capture: true });

  Arena.getJSON(`/api/matches/${encodeURIComponent(matchId)}`).then((body) => {
    match = body;
    render();
    show(0);
  }).catch((err) => {
    document.getElementById("title").textContent = "No such match";
    Arena.notice(err.message, true);
  });
})();
