"""One vLLM server that a run starts, watches and stops (``arena train --sampler vllm``).

The server runs as a child process (``python -m vllm.entrypoints.openai.api_server``) of
the Python that has vLLM: ``engine_python`` (``--engine-python``), else ``$ARENA_VLLM_PYTHON``,
else this interpreter. Its output goes to ``engine-N.log`` in the run's directory; a server
that exits or does not answer within ``start_timeout_s`` fails with the log's last lines.
Runtime LoRA loading is switched on (``VLLM_ALLOW_RUNTIME_LORA_UPDATING``), and the logprobs
it returns are those of the distribution it samples from (``processed_logprobs``: after the
temperature), as the local sampler's are.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

START_TIMEOUT_S = 600.0
"""How long a server may take to answer its first health check (a first start on 2 CPU
cores took about 95 s; later ones about 35 s)."""
STOP_GRACE_S = 20.0
"""How long a server has to exit after SIGTERM before it is killed."""
LOG_TAIL_LINES = 15
"""Lines of a failed server's log shown in its error."""
VLLM_PYTHON_ENV = "ARENA_VLLM_PYTHON"
"""The environment variable naming the Python that has vLLM installed."""


class EngineStartError(RuntimeError):
    """A vLLM server could not be started (vLLM missing, the process exited, or it did
    not answer in time); the message says which and shows the log's last lines."""


def vllm_python(engine_python: str | None = None) -> str:
    """The Python that runs vLLM: ``engine_python``, ``$ARENA_VLLM_PYTHON`` or this one.
    Raises EngineStartError (with the commands that install it) when it has no vLLM."""
    python = engine_python or os.environ.get(VLLM_PYTHON_ENV) or sys.executable
    found = subprocess.run(
        [python, "-c", "import vllm.entrypoints.openai.api_server"],
        capture_output=True,
        text=True,
        check=False,
    )
    if found.returncode != 0:
        last = (found.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise EngineStartError(
            f"{python} cannot run vLLM ({last}); install it apart from this environment with "
            "`make vllm` (a 3.5 GB environment in .venv-vllm) and pass --engine-python "
            f".venv-vllm/bin/python (or set {VLLM_PYTHON_ENV})"
        )
    return python


def _die_with_parent() -> None:
    """In the server's process before it runs (Linux): be sent SIGTERM when the run's
    process dies, however it dies, so that no engine outlives a killed run."""
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _signal_group(pid: int, sig: int) -> None:
    """Send ``sig`` to the process group ``pid`` leads (gone already: nothing to do)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class VLLMServer:
    """A vLLM OpenAI-compatible server on 127.0.0.1 serving ``model_dir``."""

    model_dir: Path
    log_path: Path
    python: str
    max_lora_rank: int = 16
    max_loras: int = 4
    """Adapters kept loaded at once (a step's, and the ones still finishing games)."""
    max_model_len: int = 2048
    kv_cache_gib: int = 4
    """``VLLM_CPU_KVCACHE_SPACE``: the KV cache of a CPU server (its prefix cache lives there)."""
    dtype: str = "float32"
    extra_args: tuple[str, ...] = ()
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    starts: int = 0
    """How many times it was started (restarts included)."""

    @property
    def url(self) -> str:
        """Its OpenAI-compatible base URL."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def served_name(self) -> str:
        """The name the base model is served under."""
        return "base"

    def command(self) -> list[str]:
        """The command line that starts it."""
        return [
            self.python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model_dir),
            "--served-model-name",
            self.served_name,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dtype",
            self.dtype,
            "--max-model-len",
            str(self.max_model_len),
            "--enable-lora",
            "--max-lora-rank",
            str(self.max_lora_rank),
            "--max-loras",
            str(self.max_loras),
            "--enable-prefix-caching",
            "--logprobs-mode",
            "processed_logprobs",
            *self.extra_args,
        ]

    async def start(self, timeout_s: float = START_TIMEOUT_S) -> None:
        """Start the process and wait until it answers. Raises EngineStartError."""
        if self.alive():
            return
        env = dict(os.environ)
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", str(self.kv_cache_gib))
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"\n== start {self.starts + 1}: {' '.join(self.command())}\n".encode())
            self.process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                # Its own process group: vLLM starts an engine core and workers of its
                # own, which must stop with it (``stop`` signals the whole group).
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        self.starts += 1
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process.poll() is not None:
                raise EngineStartError(
                    f"the vLLM server exited with status {self.process.returncode} while "
                    f"starting; {self.log_path} ends:\n{self.log_tail()}"
                )
            if await self.healthy():
                return
            if time.monotonic() > deadline:
                await self.stop()
                raise EngineStartError(
                    f"the vLLM server did not answer within {timeout_s:g} s; "
                    f"{self.log_path} ends:\n{self.log_tail()}"
                )
            await asyncio.sleep(1.0)

    async def healthy(self) -> bool:
        """True when it answers ``/health`` now."""
        import httpx

        try:
            async with httpx.AsyncClient(timeout=5.0) as http:
                answer = await http.get(self.url.removesuffix("/v1") + "/health")
        except httpx.HTTPError:
            return False
        return answer.status_code == 200

    def alive(self) -> bool:
        """True while the process runs."""
        return self.process is not None and self.process.poll() is None

    async def stop(self) -> None:
        """Stop the server and every process it started (SIGTERM to its process group,
        then SIGKILL after ``STOP_GRACE_S``); idempotent. The group is signalled even when
        the server itself is gone already: an engine killed from outside leaves its
        workers behind."""
        process = self.process
        if process is None:
            return
        _signal_group(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while process.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        _signal_group(process.pid, signal.SIGKILL)  # what is left of the group
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5.0)

    def log_tail(self) -> str:
        """The last ``LOG_TAIL_LINES`` lines of its log."""
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-LOG_TAIL_LINES:])
