"""Training configuration: ``TrainConfig``, every setting of a run as one documented
field, with what the settings resolve to (a setting left unset, the match settings, the
branching, the league) and their checks (``TrainConfig.validate``, the one entry). Plain,
picklable and cheap to import, no torch or tinker: ``arena train``'s options and help are
built from these fields."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from games.registry import check_players, get_spec
from trainer.familydefaults import FAMILY_DEFAULTS, FamilyDefaults, game_family
from trainer.losses import RL_LOSSES, check_rl_loss
from trainer.renames import RENAMED_FIELDS, accept_old_names
from trainer.updatecheck import check_update

if TYPE_CHECKING:
    from arena.branching import BranchConfig

ObservationFormat = Literal["full", "last", "compact"]

Backend = Literal["local", "tinker"]

MAX_GAMES = 16
"""Games one run may train on at most."""


def split_games(text: str) -> tuple[str, ...]:
    """The game ids in ``text``: one id, or several separated by commas."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


# size: every setting of a run, one documented field each (the CLI's options come from them)
@accept_old_names(RENAMED_FIELDS)
@dataclass(frozen=True)
class TrainConfig:
    """Everything a training run needs; saved as ``config.json`` in the log directory."""

    game_id: str = "TicTacToe-v0"
    """The game to train on, by id (`arena games` lists them); several, comma-separated
    (``TicTacToe-v0,KuhnPoker-v0``), train one model on all of them: each step's groups
    are dealt to the games in turn, and each game is evaluated with its own bots and
    yardstick (``test/<game>/...``)."""
    num_players: int = 2
    """Seats per game (every game of a multi-game run is played with this many)."""
    backend: Backend = "local"
    """``local`` (a small model trained here; the default) or ``tinker`` (the hosted
    service: needs TINKER_API_KEY, TINKER_CREDENTIAL_CMD or `tinker auth login`)."""
    model: str | None = None
    """local: ``smollm2`` (a packaged model: ``make llm``), a ``.gguf`` file or a Hugging
    Face model directory (None: the built-in small GPT-2); tinker: the base model name."""
    renderer: str | None = None
    """How prompts are rendered: a cookbook renderer name (``qwen3_instruct``, ``llama3``,
    ...), ``chat`` (the tokenizer's own chat template) or ``bytes`` (the built-in model's).
    None: ``bytes`` for the built-in model, the cookbook's recommended renderer for a
    known hosted model, else ``chat``."""
    lora_rank: int | None = None
    """Rank of the LoRA adapter that trains (local: through ``peft``, the adapter alone is
    trained and checkpointed); 0 trains every weight (local backend only). None: 32,
    except 0 for the local backend's built-in model (its results are measured that way)."""
    device: str = "auto"
    """local: where the model runs: ``auto`` (the first CUDA GPU, else Apple's MPS, else
    the CPU), ``cpu``, ``cuda``, ``cuda:N`` or ``mps``; a device this machine lacks is
    refused before any work."""
    dtype: Literal["auto", "float32", "bfloat16"] = "auto"
    """local: ``auto`` (bfloat16 for a model directory on a CUDA GPU that supports it,
    else float32), ``float32`` or ``bfloat16``. With LoRA the frozen base is stored in it
    (the adapter and its Adam state stay float32); full fine-tuning keeps float32 weights
    and Adam state and computes in it (autocast)."""
    gradient_checkpointing: bool = False
    """local: recompute activations in the backward pass (less memory for long datums;
    one more forward pass of each block per step)."""
    reuse_prefixes: bool = True
    """local: compute each token once where prompts share a start: the sampler keeps what
    it computed for a prompt (1 GiB at most) and a seat's next turn or a group's other
    games reuse it; a training pass computes once the prefix that datums share. Counted in
    ``sampler/tokens_computed``, ``sampler/tokens_reused``, ``train/tokens_*``."""
    log_dir: str = "runs/latest"
    """Where config.json, metrics.jsonl and checkpoints go (default: runs/<game>-<time>)."""
    num_batches: int = 50
    """RL steps: batches, each one optimizer step (formerly ``steps``)."""
    batch_size: int = 8
    """Env groups per batch, that is per step (formerly ``groups_per_batch``)."""
    group_size: int = 8
    """Games per group; rewards are centred within a group (formerly ``games_per_group``)."""
    learning_rate: float | None = None
    """Adam's learning rate at the start of RL (see ``lr_schedule``). None: the game
    family's for the built-in model (``FAMILY_DEFAULTS``), else 3e-4."""
    lr_schedule: Literal["constant", "linear", "cosine"] = "cosine"
    """How the RL learning rate falls over the run, from ``learning_rate`` to
    ``learning_rate * lr_final_fraction``: over ``num_batches``, or over ``time_budget_s`` when
    that is set and runs out first (the share of it spent so far)."""
    lr_final_fraction: float = 0.1
    """The learning rate at the end of a ``linear`` or ``cosine`` schedule, as a share of
    ``learning_rate``."""
    loss_fn: str | None = dataclasses.field(default=None, metadata={"choices": RL_LOSSES})
    """Policy-gradient loss (``trainer.losses``: cispo runs on the tinker backend only).
    None: ``ppo`` when ``ppo_epochs`` > 1, else ``importance_sampling``."""
    ppo_epochs: int | None = None
    """Passes over each step's batch, each one optimizer step (PPO's epochs; more than 1
    needs the ``ppo`` loss, whose clip keeps the later passes near the sampler). None: the
    game family's for the built-in model, else 1."""
    max_tokens: int = 8
    """Longest action sampled, in tokens."""
    temperature: float = 1.0
    """Sampling temperature: of the evaluations, the league's past selves and (unless
    ``rollout_temperature`` is set) the training games."""
    rollout_temperature: float | None = None
    """Sampling temperature of the learner in its training games (None: ``temperature``).
    Above 1 it explores: a move the policy has nearly given up is still tried now and then,
    so its worth keeps being measured, while the loss's importance ratio (this policy's
    probability at temperature 1 over the sampler's) keeps the update one for the policy
    at ``temperature`` 1. Evaluations still sample at ``temperature``."""
    sample_timeout_s: float = 120.0
    """Time limit of one sampling call; a call that takes longer fails its game (which is
    dropped, or retried with ``rollout_retries``), so a hung sampler never stalls a step."""
    move_timeout_s: float = 120.0
    """How long any seat may take to answer before its match is aborted."""
    max_steps_off_policy: int = 1
    """1: the next step's games play while this step trains (the cookbook's asynchronous
    mode, one step off policy; the importance ratio of the loss corrects for it), about
    half the wall time per step here; 0: strictly on policy."""
    sampler: str = "local"
    """Where the training games are sampled: ``local`` (this process: the local backend's
    own sampler), ``vllm`` (``engines`` vLLM servers this run starts on this machine for
    its model, given the learner's LoRA adapter after every step; a real model with LoRA),
    or ``openai:URL[,URL...]`` (vLLM servers already running, on other GPUs or machines,
    started on the same model with ``--enable-lora``). Evaluations sample there too.
    docs/training.md, "Sampling on serving engines"."""
    engines: int = 1
    """With ``sampler`` ``vllm``: the vLLM servers to start (requests go to the least
    loaded)."""
    engine_python: str | None = None
    """With ``sampler`` ``vllm``: the Python that has vLLM (None: ``$ARENA_VLLM_PYTHON``,
    else this one); ``make vllm`` installs one in ``.venv-vllm``."""
    engine_args: str = ""
    """With ``sampler`` ``vllm``: more arguments for each server, as one string
    (``"--max-model-len 4096"``)."""
    rollout_workers: int = 0
    """Processes that play the groups (a spawn pool; their matches are recorded here);
    0 plays them in this process."""
    executor: str | None = None
    """``dask://HOST:PORT``: play the groups on that Dask cluster instead."""
    rollout_retries: int = 0
    """Per group: how many failed games (a seat raised or the match aborted) are replayed
    whole; the rest are dropped and counted (``env/all/aborted_games``)."""
    kl_penalty_coef: float | None = None
    """Penalise the sampled policy's divergence from a reference (the model as training
    started: the warmed-up base for the local model), as the cookbook does; 0 is off.
    Not set (None): 0.1 for the local backend's built-in model, whose warmed-up
    base plays the legal moves about uniformly, so the penalty keeps it exploring (without
    it the policy turned deterministic within 150-250 steps of tic-tac-toe and then jumped
    between lines from one evaluation to the next); 0 for other models (not measured)."""
    kl_reverse_coef: float | None = None
    """Exact KL(policy || magnet) over the whole next-token distribution at every answer
    token, from the logits (``trainer.local.magnet``; the local backend only: the hosted
    one returns the sampled tokens' logprobs, not the distribution). None: the game
    family's for the built-in model (``FAMILY_DEFAULTS``), else 0."""
    kl_forward_coef: float | None = None
    """Exact KL(magnet || policy) (a cross-entropy toward the magnet) at every answer
    token: the pull that brings back a move the policy has given up. None: as
    ``kl_reverse_coef``."""
    magnet_rate: float | None = None
    """The exact KL's magnet: an exponential moving average of the trained weights, moving
    this share of the way each optimizer step (0: it stays at the weights RL started
    from, or where ``kl_reference_every`` last put it). None: the family's, else 0.002."""
    entropy_floor: float | None = None
    """Collapse guard (with the exact KL): when the policy's entropy per answer (nats,
    measured on the last step's answers) is below this, the policy-gradient part of the
    update is scaled by entropy / floor, so the KL pull toward the magnet dominates until
    the policy is mixed again. None: off."""
    forfeit_wins_teach: bool = True
    """False: a game won because another seat forfeited (an invalid answer) teaches the
    winner nothing: its moves get advantage 0 and it is left out of its seat's baseline.
    True: such a win counts as any other."""
    kl_discount_factor: float = 0.0
    """Discount of the KL penalty's future sum (0: per token), as in the cookbook."""
    kl_reference_every: int = 0
    """0: the KL reference stays the model as training started. N: every N RL steps the
    reference becomes the policy as it is then (NashPG's phases of a fixed length: each
    stretch of N steps is pulled toward where the last one ended instead of back to the
    start). With the exact KL it is the magnet that moves onto the policy."""
    branches: int = 0
    """Per-move credit by branching (``arena.branching``): at ``branch_points`` decision
    points of every training game, the game is continued this many times from the state
    it was in (chance redrawn, the same players), and a move's advantage is the mean
    return after it minus the mean return before it. 0: off (every move of a seat shares
    its game's advantage)."""
    branch_points: int = 2
    """Branch points per training game (0: every decision point of the game)."""
    branch_choice: Literal["random", "even"] = "random"
    """Which decision points branch: ``random`` (uniformly, without replacement) or
    ``even`` (evenly spaced over the game)."""
    kl_phase_limit: float | None = None
    """NashPG's phases, ended early: a phase (``kl_reference_every`` steps at most) also
    ends at the first step whose KL to the reference reaches this (the policy has gone as
    far from the phase's anchor as a phase allows); the reference then moves to the
    policy. The KL is the exact one per answer (``kl/reverse``) where the exact KL is on,
    measured at the answer tokens only, else the sampled ``kl_policy_base``. None: phases
    of ``kl_reference_every`` steps."""
    shared_deal: bool = True
    """Deal every game of a group alike (the same cards, prize order or private values;
    each group its own deal), so the rewards centred within the group measure the moves,
    not the luck of the deal; each game's seats still sample their own moves. Off: game
    i of a group is dealt from its own seed. Games without chance are unaffected."""
    drop_constant_reward_groups: bool = True
    """Skip groups whose rewards are all equal (no signal)."""
    constant_groups_batch_baseline: bool = False
    """A group whose games all ended alike is centred on the whole batch instead of
    dropped: each trajectory's reward minus the mean of the same game and seat over the
    step's groups, where that differs (a group whose every game the second seat lost by
    an invalid move then teaches it, when other groups ended otherwise). Counted in
    ``env/all/constant_groups_taught``; on in a real model's settings."""
    baseline: Literal["seat", "group", "role"] = "seat"
    """``seat``: reward minus the mean of the same seat in its group (self-play puts both
    seats of each game in a group; centring them together credits the favoured seat's
    every move); ``group``: minus the group mean (the cookbook's); ``role``: minus an EMA
    per game and seat."""
    role_baseline_decay: float = 0.95
    """EMA decay of the role baseline."""
    invalid_move_penalty: float | None = None
    """Final reward of a seat that loses by an invalid move. None: the game's lowest
    reward (-1 for most games; -2 for Kuhn-v0, where a called bet loses 2: a forfeit must
    never cost less than a legal move can)."""
    invalid_move_policy: Literal["forfeit", "retry"] = "forfeit"
    """Forfeit: the first invalid move loses; retry: TextArena's retry."""
    opponents: Literal["self", "league"] = "league"
    """``league``: the learner plays its latest self, a pool of its past checkpoints (PFSP
    weights: the ones it still loses to most) and bots; ``self``: pure self-play (plus
    ``bot_fraction``). See ``matchmaking.league``."""
    league_past_share: float = 0.3
    """league: share of each step's groups against past checkpoints."""
    league_bot_share: float = 0.2
    """league: share of each step's groups against bots."""
    league_bots: tuple[str, ...] | None = None
    """league: the bots to play (PFSP-weighted like the pool); None: every bot that can
    play the game (for tic-tac-toe: random and the perfect player). Language models play
    here too, as released: ``model:smollm2``, ``openai:BASE_URL#MODEL``."""
    league_snapshot_every: int = 20
    """league: steps between two checkpoints joining the pool."""
    league_pool_size: int = 8
    """league: most past checkpoints in the pool (the starting policy always stays)."""
    league_average: bool = False
    """league: the past opponents are the average policy (NFSP, fictitious play): the
    pool is a uniform sample of every snapshot of the run, chosen uniformly (not by
    PFSP). Give it a larger ``league_pool_size`` (32) and ``league_past_share``."""
    pfsp_weighting: Literal["hard", "var", "uniform"] = "var"
    """league: how opponents are weighted by the learner's score x against them:
    hard (1 - x)^2, var x (1 - x), or uniform."""
    bot_fraction: float = 0.0
    """self: share of groups where the learner plays bots instead of itself."""
    bots: tuple[str, ...] = ("random",)
    """Self: bots for the bot_fraction groups."""
    observation_format: ObservationFormat | None = None
    """None: ``compact`` for the local backend's default model, ``full`` otherwise."""
    eval_every: int = 10
    """Steps between evaluations against the bots (0: never)."""
    eval_games: int = 200
    """Games per evaluation opponent (half in each seat)."""
    edge_eval_games: int | None = None
    """Games per opponent for the first and the final evaluation (None: ``eval_games``):
    the figures a run is judged by want more games than the points of a curve."""
    time_budget_s: float | None = None
    """Stop after this many seconds of RL (counted from the first step, after warm-up)."""
    eval_opponents: tuple[str, ...] | None = None
    """None: random, then the bots the game's yardstick plays (or the strongest of its own
    bots), for each game. The yardstick's bots are always played. Given, every game of a
    multi-game run plays them."""
    greedy_eval: bool = True
    """Each evaluation also plays the game's yardstick greedily (temperature 0): its
    opponents, with half the games, and its positions asked once; figures under
    ``test/greedy/...`` (``trainer.runeval.greedy_yardsticks``)."""
    yardstick_samples: int | None = None
    """Answers asked at each position of a yardstick that asks positions (Kuhn poker's 12
    information sets); None: the game's own number (Kuhn poker: 1,024, for a sampling noise
    of the exploitability below 0.01)."""
    save_every: int = 25
    """Steps between checkpoints (one is always saved at the end)."""
    warmup_steps: int | None = None
    """Format warm-up steps for the local default model, on random legal moves (0 skips
    it) (default 1200, or 0 with ``sft_from``, whose answers teach the format)."""
    warmup_games: int = 600
    """Random games that provide the warm-up examples."""
    warmup_learning_rate: float = 1e-3
    """Learning rate of the warm-up."""
    sft_from: str | None = None
    """A supervised warm start before RL, on recorded answers: a file of ``arena export``
    (``.jsonl``, ``.jsonl.gz``, ``.parquet``, a shard pattern) or a query of the run's
    database, ``db:KEY=VALUE,...`` (``db:game=TicTacToe-v0,player=optimal``): see
    docs/datasets.md, "Back into training"."""
    sft_seats: tuple[str, ...] = ()
    """Whose answers ``sft_from`` teaches: recorded names or policy keys (default: a
    ``db:`` query's ``player``, else every seat the source holds)."""
    sft_results: tuple[str, ...] = ()
    """Teach only the seats that ended so: ``win``, ``draw``, ``loss`` (default: any)."""
    sft_steps: int = 50
    """Supervised steps on the answers of ``sft_from``."""
    sft_batch: int = 64
    """Answers per supervised step."""
    sft_learning_rate: float | None = None
    """Learning rate of the supervised steps (None: ``warmup_learning_rate``)."""
    offpolicy_from: str | None = None
    """Recorded games in RL: answers of other players (people, agents, served models, bots)
    join each step's batch as off-policy data, weighted by the learner's probability of
    each: a file of ``arena export`` or a ``db:KEY=VALUE,...`` query, as ``sft_from``
    reads them. docs/datasets.md, "Recorded games in RL"."""
    offpolicy_share: float = 0.25
    """Recorded answers added to each step, as a share of the step's own datums (0: off;
    at most 1)."""
    offpolicy_clip: float = 0.2
    """The lower clip of a recorded answer's weight: the learner's probability of the
    answer (``exp`` of its tokens' summed logprobs), clipped to ``[offpolicy_clip, 1]``."""
    offpolicy_seats: tuple[str, ...] = ()
    """Whose answers ``offpolicy_from`` adds, as ``sft_seats`` (default: a query's
    ``player``, else every seat the source holds)."""
    seed: int = 0
    """Seed of the games, the model and the sampler."""
    db: str | None = None
    """Where matches are recorded (None: ARENA_DB or ./arena.db); "" turns recording off."""
    run_name: str | None = None
    """The run's name: its checkpoints are run:NAME@STEP (default: the log dir's name; a
    resumed run keeps its own; a name stored for another run is refused)."""

    @property
    def games(self) -> tuple[str, ...]:
        """The games the run trains on (``game_id`` split at its commas)."""
        return split_games(self.game_id)

    @property
    def multi_game(self) -> bool:
        """True when the run trains on more than one game."""
        return len(self.games) > 1

    def resolved_warmup_steps(self) -> int:
        """The format warm-up's steps (see ``warmup_steps``)."""
        default = 0 if self.sft_from else 1200
        return default if self.warmup_steps is None else self.warmup_steps

    def resolved_lora_rank(self) -> int:
        """The LoRA rank this run trains with (see ``lora_rank``; 0: every weight)."""
        if self.lora_rank is not None:
            return self.lora_rank
        return 0 if self.builtin_model else 32

    @property
    def builtin_model(self) -> bool:
        """True for the local backend's built-in model (its defaults are measured)."""
        return self.backend == "local" and self.model is None

    def family_defaults(self) -> FamilyDefaults | None:
        """The built-in model's defaults for the run's (first) game's family; None for
        other models."""
        if not self.builtin_model:
            return None
        return FAMILY_DEFAULTS[game_family(self.games[0])]

    def from_family(self, name: str, fallback: Any) -> Any:
        """Field ``name`` as set, else the game family's default for the built-in model
        (``FAMILY_DEFAULTS``), else ``fallback``."""
        value = getattr(self, name)
        if value is not None:
            return value
        family = self.family_defaults()
        return getattr(family, name) if family is not None else fallback

    def resolved_kl_coef(self) -> float:
        """The sampled KL penalty's coefficient this run uses (see ``kl_penalty_coef``)."""
        return float(self.from_family("kl_penalty_coef", 0.0))

    def resolved_learning_rate(self) -> float:
        """The RL learning rate at the start (see ``learning_rate``)."""
        return float(self.from_family("learning_rate", 3e-4))

    def resolved_ppo_epochs(self) -> int:
        """Passes over each batch (see ``ppo_epochs``)."""
        return int(self.from_family("ppo_epochs", 1))

    def resolved_loss_fn(self) -> str:
        """The policy-gradient loss this run uses (see ``loss_fn``)."""
        if self.loss_fn is not None:
            return self.loss_fn
        return "ppo" if self.resolved_ppo_epochs() > 1 else "importance_sampling"

    def decision_kl(self) -> Any:
        """The exact KL's settings (``trainer.local.magnet.DecisionKL``), or None when the
        run does not use it (both coefficients 0): the coefficients and the magnet's rate,
        each the config's or else its family default (other models: 0, 0 and 0.002)."""
        reverse = self.from_family("kl_reverse_coef", 0.0)
        forward = self.from_family("kl_forward_coef", 0.0)
        if reverse <= 0 and forward <= 0:
            return None
        from trainer.local.magnet import DecisionKL

        rate = self.from_family("magnet_rate", 0.002)
        return DecisionKL(reverse=reverse, forward=forward, magnet_rate=rate)

    def learning_rate_at(self, progress: float) -> float:
        """The RL learning rate once ``progress`` (0 to 1) of the run is done."""
        p = min(max(progress, 0.0), 1.0)
        low = self.lr_final_fraction
        start = self.resolved_learning_rate()
        if self.lr_schedule == "linear":
            return start * (1.0 - (1.0 - low) * p)
        if self.lr_schedule == "cosine":
            return start * (low + (1.0 - low) * (1.0 + math.cos(math.pi * p)) / 2)
        return start

    def resolved_invalid_move_penalty(self, game_id: str) -> float:
        """What losing ``game_id`` by an invalid move pays (see ``invalid_move_penalty``)."""
        if self.invalid_move_penalty is not None:
            return self.invalid_move_penalty
        return get_spec(game_id).reward_range[0]

    def match_settings(self, game_id: str, renderer: Any = None) -> Any:
        """How this run's games of ``game_id`` are played: an ``arena.match.MatchSettings``
        built once and carried whole (the dataset, the group builder, evaluation, the
        league). ``renderer``: the run's ``RendererConfig`` (resolved from the model's
        tokenizer, ``trainer.service.renderer_for``); None: the default."""
        from arena.match import MatchSettings  # not for the CLI's help
        from arena.renderers import RendererConfig
        from games.limits import SessionLimits

        limits = SessionLimits(
            invalid_move_policy=self.invalid_move_policy,
            invalid_move_penalty=self.resolved_invalid_move_penalty(game_id),
            move_timeout_s=self.move_timeout_s,
        )
        return MatchSettings(
            game_id,
            self.num_players,
            limits,
            renderer or RendererConfig(),
            self.resolved_format(),
        )

    def branching(self) -> BranchConfig | None:
        """The training games' branching (None when ``branches`` is 0). Raises ValueError
        when one group's continuations could pass ``MAX_BRANCH_GAMES``."""
        if not self.branches:
            return None
        from arena.branching import BranchConfig  # not for the CLI's help

        config = BranchConfig(self.branches, self.branch_points, self.branch_choice, self.seed)
        config.check_plan(self.group_size)
        return config

    def resolved_format(self) -> ObservationFormat:
        """The observation format this run uses."""
        if self.observation_format is not None:
            return self.observation_format
        return "compact" if self.builtin_model else "full"

    def check_sampler(self) -> None:
        """Raise ValueError for a ``sampler`` setting that cannot work."""
        if self.sampler == "local":
            return
        if self.sampler != "vllm":
            from trainer.engines.run import engine_urls  # light: no engine is reached

            engine_urls(self.sampler)
        elif self.engines < 1:
            raise ValueError(f"engines must be at least 1, got {self.engines}")
        if self.backend != "local" or self.builtin_model or self.resolved_lora_rank() < 1:
            raise ValueError(
                f"sampler {self.sampler}: engines sample a real model's LoRA run on the local "
                "backend (give --model smollm2 or a model directory, and --lora-rank 1 or more)"
            )

    def validate(self) -> None:
        """Raise ValueError (or UnknownGame) naming the first bad setting."""
        games = self.games
        if not games:
            raise ValueError("no game given")
        if len(set(games)) != len(games):
            raise ValueError(f"a game is named twice in {self.game_id!r}")
        if len(games) > MAX_GAMES:
            raise ValueError(f"at most {MAX_GAMES} games in one run, got {len(games)}")
        for game_id in games:
            spec = get_spec(game_id)
            if not spec.available:
                raise ValueError(f"{game_id} is not available here: {spec.reason}")
            check_players(spec, self.num_players)
        for name, value in (
            ("num_batches", self.num_batches),
            ("batch_size", self.batch_size),
            ("group_size", self.group_size),
            ("max_tokens", self.max_tokens),
        ):
            if value < 1:
                raise ValueError(f"{name} must be at least 1, got {value}")
        rank = self.resolved_lora_rank()
        if rank < 0 or (self.backend == "tinker" and rank < 1):
            low = "1 with the tinker backend" if self.backend == "tinker" else "0 (every weight)"
            raise ValueError(f"lora_rank must be at least {low}, got {rank}")
        if self.dtype not in ("auto", "float32", "bfloat16"):
            raise ValueError(f"unknown dtype {self.dtype!r}; choose auto, float32 or bfloat16")
        self.check_sampler()
        from trainer.sftsource import check_offpolicy, check_sft

        check_sft(self)
        check_offpolicy(self)
        if not 0.0 <= self.bot_fraction <= 1.0:
            raise ValueError("bot_fraction must be between 0 and 1")
        if self.opponents not in ("self", "league"):
            raise ValueError(f"unknown opponents {self.opponents!r}; choose self or league")
        if self.opponents == "league":
            from matchmaking.league import check_league_models

            for game_id in games:
                self.league_config(game_id)  # raises ValueError for bad shares or sizes
            check_league_models(self.league_bots or ())
        if self.resolved_learning_rate() <= 0:
            raise ValueError("learning_rate must be positive")
        check_update(self)
        if self.lr_schedule not in ("constant", "linear", "cosine"):
            raise ValueError(
                f"unknown lr_schedule {self.lr_schedule!r}; choose constant, linear or cosine"
            )
        if not 0.0 <= self.lr_final_fraction <= 1.0:
            raise ValueError("lr_final_fraction must be between 0 and 1")
        if self.rollout_temperature is not None and self.rollout_temperature <= 0:
            raise ValueError("rollout_temperature must be positive (or unset)")
        if self.sample_timeout_s <= 0 or self.move_timeout_s <= 0:
            raise ValueError("sample_timeout_s and move_timeout_s must be positive")
        if self.max_steps_off_policy not in (0, 1):
            raise ValueError("max_steps_off_policy must be 0 or 1")
        if self.rollout_workers < 0:
            raise ValueError("rollout_workers must not be negative")
        if self.executor is not None and not self.executor.startswith(("dask://", "tcp://")):
            raise ValueError(f"executor {self.executor!r}: give dask://HOST:PORT")
        if self.rollout_retries < 0:
            raise ValueError("rollout_retries must not be negative")
        if self.resolved_kl_coef() < 0 or not 0.0 <= self.kl_discount_factor <= 1.0:
            raise ValueError("kl_penalty_coef must be >= 0 and kl_discount_factor in [0, 1]")
        if self.branches < 0 or self.branch_points < 0:
            raise ValueError("branches and branch_points must not be negative (0: off / every)")
        if self.branches:
            self.branching()  # ValueError for a bad choice or a plan over the limit
        if self.backend not in ("local", "tinker"):
            raise ValueError(f"unknown backend {self.backend!r}; choose local or tinker")
        check_rl_loss(self.resolved_loss_fn(), self.backend)
        if self.backend == "tinker" and not self.model:
            raise ValueError("the tinker backend needs a base model name (model=...)")

    def league_config(self, game_id: str | None = None) -> Any:
        """The ``matchmaking.league.LeagueConfig`` these settings describe for ``game_id``
        (None: the run's first game); each game of a multi-game run has its own league."""
        from matchmaking.league import LeagueConfig
        from trainer.evaluate import league_bots

        game = game_id or self.games[0]
        bots = self.league_bots if self.league_bots is not None else league_bots(game)
        return LeagueConfig(
            past_share=self.league_past_share,
            bot_share=self.league_bot_share if bots else 0.0,
            bots=tuple(bots),
            snapshot_every=self.league_snapshot_every,
            pool_size=self.league_pool_size,
            weighting=self.pfsp_weighting,
            average=self.league_average,
        )

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return dataclasses.asdict(self)
