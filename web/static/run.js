// A training run's dashboard: reward, win/draw/loss per evaluation opponent, invalid-move
// rate and loss against the step, updated as metrics.jsonl grows (charts: uPlot, MIT).
"use strict";
(() => {
  const { el, clear } = Arena;
  const name = Arena.params().get("name");
  const COLORS = ["#5fb3f9", "#57c78a", "#f0716b", "#e8b95a", "#b48ef0", "#4fd1c5", "#f6a5c0"];
  const OUTCOME_COLORS = { win: "#57c78a", draw: "#e8b95a", loss: "#f0716b" };
  let rows = [];
  let charts = []; // {plot, keys}

  function keysOf() {
    const keys = new Set();
    rows.forEach((r) => Object.keys(r).forEach((k) => keys.add(k)));
    return keys;
  }

  /** The charts for the keys present: [{title, keys, labels, range}] */
  function layout(keys) {
    const out = [];
    const reward = [...keys].filter((k) => /^env\/[^/]+\/reward\/total$/.test(k)).sort();
    if (reward.length) out.push({ title: "Reward (training games)", keys: reward });
    const opponents = [...new Set([...keys].map((k) => (k.match(/^test\/([^/]+)\/win$/) || [])[1])
      .filter(Boolean))].sort();
    for (const opp of opponents) {
      const ks = ["win", "draw", "loss"].map((x) => `test/${opp}/${x}`).filter((k) => keys.has(k));
      out.push({ title: `Win / draw / loss vs ${opp}`, keys: ks, range: [0, 1],
        labels: ks.map((k) => k.split("/").pop()) });
    }
    const invalid = [...keys].filter((k) => /invalid_move_rate$|invalid_rate$/.test(k)).sort();
    if (invalid.length) out.push({ title: "Invalid-move rate", keys: invalid });
    const loss = [...keys].filter((k) => /^optim\/loss$/.test(k));
    if (loss.length) out.push({ title: "Loss", keys: loss });
    return out;
  }

  function data(keys) {
    const xs = rows.map((r, i) => (r.step ?? i));
    return [xs, ...keys.map((k) => rows.map((r) => (r[k] === undefined ? null : r[k])))];
  }

  function build() {
    const box = clear(document.getElementById("charts"));
    charts = [];
    for (const spec of layout(keysOf())) {
      const panel = el("section", { class: "panel chart" }, el("h2", { text: spec.title }));
      box.append(panel);
      const width = Math.max(300, panel.clientWidth - 34);
      const series = [{ label: "step" }, ...spec.keys.map((k, i) => ({
        label: spec.labels ? spec.labels[i] : k,
        stroke: OUTCOME_COLORS[spec.labels ? spec.labels[i] : ""] || COLORS[i % COLORS.length],
        width: 2,
        spanGaps: true,
        points: { show: rows.length < 60 },
      }))];
      const options = {
        width, height: 220, series,
        axes: [{ stroke: "#8a97a6", grid: { stroke: "#2a3440" } },
          { stroke: "#8a97a6", grid: { stroke: "#2a3440" } }],
        scales: { x: { time: false }, ...(spec.range ? { y: { range: spec.range } } : {}) },
        legend: { live: true },
      };
      const plot = new uPlot(options, data(spec.keys), panel);
      charts.push({ plot, keys: spec.keys });
    }
    if (!charts.length) {
      box.append(el("div", { class: "empty" }, "No metric to chart yet: waiting for metrics.jsonl to grow."));
    }
    ratingPlot = null; // its panel went with the others: drawn again on the next load
    ratingsAt = 0;
  }

  /** The rating of each checkpoint of this run (its evaluation and league matches), by
   * the step it was saved at: /api/runs/NAME/ratings, refreshed as metrics arrive. */
  let ratingPlot = null;
  let ratingsAt = 0;
  async function loadRatings(force) {
    if (!force && Date.now() - ratingsAt < 10000) return;
    ratingsAt = Date.now();
    let body;
    try {
      body = await Arena.getJSON(`/api/runs/${encodeURIComponent(name)}/ratings`);
    } catch (err) {
      return;
    }
    let panel = document.getElementById("checkpoint-ratings");
    if (!body.checkpoints.length) {
      if (panel) panel.remove();
      ratingPlot = null;
      return;
    }
    const xs = body.checkpoints.map((c) => c.step);
    const series = [xs, ...["rating", "lower", "upper"].map((k) => body.checkpoints.map((c) => c[k]))];
    if (ratingPlot && panel) { ratingPlot.setData(series); return; }
    panel = el("section", { class: "panel chart", id: "checkpoint-ratings" },
      el("h2", { text: `Checkpoint ratings in ${body.game_id}` }),
      el("div", { class: "muted small" }, "each checkpoint's Bradley–Terry rating from every rated " +
        "match (Elo scale, the random bot at 1000), with its 95 % interval; ",
        el("a", { href: `/leaderboard?game=${encodeURIComponent(body.game_id)}` }, "the leaderboard")));
    document.getElementById("charts").prepend(panel);
    const width = Math.max(300, panel.clientWidth - 34);
    const band = { stroke: COLORS[0], width: 1, dash: [3, 4], points: { show: false } };
    ratingPlot = new uPlot({
      width, height: 220,
      series: [{ label: "step" },
        { label: "rating", stroke: COLORS[0], width: 2, points: { show: true } },
        { label: "95 % low", ...band }, { label: "95 % high", ...band }],
      axes: [{ stroke: "#8a97a6", grid: { stroke: "#2a3440" } },
        { stroke: "#8a97a6", grid: { stroke: "#2a3440" } }],
      scales: { x: { time: false } },
      legend: { live: true },
    }, series, panel);
  }

  function update() {
    const wanted = layout(keysOf()).map((s) => s.keys.join("|")).join(";");
    const have = charts.map((c) => c.keys.join("|")).join(";");
    if (wanted !== have) { build(); return; }
    for (const chart of charts) chart.plot.setData(data(chart.keys));
  }

  function subtitle(info) {
    const last = rows.length ? rows[rows.length - 1] : {};
    clear(document.getElementById("subtitle")).append(
      `${rows.length} steps` + (last.step !== undefined ? ` · last step ${last.step}` : "") +
      (info && info.run_id ? ` · run id ${info.run_id} · ` : " · "),
      info && info.run_id ? el("a", { href: `/?run=${encodeURIComponent(info.run_id)}` }, "its matches") : "",
      info ? el("span", { class: "mono" }, `  ${info.source}`) : "");
  }

  async function listRuns() {
    document.getElementById("run-list").hidden = false;
    const box = document.getElementById("runs");
    try {
      const body = await Arena.getJSON("/api/runs");
      if (!body.runs.length) box.textContent = "No training run is watched yet.";
      for (const run of body.runs) {
        box.append(el("div", {}, el("a", { href: `/run?name=${encodeURIComponent(run.name)}` }, run.name),
          el("span", { class: "muted small" }, `  ${run.rows} steps · ${run.source}`)));
      }
    } catch (err) {
      box.textContent = err.message;
    }
  }

  if (!name) {
    Arena.setStatus("open");
    listRuns();
    return;
  }
  document.getElementById("title").textContent = `Training run ${name}`;
  let info = null;
  const conn = new Arena.Connection({
    onOpen: () => conn.send({ type: "subscribe", stream: "run", run: name }),
    onMessage: (m) => {
      if (m.type === "metrics" && m.run === name) {
        if (m.reset) rows = [];
        if (m.info) info = m.info;
        rows = rows.concat(m.rows);
        subtitle(info);
        if (m.reset) build(); else update();
        loadRatings(false);
      } else if (m.type === "error") {
        Arena.notice(m.message, true);
      }
    },
  });
})();
