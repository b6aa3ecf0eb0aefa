"""The AI call log's writer thread (openmates/llm_calllog.py): batches, and rows written
when the process exits."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from openmates.llm_calllog import CallLogWriter

ROOT = Path(__file__).resolve().parents[2]


class _Recorded(CallLogWriter):
    def __init__(self) -> None:
        super().__init__(price_per_token=lambda model: None)
        self.batches: list[list[dict[str, Any]]] = []

    def _write(self, batch: list[dict[str, Any]]) -> None:
        self.batches.append([dict(row) for row in batch])

    @staticmethod
    def _close_connection() -> None:
        return None


def test_a_burst_of_rows_is_one_batch_and_a_flush_writes_it_at_once() -> None:
    writer = _Recorded()
    for number in range(3):
        writer.put({"model": "m", "number": number})
    started = time.monotonic()

    assert writer.flush(timeout_s=5)

    assert time.monotonic() - started < writer.GATHER_S  # the flush did not wait it out
    assert [[row["number"] for row in batch] for batch in writer.batches] == [[0, 1, 2]]
    assert writer.pending() == 0


def test_rows_queued_when_the_process_exits_are_written(tmp_path: Path) -> None:
    out = tmp_path / "rows.json"
    script = textwrap.dedent(
        f"""
        import json
        from openmates.llm_calllog import CallLogWriter

        class ToFile(CallLogWriter):
            def _write(self, batch):
                with open({str(out)!r}, "a") as handle:
                    handle.write(json.dumps([row["number"] for row in batch]) + "\\n")

            @staticmethod
            def _close_connection():
                return None

        writer = ToFile(price_per_token=lambda model: None)
        for number in range(4):
            writer.put({{"model": "m", "number": number}})
        """
    )
    started = time.monotonic()
    subprocess.run([sys.executable, "-c", script], cwd=ROOT, check=True, timeout=60)

    assert [json.loads(line) for line in out.read_text().splitlines()] == [[0, 1, 2, 3]]
    assert time.monotonic() - started < 30
