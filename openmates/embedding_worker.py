"""A local embedding model in a child process, so its CPU work runs beside the event loop.

The multilingual model of tool preselection is a numpy forward pass of a few hundred
small steps behind a pure-Python tokenizer (about 2 ms a message). In a server process
every step takes and gives back the GIL, and the event loop waited behind it: the turn's
database call and Redis reads that run beside the message's embedding took two to three
times their own time (docs/architecture.md §7). In a child process the model has a core
to itself and the server's thread only waits on a pipe, without the GIL.

One child per model and server process, started on the first call and again once after it
died; it loads the model before it says it is ready, and leaves when its input closes
(so when the server process ends, however it ends).

Frames on the child's standard input and output, integers big-endian:

* request: ``u32`` length, then the texts as a UTF-8 JSON array of strings;
* ready (once, after the model loaded): ``b"R"``;
* vectors: ``b"V"``, ``u32`` rows, ``u32`` dimensions, then rows * dimensions
  little-endian float32;
* error: ``b"E"``, ``u32`` length, then a UTF-8 message (the model failed to load, or
  failed on these texts).

Run as ``python -m openmates.embedding_worker MODEL`` by :class:`EmbeddingWorker` only.
"""

from __future__ import annotations

import json
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO, Any

from openmates.embeddings import LocalEmbeddingError

__all__ = ["EmbeddingWorker"]

_ROOT = Path(__file__).resolve().parent.parent
_U32 = struct.Struct(">I")
_SHAPE = struct.Struct(">II")


class _WorkerGoneError(Exception):
    """The child closed its output or did not answer in time."""


def _read_exact(stream: IO[bytes], size: int, deadline: float) -> bytes:
    """``size`` bytes from the child's output, or :class:`_WorkerGoneError` at EOF or past
    ``deadline`` (a ``time.monotonic()`` instant)."""
    fd = stream.fileno()
    chunks: list[bytes] = []
    missing = size
    while missing:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise _WorkerGoneError("no answer in time")
        chunk = os.read(fd, missing)
        if not chunk:
            raise _WorkerGoneError("the process ended")
        chunks.append(chunk)
        missing -= len(chunk)
    return b"".join(chunks)


