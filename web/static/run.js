// A training run's dashboard: every metric of its metrics.jsonl against the step, updated
// as the file grows (charts: uPlot, MIT). What tells whether a run learns first (invalid
// answers per answer, turns per game, wins by opponent and seat, evaluations, yardsticks),
// then what a step costs (time, tokens, steps that taught, dropped groups) and the update's
// figures; the league's mix; then every other metric, by prefix. Each axis fits its values;
// a chart constant over the run is folded away until it changes. The runs index lists each
// run's figures.
// The server sends every evaluation row of a run and its other rows thinned evenly over
// the whole run (web/pages/metrics.py); the page keeps them so as it grows (MAX_STEP_ROWS).
"use strict";
(() => {
  const { el, clear } = Arena;
  const name = Arena.params().get("name");
  const COLORS = ["#5fb3f9", "#57c78a", "#f0716b", "#e8b95a", "#b48ef0", "#4fd1c5", "#f6a5c0"];
  const OUTCOME_COLORS = { win: "#57c78a", draw: "#e8b95a", loss: "#f0716b" };
  /** Rows without evaluation figures the page keeps (the server keeps as many: STEP_ROWS in
   *  web/pages/metrics.py); past it, they are thinned to half, evenly over the run's steps. Every
   *  evaluation row stays. */
  const MAX_STEP_ROWS = 2000;
  /** Past checkpoints the league's score chart draws one by one; more are grouped by age in
   *  AGE_GROUPS lines (the oldest, middle, newest third of them), so its legend stays short. */
  const MAX_CHECKPOINT_LINES = 4;
  const AGE_GROUPS = ["oldest third", "middle third", "newest third"];
  const CHART_HEIGHT = 220;
  let rows = [];
  let logged = 0; // rows the run has logged (the server's count, then the live rows)
  let charts = []; // {plot, keys, lines, panel}
  const resizer = new ResizeObserver((entries) => {
    for (const entry of entries) {
      const chart = charts.find((c) => c.panel === entry.target) ||
        (ratingPlot && entry.target.id === "checkpoint-ratings" ? { plot: ratingPlot } : null);
      if (chart) fit(chart.plot, entry.target);
    }
  });

  /** A plot's width: its card's, less the card's padding. */
  function plotWidth(panel) {
    const style = getComputedStyle(panel);
    const inner = panel.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    return Math.max(200, Math.floor(inner));
  }

  function fit(plot, panel) {
    const width = plotWidth(panel);
    if (Math.abs(plot.width - width) > 1) plot.setSize({ width, height: CHART_HEIGHT });
  }

  function isEval(row) {
    for (const key in row) if (key.startsWith("test/")) return true;
    return false;
  }

  /** Keep the rows bounded on a page left open: past MAX_STEP_ROWS rows without evaluation
   *  figures, keep half as many, evenly over their steps (the first and newest included). */
  function thin() {
    const steps = rows.filter((r) => !isEval(r));
    if (steps.length <= MAX_STEP_ROWS) return;
    const at = (r, i) => (typeof r.step === "number" ? r.step : i);
    const first = at(steps[0], 0);
    const newest = steps[steps.length - 1];
    const gap = (at(newest, rows.length) - first) / (MAX_STEP_ROWS / 2);
    let next = -Infinity;
    rows = rows.filter((r, i) => {
      if (r === newest || isEval(r)) return true;
      if (at(r, i) < next) return false;
      next = at(r, i) + gap;
      return true;
    });
  }

  function keysOf() {
    const keys = new Set();
    rows.forEach((r) => Object.keys(r).forEach((k) => keys.add(k)));
    return keys;
  }

  /** Keys in groups of at most ``most``, in order. */
  function chunks(keys, most) {
    const out = [];
    for (let i = 0; i < keys.length; i += most) out.push(keys.slice(i, i + most));
    return out;
  }

  /** Where a metric without a chart of its own is drawn: its first two path parts for a
   *  key of three or more (``env/all``), else its first (``time``, ``optim``). */
  function prefixOf(key) {
    const parts = key.split("/");
    return parts.length >= 3 ? parts.slice(0, 2).join("/") : parts.length === 2 ? parts[0] : key;
  }

  /**
   * The lines of the league's score chart: self-play, each bot by name, and the past
   * checkpoints (``checkpoint:RUN@STEP``) one by one, or, when there are more than
   * MAX_CHECKPOINT_LINES, grouped by age: the mean score against the oldest, middle and
   * newest third of them, each labelled with the steps they were saved at.
   */
  function opponentLines(keys, prefix) {
    const lines = [];
    const past = [];
    for (const key of keys) {
      if (key === `${prefix}self_play_seat0_score`) {
        lines.push({ label: "self-play: seat 0's score", keys: [key] });
        continue;
      }
      const name = key.slice(`${prefix}score/`.length);
      const at = name.startsWith("bot:") ? null : name.match(/@(-?\d+)$/);
      if (at) past.push({ key, name, step: Number(at[1]) });
      else lines.push({ label: name, keys: [key] });
    }
    past.sort((a, b) => a.step - b.step);
    if (past.length <= MAX_CHECKPOINT_LINES) {
      return [...lines, ...past.map((c) => ({ label: c.name, keys: [c.key] }))];
    }
    AGE_GROUPS.forEach((age, g) => {
      const group = past.slice(Math.round((g * past.length) / AGE_GROUPS.length),
        Math.round(((g + 1) * past.length) / AGE_GROUPS.length));
      lines.push({ label: `past, ${age}: steps ${group[0].step}–${group[group.length - 1].step} ` +
        `(${group.length})`, keys: group.map((c) => c.key) });
    });
    return lines;
  }

  /**
   * Every metric present, each on one chart: [{section, title, keys, lines, range, note,
   * constant}], a line per key unless the spec groups them (``group``: keys -> [{label,
   * keys}], a line drawing the mean of its keys); ``share``: the keys drawn on a second,
   * [0, 1] axis on the right. ``constant``: every line kept one value over the run (the page
   * folds such a chart away).
   * The known ones laid out by meaning: first what tells whether a run learns (invalid
   * answers, turns, wins by opponent and seat, evaluations), then what a step costs, the
   * league; every other key in a chart of its prefix (its constant keys apart), so no
   * metric the trainer writes goes undrawn.
   */
  function layout(keys) {
    const out = [];
    const taken = new Set(["step"]);
    const add = (spec) => {
      const ks = spec.keys.filter((k) => keys.has(k) && !taken.has(k));
      if (!ks.length) return;
      ks.forEach((k) => taken.add(k));
      const lines = spec.group ? spec.group(ks)
        : ks.map((k) => ({ label: spec.label ? spec.label(k) : k, keys: [k],
          share: Boolean(spec.share && spec.share(k)) }));
      out.push({ ...spec, keys: ks, lines });
    };
    const all = [...keys].sort();
    const matching = (re) => all.filter((k) => re.test(k));
    learningSpecs(add, all, matching);
    leagueSpecs(add, all, matching);
    const rest = new Map();
    for (const key of all) {
      if (taken.has(key)) continue;
      const prefix = prefixOf(key);
      if (!rest.has(prefix)) rest.set(prefix, []);
      rest.get(prefix).push(key);
    }
    for (const [prefix, group] of [...rest.entries()].sort()) {
      const label = (k) => (k.startsWith(`${prefix}/`) ? k.slice(prefix.length + 1) : k);
      const still = group.filter((k) => steady([{ keys: [k] }]));
      const moving = group.filter((k) => !still.includes(k));
      const parts = chunks(moving, 8);
      parts.forEach((part, i) => add({ section: "other",
        title: parts.length > 1 ? `${prefix} (${i + 1} of ${parts.length})` : prefix, keys: part, label }));
      chunks(still, 8).forEach((part, i) => add({ section: "other",
        title: `${prefix}: constant${i ? ` (${i + 1})` : ""}`, keys: part, label }));
    }
    return out.map((spec) => ({ ...spec, constant: steady(spec.lines) }));
  }

  /** The training games' tags charted among the learning charts: ``all``, and each game
   *  of a multi-game run (a run of one game repeats ``env/all`` under its game's name:
   *  those keys go to their prefix's chart). */
  function envTags(all) {
    const tags = new Set(all.map((k) => (k.match(/^env\/([^/]+)\/(?:invalid_per_answer|turns|win)$/) || [])[1])
      .filter(Boolean));
    const games = [...tags].filter((t) => t !== "all").sort();
    return games.length > 1 ? ["all", ...games] : ["all"];
  }

  /** The learning section's charts, in the order a reader asks: does it answer validly,
   *  do its games last, does it win (by opponent, by seat, in evaluations), then what a
   *  step costs and what it taught, then the update's own figures. */
  function learningSpecs(add, all, matching) {
    const tags = envTags(all);
    const env = (name) => tags.map((t) => `env/${t}/${name}`);
    const tagOf = (k) => k.split("/")[1];
    const game = (k) => (tagOf(k) === "all" ? (tags.length > 1 ? "all games" : "training games") : tagOf(k));
    // test/<opponent>/win, or a multi-game run's test/<game>/<opponent>/win
    const opponents = [...new Set(all.map((k) => (k.match(/^test\/((?:[^/]+\/)?[^/]+)\/(win|draw|loss)$/) || [])[1])
      .filter(Boolean))].sort();
    const between = (k, tail) => k.slice("test/".length, k.length - tail.length);
    add({ section: "learning", title: "Invalid answers per answer (training games; evaluation vs each opponent)",
      range: [0, 1], keys: [...env("invalid_per_answer"), ...matching(/^test\/.*invalid_move_rate$/)],
      label: (k) => (k.startsWith("env/") ? game(k) : `vs ${between(k, "/invalid_move_rate")}`) });
    add({ section: "learning", title: "Turns per game (training games)", keys: env("turns"), label: game });
    scoreSpecs(add, all, matching);
    for (const opp of opponents) {
      add({ section: "learning", title: `Win / draw / loss vs ${opp}`, range: [0, 1],
        keys: ["win", "draw", "loss"].map((x) => `test/${opp}/${x}`), label: (k) => k.split("/").pop() });
    }
    add({ section: "learning", title: "Evaluation: mean score vs each opponent (win 1, draw ½)",
      range: [0, 1], keys: opponents.map((o) => `test/${o}/score`), label: (k) => between(k, "/score") });
    for (const tag of tags) {
      add({ section: "learning", range: [0, 1], keys: ["win", "draw", "loss"].map((x) => `env/${tag}/${x}`),
        title: `Training games: win / draw / loss per seat${tag === "all" ? "" : ` (${tag})`}`,
        label: (k) => k.split("/").pop() });
    }
    add({ section: "learning", title: "Invalid answers per game (each learner seat)", keys: env("invalid_moves"),
      label: game });
    add({ section: "learning", title: "Reward (training games)", keys: matching(/^env\/[^/]+\/reward\/total$/) });
    add({ section: "learning", title: "Evaluation: mean reward vs each opponent",
      keys: opponents.map((o) => `test/${o}/reward`), label: (k) => between(k, "/reward") });
    policySpecs(add, matching);
    costSpecs(add);
    updateSpecs(add, matching);
  }

  /** The learner's score in its training games against each opponent (bots, past
   *  checkpoints) and, in self-play, seat 0's: one chart per game's league. */
  function scoreSpecs(add, all, matching) {
    for (const game of ["", ...leagueGames(all)]) {
      const p = game ? `league/${game}/` : "league/";
      add({ section: "learning",
        title: `Wins by opponent and by seat: the learner's score (win 1, draw ½)${game ? ` (${game})` : ""}`,
        range: [0, 1],
        keys: [...matching(new RegExp(`^${escapeRe(p)}score/`)), ...matching(new RegExp(`^${escapeRe(p)}self_play_seat0_score$`))],
        group: (ks) => opponentLines(ks, p),
        note: "training games; bots by name; past checkpoints one by one, or, when there are more than " +
          `${MAX_CHECKPOINT_LINES}, the mean score against the oldest, middle and newest third of them` });
    }
  }

  /** Yardsticks and the policy at Kuhn poker's information sets. */
  function policySpecs(add, matching) {
    add({ section: "learning", title: "Exploitability (0: unexploitable; lower is better)",
      keys: matching(/^test\/.*exploitability$/), label: (k) => k.replace(/^test\//, "") });
    // Kuhn poker's policy at its information sets (test/yardstick/bet/<card><history>)
    const infoset = (k) => k.split("/").pop();
    add({ section: "learning", title: "Policy: how often it bets (card, then the history: p = a check)",
      range: [0, 1], keys: matching(/^test\/(?!greedy\/)(?:[^/]+\/)?yardstick\/bet\/[^/]*[^b/]$/), label: infoset });
    add({ section: "learning", title: "Policy: how often it calls a bet (card, then the history)",
      range: [0, 1], keys: matching(/^test\/(?!greedy\/)(?:[^/]+\/)?yardstick\/bet\/[^/]*b$/), label: infoset });
    add({ section: "learning", title: "Greedy policy (temperature 0): 1 where it bets or calls",
      range: [0, 1], keys: matching(/^test\/greedy\/(?:[^/]+\/)?yardstick\/bet\//), label: infoset });
    add({ section: "learning", title: "Invalid-move rate", keys: matching(/invalid_move_rate$|invalid_rate$/) });
  }

  /** What a step costs (its time, the tokens computed and reused), whether it taught, and
   *  the groups it dropped. */
  function costSpecs(add) {
    const time = { rollout: "sampling (rollout)", train: "training", eval: "evaluation", total: "total" };
    add({ section: "learning", title: "Time per step (s): sampling and training",
      keys: Object.keys(time).map((x) => `time/${x}`), label: (k) => time[k.slice("time/".length)] });
    const tokens = {
      "sampler/tokens_computed": "sampling: computed", "sampler/tokens_reused": "sampling: reused",
      "train/tokens_computed": "training: computed", "train/tokens_reused": "training: reused",
    };
    add({ section: "learning", title: "Tokens computed per step", keys: Object.keys(tokens),
      label: (k) => tokens[k], note: "reused: read from a cache of an earlier prompt instead of computed" });
    add({ section: "learning", title: "Steps that taught", keys: ["train/steps_taught", "train/taught"],
      label: (k) => (k === "train/taught" ? "this step taught (1) or dropped every group (0), right axis"
        : "steps that taught so far"),
      share: (k) => k === "train/taught" });
    const dropped = {
      constant_reward_groups: "groups whose games all ended alike", failed_groups: "failed groups",
      aborted_games: "aborted games", workers_lost: "workers lost",
    };
    add({ section: "learning", title: "Dropped per step: groups with nothing to teach, failures",
      keys: Object.keys(dropped).map((x) => `env/all/${x}`), label: (k) => dropped[k.split("/").pop()] });
  }

  /** The update's own figures: loss, KL, entropy, advantages, branching. */
  function updateSpecs(add, matching) {
    add({ section: "learning", title: "Loss", keys: matching(/^optim\/loss$/) });
    add({ section: "learning", title: "Supervised warm start (--sft-from): loss per answer token, before RL",
      keys: matching(/^sft\/loss$/), label: () => "cross-entropy" });
    add({ section: "learning", title: "Supervised warm start: answers and answer tokens a step",
      keys: matching(/^sft\/(examples|tokens)$/), label: (k) => k.replace(/^sft\//, "") });
    add({ section: "learning", title: "How far each step moved the policy (KL before → after, per answer)",
      keys: matching(/^policy\/step_kl$/), label: () => "step KL" });
    add({ section: "learning", title: "Exact KL to the magnet, per answer",
      keys: matching(/^kl\/(reverse|forward)$/),
      label: (k) => (k.endsWith("reverse") ? "KL(policy ‖ magnet)" : "KL(magnet ‖ policy)") });
    add({ section: "learning", title: "Entropy per answer (nats) and the collapse guard's scale",
      keys: matching(/^policy\/(answer_entropy|guard_scale)$/), label: (k) => k.replace(/^policy\//, "") });
    const moveNumber = (k) => `move ${k.split("/")[1].slice("move_".length)}`;
    const byMove = (ks) => ks.sort((a, b) => parseInt(a.split("_")[1], 10) - parseInt(b.split("_")[1], 10));
    add({ section: "learning", title: "Advantage spread by move number (std over the step's moves)",
      keys: byMove(matching(/^advantage\/move_\d+\/std$/)), label: moveNumber });
    add({ section: "learning", title: "Advantage size by move number (mean |advantage|)",
      keys: byMove(matching(/^advantage\/move_\d+\/mean_abs$/)), label: moveNumber });
    add({ section: "learning", title: "Branching cost: continuation moves per move of the training games",
      keys: matching(/^branch\/moves_per_move$/) });
    add({ section: "learning", title: "Branching: continuations and their moves a step",
      keys: matching(/^branch\/(games|moves)$/) });
  }

  /** The games of a multi-game run's leagues (league/<game>/...); none for one game. */
  function leagueGames(all) {
    return [...new Set(all.map((k) => (k.match(/^league\/([^/]+)\/pool_size$/) || [])[1]).filter(Boolean))].sort();
  }

  /** ``text`` as a regular expression that matches it literally. */
  function escapeRe(text) {
    return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  }

  /** The league's mix of opponents and its pool, per game in a multi-game run. */
  function leagueSpecs(add, all, matching) {
    for (const game of ["", ...leagueGames(all)]) {
      const p = game ? `league/${game}/` : "league/";
      const of = game ? ` (${game})` : "";
      const mix = { past_share: "past checkpoints", bot_share: "bots",
        collapse: "collapse (1: leaning on the past)" };
      add({ section: "league", title: `League: opponent mix (share of groups)${of}`, range: [0, 1],
        keys: Object.keys(mix).map((x) => p + x), label: (k) => mix[k.slice(p.length)] || k });
      add({ section: "league", title: `League: pool size${of}`, keys: [`${p}pool_size`],
        label: () => "past checkpoints in the pool" });
    }
    add({ section: "league", title: "League: other figures", keys: matching(/^league\//),
      label: (k) => k.replace(/^league\//, "") });
  }

  /** Steps with a value a chart needs before it can be called constant: a run's first
   *  steps are not folded away. */
  const MIN_STEADY_POINTS = 3;

  /** Whether every line kept one value over the rows (at least MIN_STEADY_POINTS steps with
   *  a value): a chart of such lines tells nothing a number would not. */
  function steady(lines) {
    let points = 0;
    const first = lines.map(() => null);
    for (const row of rows) {
      let any = false;
      for (let i = 0; i < lines.length; i++) {
        const v = value(row, lines[i].keys);
        if (v === null || v === undefined) continue;
        any = true;
        if (first[i] === null) first[i] = v;
        else if (Math.abs(v - first[i]) > 1e-12 * Math.max(1, Math.abs(first[i]))) return false;
      }
      if (any) points += 1;
    }
    return points >= MIN_STEADY_POINTS;
  }

  /** A line's value in a row: its key's, or the mean of its keys' (null where none is). */
  function value(row, keys) {
    if (keys.length === 1) return row[keys[0]] ?? null;
    let sum = 0;
    let n = 0;
    for (const k of keys) {
      const v = row[k];
      if (v !== undefined && v !== null) { sum += v; n += 1; }
    }
    return n ? sum / n : null;
  }

  /** uPlot's data for ``lines``, and how many steps have a value in any of them. The rows
   *  logged before RL (the warm-up's and the supervised warm start's, at negative steps)
   *  only where one of the lines has a value there: the RL charts start at step 0. */
  function data(lines) {
    const drawn = rows.filter((r) => !(r.step < 0) || lines.some((line) => value(r, line.keys) !== null));
    const xs = drawn.map((r, i) => (r.step ?? i));
    const ys = lines.map((line) => drawn.map((r) => value(r, line.keys)));
    const points = xs.filter((_x, i) => ys.some((y) => y[i] !== null)).length;
    return { series: [xs, ...ys], points };
  }

  /** Draw a chart's data; its point count goes in data-points (steps with a value). */
  function draw(chart) {
    const { series, points } = data(chart.lines);
    chart.panel.dataset.points = String(points);
    chart.plot.setData(series);
  }

  const SECTIONS = { learning: "charts", league: "league-charts", other: "other-charts" };
  const AXIS = { stroke: "#8a97a6", grid: { stroke: "#2a3440" } };
  /** The step axis's tick spacings: whole steps only. */
  const STEP_INCRS = [1, 2, 5].flatMap((m) => [1, 10, 100, 1e3, 1e4, 1e5, 1e6].map((p) => m * p))
    .sort((a, b) => a - b);

  /** The y range that fits a chart's values: a share's [0, 1] (``range``, widened if a value
   *  falls outside it); else the values with a little room, from 0 where they are all of one
   *  sign; a constant value in the middle of [0, 2 x value] ([0, 1] for 0). */
  function fitted(range) {
    return (_u, min, max) => {
      if (min === null || max === null || !Number.isFinite(min) || !Number.isFinite(max)) {
        return range ? [...range] : [0, 1];
      }
      if (range) return [Math.min(range[0], min), Math.max(range[1], max)];
      if (min === max) return min === 0 ? [0, 1] : min > 0 ? [0, 2 * min] : [2 * min, 0];
      const room = (max - min) * 0.08;
      return [min >= 0 ? Math.max(0, min - room) : min - room, max <= 0 ? Math.min(0, max + room) : max + room];
    };
  }

  /** A chart's uPlot options: its lines, its y axis fitted to its values (a second one on the
   *  right, [0, 1], for ``share`` lines beside others); the y range in data-y-range. */
  function plotOptions(spec, panel, points) {
    const twoAxes = spec.lines.some((l) => l.share) && spec.lines.some((l) => !l.share);
    const series = [{ label: "step" }, ...spec.lines.map((line, i) => ({
      label: line.label,
      stroke: Object.hasOwn(OUTCOME_COLORS, line.label) ? OUTCOME_COLORS[line.label]
        : COLORS[i % COLORS.length],
      width: 2,
      spanGaps: true,
      points: { show: points < 60 },
      ...(twoAxes && line.share ? { scale: "share" } : {}),
    }))];
    const range = spec.range || (spec.lines.every((l) => l.share) ? [0, 1] : null);
    const scales = { x: { time: false }, y: { range: fitted(range) } };
    const axes = [{ ...AXIS, incrs: STEP_INCRS }, { ...AXIS }];
    if (twoAxes) {
      scales.share = { range: fitted([0, 1]) };
      axes.push({ ...AXIS, scale: "share", side: 1, grid: { show: false } });
    }
    const shown = (u, key) => {
      if (key === "y") panel.dataset.yRange = JSON.stringify([u.scales.y.min, u.scales.y.max]);
    };
    return { width: plotWidth(panel), height: CHART_HEIGHT, series, axes, scales,
      legend: { live: true }, hooks: { setScale: [shown] } };
  }

  /** Where a section's constant charts go: its fold ("Constant over this run (N)"), which
   *  keeps whether the reader opened it. */
  function fold(section) {
    const details = document.getElementById(`${section}-constant`);
    return { details, box: clear(details.querySelector(".charts")), count: details.querySelector(".count") };
  }

  function build() {
    const boxes = Object.fromEntries(Object.entries(SECTIONS).map(([k, id]) => [k, clear(document.getElementById(id))]));
    const folds = Object.fromEntries(Object.keys(SECTIONS).map((k) => [k, fold(k)]));
    resizer.disconnect();
    charts = [];
    const specs = layout(keysOf());
    for (const section of Object.keys(SECTIONS)) { // learning holds the rating chart: always shown
      document.getElementById(`${section}-section`).hidden =
        section !== "learning" && !specs.some((s) => s.section === section);
      const folded = specs.filter((s) => s.section === section && s.constant).length;
      folds[section].details.hidden = !folded;
      folds[section].count.textContent = String(folded);
    }
    for (const spec of specs) { // (sections shown first: a plot takes its card's width)
      const panel = el("section", { class: "panel chart", "data-keys": JSON.stringify(spec.keys),
        "data-title": spec.title, "data-lines": JSON.stringify(spec.lines.map((l) => l.label)),
        "data-constant": spec.constant ? "true" : null },
      el("h2", { text: spec.title }), spec.note ? el("div", { class: "muted small", text: spec.note }) : null);
      (spec.constant ? folds[spec.section].box : boxes[spec.section]).append(panel);
      const { series: values, points } = data(spec.lines);
      panel.dataset.points = String(points);
      const plot = new uPlot(plotOptions(spec, panel, points), values, panel);
      charts.push({ plot, keys: spec.keys, lines: spec.lines, panel, constant: spec.constant });
      resizer.observe(panel);
    }
    if (!charts.length) {
      boxes.learning.append(el("div", { class: "empty" }, "No metric to chart yet: waiting for metrics.jsonl to grow."));
    }
    const constant = specs.filter((s) => s.constant).length;
    document.getElementById("chart-count").textContent = charts.length
      ? `${charts.length} charts of ${keysOf().size - 1} metrics` + (constant ? `, ${constant} constant (folded)` : "")
      : "";
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
    const width = plotWidth(panel);
    const band = { stroke: COLORS[0], width: 1, dash: [3, 4], points: { show: false } };
    ratingPlot = new uPlot({
      width, height: CHART_HEIGHT,
      series: [{ label: "step" },
        { label: "rating", stroke: COLORS[0], width: 2, points: { show: true } },
        { label: "95 % low", ...band }, { label: "95 % high", ...band }],
      axes: [{ stroke: "#8a97a6", grid: { stroke: "#2a3440" } },
        { stroke: "#8a97a6", grid: { stroke: "#2a3440" } }],
      scales: { x: { time: false } },
      legend: { live: true },
    }, series, panel);
    resizer.observe(panel);
  }

  /** Draw the new rows; build the charts again where the layout changed: a new metric, a
   *  chart that started to change (out of its fold), or one whose first steps all showed
   *  one value (into it). */
  function update() {
    const wanted = layout(keysOf()).map((s) => s.keys.join("|") + (s.constant ? "=" : "")).join(";");
    const have = charts.map((c) => c.keys.join("|") + (c.constant ? "=" : "")).join(";");
    if (wanted !== have) { build(); return; }
    for (const chart of charts) draw(chart);
  }

  /** The newest row with evaluation figures (``test/...``): {step, metrics}, or null. */
  function lastEval() {
    for (let i = rows.length - 1; i >= 0; i--) {
      const figures = Object.entries(rows[i]).filter(([k]) => k.startsWith("test/"));
      if (figures.length) return { step: rows[i].step, metrics: Object.fromEntries(figures) };
    }
    return null;
  }

  /** The run's facts under its title: game, steps, start, checkpoints, the best one,
   *  its last evaluation; then where to go from here. */
  function subtitle(info) {
    const last = rows.length ? rows[rows.length - 1] : {};
    const facts = clear(document.getElementById("facts"));
    const fact = (label, value, cls) => facts.append(el("div", { class: `fact-line ${cls || ""}` },
      el("span", { class: "muted", text: `${label} ` }), value));
    fact("Game", info && info.game_id ? info.game_id : "–", "game");
    fact("Steps", `${logged} logged` + (last.step !== undefined ? ` · last step ${last.step}` : ""), "steps");
    if (info && info.started_at) {
      fact("Started", `${Arena.ago(info.started_at)} (${new Date(info.started_at * 1000).toLocaleString()})`, "started");
    }
    if (info && info.checkpoints) {
      fact("Checkpoints", `${info.checkpoints} saved` + (info.best ? ` · best at step ${info.best.step}` : ""), "checkpoints");
    }
    const evaluation = lastEval() || (info && info.last_eval);
    if (evaluation) {
      fact("Last evaluation", `step ${evaluation.step}: ${Arena.evalFigures(evaluation.metrics).join(" · ")}`, "eval");
    }
    const links = clear(document.getElementById("run-links"));
    if (info && info.run_id) {
      links.append(el("a", { class: "button", href: `/?run=${encodeURIComponent(info.run_id)}` },
        "Its matches in the lobby"));
    }
    if (info && info.game_id && info.checkpoints) {
      const step = info.best ? info.best.step : null;
      const query = `game=${encodeURIComponent(info.game_id)}` +
        (step !== null ? `&opponent=${encodeURIComponent(`run:${name}@${step}`)}` : "");
      links.append(el("a", { class: "button", href: `/play?${query}` }, "Play its checkpoints"));
    }
    if (info && info.game_id) {
      links.append(el("a", { class: "button", href: `/leaderboard?game=${encodeURIComponent(info.game_id)}` },
        "Leaderboard"));
    }
    document.getElementById("source").textContent = info ? `Read from ${info.source}, as it grows.` : "";
  }

  async function listRuns() {
    document.getElementById("run-list").hidden = false;
    const box = document.getElementById("runs");
    try {
      const body = await Arena.getJSON("/api/runs");
      if (!body.runs.length) box.textContent = "No training run is watched yet.";
      else box.append(Arena.runsTable(body.runs));
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
    onStatus: (state) => {
      document.body.classList.toggle("stale-run", state === "closed"); // the banner says why
    },
    onMessage: (m) => {
      if (m.type === "metrics" && m.run === name) {
        if (m.reset) { rows = []; logged = 0; }
        if (m.info) info = m.info;
        rows = rows.concat(m.rows);
        logged = m.reset && m.info ? m.info.rows : logged + m.rows.length;
        thin();
        subtitle(info);
        if (m.reset) build(); else update();
        loadRatings(false);
      } else if (m.type === "error") {
        Arena.notice(m.message, true);
      }
    },
  });
})();
