"""Games sampled on a vLLM engine against the in-process sampler: the same SmolLM2
tic-tac-toe run (same seed, settings and batch) twice, once with ``--sampler local`` and
once with ``--sampler vllm``, one after the other (never at once: they would share the
cores).

    python -m bench.engines [--steps 10] [--engine-python .venv-vllm/bin/python]

Per run: RL steps a minute (the steps' own time, ``time/total``, the first step and the
engine's start apart), answer tokens a second while the games are played
(``optim/action_tokens`` over ``time/rollout_games``), the adapter push time, the engine's
logprobs against the learner's (``sampler/logprob_gap``), and the curve (each step's mean
reward, and the evaluations' wins against random). Written to
``bench-results/engines.json``; the ratios are vLLM over local, from the same machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

OUT = Path("bench-results")


def run(
    sampler: str, steps: int, seed: int, engine_python: str | None, eval_every: int
) -> dict[str, Any]:
    """One training run; its per-step metrics and wall time."""
    log_dir = OUT / "engines" / f"{sampler}-seed{seed}"
    subprocess.run(["rm", "-rf", str(log_dir)], check=True)
    command = [
        sys.executable, "-m", "arena_cli", "train", "--model", "smollm2",
        "--num-batches", str(steps), "--seed", str(seed), "--eval-every", str(eval_every),
        "--eval-games", "100", "--edge-eval-games", "100", "--log-dir", str(log_dir),
        "--sampler", sampler, "--no-serve",
    ]  # fmt: skip
    if sampler == "vllm" and engine_python:
        command += ["--engine-python", engine_python]
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    (log_dir / "bench-output.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise SystemExit(f"{sampler} run failed ({done.returncode}): {done.stderr[-2000:]}")
    rows = [json.loads(line) for line in (log_dir / "metrics.jsonl").read_text().splitlines()]
    return {"sampler": sampler, "wall_s": wall, "rows": rows}


def summary(result: dict[str, Any]) -> dict[str, Any]:
    """The figures of one run (steps after the first: the first pays for set-up)."""
    steps = [r for r in result["rows"] if "time/total" in r]
    later = steps[1:] or steps
    step_s = sum(r["time/total"] - r.get("time/eval", 0.0) for r in later)
    game_s = sum(r.get("time/rollout_games", 0.0) for r in later)
    tokens = sum(r.get("optim/action_tokens", 0.0) for r in later)
    evals = [(r["step"], r["test/random/win"]) for r in result["rows"] if "test/random/win" in r]
    gaps = [r["sampler/logprob_gap"] for r in steps if "sampler/logprob_gap" in r]
    pushes = [r["sampler/engine_push_s"] for r in steps if "sampler/engine_push_s" in r]
    return {
        "sampler": result["sampler"],
        "steps": len(steps),
        "wall_s": round(result["wall_s"], 1),
        "steps_per_min": round(60.0 * len(later) / step_s, 3) if step_s else None,
        "answer_tokens_per_s": round(tokens / game_s, 2) if game_s else None,
        "mean_reward": [round(r.get("env/all/reward/total", 0.0), 3) for r in steps],
        "wins_vs_random": evals,
        "logprob_gap_mean": round(sum(gaps) / len(gaps), 5) if gaps else None,
        "push_s_mean": round(sum(pushes) / len(pushes), 3) if pushes else None,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--engine-python", default=".venv-vllm/bin/python")
    parser.add_argument("--only", choices=("local", "vllm"), default=None)
    args = parser.parse_args(argv)
    OUT.mkdir(exist_ok=True)
    out_path = OUT / "engines.json"
    found: dict[str, Any] = json.loads(out_path.read_text()) if out_path.exists() else {}
    for sampler in ("local", "vllm"):
        if args.only not in (None, sampler):
            continue
        result = run(sampler, args.steps, args.seed, args.engine_python, args.eval_every)
        found[sampler] = summary(result)
        out_path.write_text(json.dumps(found, indent=2))
        print(json.dumps(found[sampler]), flush=True)
    if "local" in found and "vllm" in found:
        local, vllm = found["local"], found["vllm"]
        for key in ("steps_per_min", "answer_tokens_per_s"):
            if local.get(key) and vllm.get(key):
                found[f"ratio_{key}"] = round(vllm[key] / local[key], 3)
        out_path.write_text(json.dumps(found, indent=2))
        print(json.dumps({k: v for k, v in found.items() if k.startswith("ratio")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