class EmbeddingWorker:
    """The local embedding model ``model`` (a key of
    :data:`openmates.embeddings.LOCAL_EMBEDDING_MODELS`) run in a child process.

    :meth:`embed` is blocking and thread-safe (one request at a time per model, as the
    model itself allows); call it from a thread in async code.

    Args:
        model: the model's name, ``local/…``.
        load_timeout_s: how long the child may take to start and load the model.
        timeout_s: how long one request may take, plus ``per_text_s`` per text.
    """

    def __init__(
        self,
        model: str,
        *,
        load_timeout_s: float = 60.0,
        timeout_s: float = 10.0,
        per_text_s: float = 0.05,
    ) -> None:
        self.model = model
        self._load_timeout_s = load_timeout_s
        self._timeout_s = timeout_s
        self._per_text_s = per_text_s
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None
        self._broken: str | None = None

    @property
    def pid(self) -> int | None:
        """The child's process id while it runs, else None."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector per text, in order, computed by the child.

        A child that died or stopped answering is stopped and started again once.

        Raises:
            LocalEmbeddingError: the model cannot be loaded in the child (then every later
                call raises the same at once), the child failed on these texts, or a
                fresh child did not answer either.
        """
        if not texts:
            return []
        payload = json.dumps(texts, ensure_ascii=False).encode("utf-8", "replace")
        with self._lock:
            if self._broken is not None:
                raise LocalEmbeddingError(self._broken)
            for attempt in (1, 2):
                try:
                    return self._exchange(self._running(), payload, len(texts))
                except _WorkerGoneError as exc:
                    self._stop()
                    if attempt == 2:
                        raise LocalEmbeddingError(
                            f"The embedding process of {self.model} failed: {exc}."
                        ) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        """Stop the child (a later :meth:`embed` starts another)."""
        with self._lock:
            self._stop()

    def _running(self) -> subprocess.Popen[bytes]:
        process = self._process
        if process is not None and process.poll() is None:
            return process
        self._stop()
        process = self._spawn()
        self._process = process
        assert process.stdout is not None
        deadline = time.monotonic() + self._load_timeout_s
        if _read_exact(process.stdout, 1, deadline) != b"R":
            self._broken = _error_text(process.stdout, deadline)
            self._stop()
            raise LocalEmbeddingError(self._broken)
        return process

    def _spawn(self) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        env.setdefault("OPENBLAS_NUM_THREADS", "1")
        # The child imports this tree's openmates, whatever is installed.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(_ROOT), env.get("PYTHONPATH"))))
        return subprocess.Popen(
            [sys.executable, "-m", "openmates.embedding_worker", self.model],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=_ROOT,
            # Out of the server's process group: a Ctrl-C there ends the child through
            # its closed input, without a second traceback.
            start_new_session=True,
        )

    def _exchange(
        self, process: subprocess.Popen[bytes], payload: bytes, count: int
    ) -> list[list[float]]:
        import numpy as np

        assert process.stdin is not None
        assert process.stdout is not None
        try:
            process.stdin.write(_U32.pack(len(payload)) + payload)
            process.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise _WorkerGoneError("its input is closed") from exc
        deadline = time.monotonic() + self._timeout_s + self._per_text_s * count
        kind = _read_exact(process.stdout, 1, deadline)
        if kind == b"E":
            raise LocalEmbeddingError(_error_text(process.stdout, deadline))
        if kind != b"V":
            raise _WorkerGoneError(f"an unknown frame {kind!r}")
        rows, dimensions = _SHAPE.unpack(_read_exact(process.stdout, _SHAPE.size, deadline))
        data = _read_exact(process.stdout, rows * dimensions * 4, deadline)
        matrix = np.frombuffer(data, dtype="<f4").reshape(rows, dimensions)
        return [[float(x) for x in row] for row in matrix]

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        if process.poll() is None:
            process.kill()
        process.wait()
        for stream in (process.stdin, process.stdout):
            if stream is not None:
                stream.close()


def _error_text(stream: IO[bytes], deadline: float) -> str:
    try:
        (size,) = _U32.unpack(_read_exact(stream, _U32.size, deadline))
        return _read_exact(stream, size, deadline).decode("utf-8", "replace")
    except _WorkerGoneError as exc:
        return f"The embedding process ended before it was ready ({exc})."


def _write(out: IO[bytes], data: bytes) -> None:
    out.write(data)
    out.flush()


def _error_frame(message: str) -> bytes:
    text = message.encode("utf-8", "replace")
    return b"E" + _U32.pack(len(text)) + text


def _serve(model: str, source: IO[bytes], out: IO[bytes]) -> None:
    """The child's loop: load ``model``, say ready, answer requests until EOF."""
    import numpy as np

    from openmates.embeddings import inline_embedder

    try:
        embedder: Any = inline_embedder(model)
        embedder.embed(["ready"])  # loads the weights now, not on the first message
    except Exception as exc:
        _write(out, _error_frame(f"{type(exc).__name__}: {exc}"))
        return
    _write(out, b"R")
    while header := source.read(_U32.size):
        (size,) = _U32.unpack(header)
        texts = json.loads(source.read(size))
        try:
            matrix = np.asarray(embedder.embed(texts), dtype="<f4")
        except Exception as exc:
            _write(out, _error_frame(f"{type(exc).__name__}: {exc}"))
            continue
        _write(out, b"V" + _SHAPE.pack(*matrix.shape) + matrix.tobytes())


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The frames get the real standard output; anything a library prints goes to stderr.
    frames = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    _serve(sys.argv[1], sys.stdin.buffer, frames)
