"""Pre-processing quality and speed on the labelled sets in tests/data/preprocess/
(docs/architecture.md §10).

Prints, per split (``dev``: the one rules and thresholds were set on; ``held``: written
with them, so partly seen; ``fresh``: written apart by someone who never saw the rules,
the examples or the other splits, its misses read once; ``fresh2`` … ``fresh7``: written
the same way and never read, only their figures seen), one ``name: value unit`` line per
figure:

* ``tool_recall`` / ``tool_precision`` (all seven built-in tools enabled; first messages
  and follow-ups are preselected alike) and ``tool_recall_<tool>``,
  ``tool_recall_lang_<code>``; ``tool_recall_rules`` / ``tool_precision_rules`` (without
  the embedding model, as while it loads);
  ``tool_recall_demo`` / ``tool_precision_demo`` (only calculator, datetime_now and
  unit_convert enabled, as on the demo instance: the other requests need no tool);
* ``language_accuracy`` (and ``language_misses`` listed);
* ``injection_recall`` (outputs with instructions that screening redacts or withholds)
  and ``injection_false_positive_rate`` (clean outputs it touches); ``screening_p50`` /
  ``_p99`` (ms) of ``screen_tool_output`` per output (the phrase signals and the sentence
  classifier; the turn runs it in a thread);
* ``preprocess_p50`` / ``preprocess_p99`` (ms) of ``preprocess(...)`` per message on a
  follow-up after the turn's vector prefetch, ``vectors_prefetch_p50`` / ``_p99`` of that
  prefetch (in a thread beside the history load), ``preprocess_cold_p99`` without it;
* ``model_preselection_p50_ms`` / ``model_preselection_p99_ms``: the model-based tool
  preselection (``preprocess.amodel_tools_merge``, a first message of an instance with
  ``model_tool_preselection``) through the real gateway and LiteLLM to the scripted fake
  of ``tests/llm_fake.py`` answering at once, so what the product adds to the
  provider's own time; ``model_preselection_merged`` the share of calls whose pick was
  merged (1.0: none fell back).

Run: ``.venv/bin/python bench/preprocess_quality.py [--split NAME|all] [--misses]``, NAME
one of dev, held, fresh, fresh2 … fresh7 (misses are listed for dev, held and fresh only:
the others stay unread).
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "preprocess"
TOOLS = (
    "calculator",
    "datetime_now",
    "unit_convert",
    "weather",
    "web_search",
    "memory_search",
    "memory_save",
)
# The demo instance's tools: the other requests need no tool there.
DEMO_TOOLS = ("calculator", "datetime_now", "unit_convert")
SPLITS = ("dev", "held", "fresh", "fresh2", "fresh3", "fresh4", "fresh5", "fresh6", "fresh7")
# The splits whose rows may be read; the others' misses are never printed.
READ_SPLITS = ("dev", "held", "fresh")


def rows(name: str) -> list[dict[str, str]]:
    """The rows of ``tests/data/preprocess/<name>.tsv`` as dicts (tab-separated, header)."""
    with (DATA / f"{name}.tsv").open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle, delimiter="\t", quoting=csv.QUOTE_NONE))


def hidden_text(text: str) -> str:
    """``text`` with the data files' markers made invisible: ``⟦tag:…⟧`` as Unicode tag
    characters, ``⟦zw:…⟧`` / ``⟦zwj:…⟧`` with a ZWSP / ZWJ between letters, ``⟦flag:gbsct⟧``
    as a subdivision flag emoji (🏴 + tag characters + CANCEL TAG, whatever is inside),
    ``⟦vs:…⟧`` as UTF-8 bytes in variation selectors, ``⟦rlo:…⟧`` reversed inside a
    RIGHT-TO-LEFT OVERRIDE (shown in reading order)."""
    text = re.sub(r"⟦tag:(.*?)⟧", lambda m: "".join(chr(0xE0000 + ord(c)) for c in m[1]), text)
    text = re.sub(
        r"⟦vs:(.*?)⟧",
        lambda m: "".join(
            chr(0xFE00 + b) if b < 16 else chr(0xE0100 + b - 16) for b in m[1].encode()
        ),
        text,
    )
    text = re.sub(r"⟦rlo:(.*?)⟧", lambda m: "\u202e" + m[1][::-1] + "\u202c", text)
    text = re.sub(r"⟦zw:(.*?)⟧", lambda m: "\u200b".join(m[1]), text)
    text = re.sub(r"⟦zwj:(.*?)⟧", lambda m: "\u200d".join(m[1]), text)
    return re.sub(
        r"⟦flag:(.*?)⟧",
        lambda m: "\U0001f3f4" + "".join(chr(0xE0000 + ord(c)) for c in m[1]) + "\U000e007f",
        text,
    )


def _setup() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "openmates.settings")
    import django

    django.setup()


def tool_figures(
    split: str, show: bool, *, semantic: bool = True, tools: tuple[str, ...] = TOOLS
) -> dict[str, float]:
    """Recall, precision and per-tool / per-language recall of tool preselection (with
    the embedding, or without, as while the model loads) for an instance
    with ``tools`` enabled (a request for another tool then needs none)."""
    from pipeline import preprocess as pre
    from skills.registry import get_tool

    pre.warm_up()
    candidates = []
    for name in tools:
        spec = get_tool(name)
        assert spec is not None, name
        candidates.append(pre.ToolCandidate(name=name, description=spec.description))
    hits: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    by_lang: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    offered = correct = 0
    for row in rows(f"tool_requests_{split}"):
        gold = {t for t in row["tools"].split(",") if t} & set(tools)
        language = pre.detect_language(row["text"], fallback="en")
        chosen = pre.tool_choices(row["text"], candidates, language=language, semantic=semantic)
        got = {c.name for c in chosen}
        offered += len(got)
        correct += len(got & gold)
        for tool in gold:
            hits[tool][0] += tool in got
            hits[tool][1] += 1
            by_lang[row["lang"]][0] += tool in got
            by_lang[row["lang"]][1] += 1
        if show and got != gold:
            print(f"  tool miss [{row['lang']}] gold={sorted(gold)} got={chosen} {row['text']}")
    found = sum(h[0] for h in hits.values())
    total = sum(h[1] for h in hits.values())
    figures = {"tool_recall": found / total, "tool_precision": correct / max(offered, 1)}
    figures |= {f"tool_recall_{tool}": h[0] / h[1] for tool, h in sorted(hits.items())}
    figures |= {f"tool_recall_lang_{lang}": h[0] / h[1] for lang, h in sorted(by_lang.items())}
    return figures


def language_figures(split: str, show: bool) -> dict[str, float]:
    """Share of language samples detected as labelled (with their fallback language)."""
    from pipeline import preprocess as pre

    samples = rows(f"language_{split}")
    right = 0
    for row in samples:
        got = pre.detect_language(row["text"], fallback=row["fallback"])
        right += got == row["lang"]
        if show and got != row["lang"]:
            print(f"  language miss want={row['lang']} got={got} {row['text']}")
    return {"language_accuracy": right / len(samples)}


def injection_figures(split: str, show: bool) -> dict[str, float]:
    """Recall on outputs with instructions and false-positive rate on clean ones, and the
    time screening takes per output."""
    from pipeline import injection_model
    from pipeline import tool_output as out

    injection_model.warm_up()
    caught = positives = flagged = negatives = 0
    times: list[float] = []
    for row in rows(f"tool_outputs_{split}"):
        start = time.perf_counter()
        screened = out.screen_tool_output({"success": True, "result": hidden_text(row["text"])})
        times.append((time.perf_counter() - start) * 1000)
        touched = screened["screening"]["action"] != "kept"
        if row["injection"] == "1":
            positives += 1
            caught += touched
        else:
            negatives += 1
            flagged += touched
        if show and touched != (row["injection"] == "1"):
            print(f"  screening miss {screened['screening']} {row['text'][:100]}")
    return {
        "injection_recall": caught / positives,
        "injection_false_positive_rate": flagged / negatives,
        "screening_p50": statistics.median(times),
        "screening_p99": _percentile(times, 0.99),
    }


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def timing_figures(split: str) -> dict[str, float]:
    """p50/p99 (ms) of ``preprocess(...)`` on a follow-up, as the turn runs it: after
    ``tool_vectors_prefetch`` (which the turn runs in a thread while the history loads),
    whose own p50/p99 are ``vectors_prefetch_p50``/``_p99``; ``preprocess_cold_p99`` without
    the prefetch (the embedding inline)."""
    from instances.models import Instance
    from pipeline import preprocess as pre
    from skills.registry import get_tool

    instance = Instance(name="bench", slug="bench", default_language="en")
    candidates: list[Any] = []
    for name in TOOLS:
        spec = get_tool(name)
        assert spec is not None
        candidates.append(pre.ToolCandidate(name=name, description=spec.description))
    pre.warm_up()
    texts = [r["text"] for r in rows(f"tool_requests_{split}")]
    times: dict[str, list[float]] = defaultdict(list)

    def timed(name: str, message: str, prefetch: bool) -> None:
        start = time.perf_counter()
        if prefetch:
            pre.tool_vectors_prefetch(message)
            times["vectors_prefetch"].append((time.perf_counter() - start) * 1000)
            start = time.perf_counter()
        pre.preprocess(
            content=message,
            instance=instance,
            candidates=candidates,
            role="member",
            previous_assistant="An earlier answer.",
            mate_categories=["software", "writing"],
            fallback_language="en",
        )
        times[name].append((time.perf_counter() - start) * 1000)

    for round_ in range(3):
        for index, text in enumerate(texts):
            timed("preprocess", f"{text} ({round_}.{index})", True)  # never cached
            timed("preprocess_cold", f"{text} ({round_}.{index}) cold", False)
    return {
        "preprocess_p50": statistics.median(times["preprocess"]),
        "preprocess_p99": _percentile(times["preprocess"], 0.99),
        "vectors_prefetch_p50": statistics.median(times["vectors_prefetch"]),
        "vectors_prefetch_p99": _percentile(times["vectors_prefetch"], 0.99),
        "preprocess_cold_p99": _percentile(times["preprocess_cold"], 0.99),
    }


async def _model_preselection_times(calls: int) -> tuple[list[float], int]:
    from instances.models import Instance
    from pipeline import preprocess as pre
    from skills.registry import get_tool
    from tests.llm_fake import scripted_provider

    provider = scripted_provider()
    instance = Instance(name="bench", slug="bench", default_language="en")
    candidates = []
    for name in TOOLS:
        spec = get_tool(name)
        assert spec is not None
        candidates.append(pre.ToolCandidate(name=name, description=spec.description))
    times: list[float] = []
    merged = 0
    for index in range(calls):
        decided = pre.preprocess(
            content=f"Help me plan the shopping budget ({index})",
            instance=instance,
            candidates=candidates,
            role="member",
            previous_assistant=None,
            mate_categories=(),
        )
        provider.reply(text='{"tools": ["calculator"]}', model="fast")
        start = time.perf_counter()
        result = await pre.amodel_tools_merge(
            decided, candidates=candidates, instance=instance, chat_id="bench"
        )
        times.append((time.perf_counter() - start) * 1000)
        merged += "calculator" in result.tools
        provider.requests.clear()
    return times, merged


def model_preselection_figures(calls: int = 300) -> dict[str, float]:
    """p50/p99 (ms) of the model-based preselection against the instant scripted model
    (the first 20 calls, LiteLLM warming up, left out), and the share merged."""
    import asyncio
    import logging

    from django.conf import settings

    settings.LLM_DEFAULT_TIERS = {"fast": [{"model": "scripted/fast"}]}
    # The AI call log has no database here: its dropped batches are not the figure.
    logging.getLogger("openmates.llm_calllog").setLevel(logging.ERROR)
    times, merged = asyncio.run(_model_preselection_times(calls + 20))
    times = times[20:]
    return {
        "model_preselection_p50_ms": statistics.median(times),
        "model_preselection_p99_ms": _percentile(times, 0.99),
        "model_preselection_merged": merged / (calls + 20),
    }


def main() -> None:
    """Print the figures of the chosen split(s)."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--split", choices=(*SPLITS, "all"), default="all")
    parser.add_argument("--misses", action="store_true", help="list every miss")
    parser.add_argument("--no-timing", action="store_true")
    args = parser.parse_args()
    _setup()
    splits = SPLITS if args.split == "all" else (args.split,)
    for split in splits:
        misses = args.misses and split in READ_SPLITS
        figures = tool_figures(split, misses)
        rules = tool_figures(split, False, semantic=False)
        figures["tool_recall_rules"] = rules["tool_recall"]
        figures["tool_precision_rules"] = rules["tool_precision"]
        demo = tool_figures(split, False, tools=DEMO_TOOLS)
        figures["tool_recall_demo"] = demo["tool_recall"]
        figures["tool_precision_demo"] = demo["tool_precision"]
        figures |= language_figures(split, misses)
        figures |= injection_figures(split, misses)
        if not args.no_timing:
            figures |= timing_figures(split)
        for name, value in figures.items():
            unit = "ms" if name.endswith(("_p50", "_p99")) else ""
            print(f"{split}.{name}: {value:.3f} {unit}".rstrip())
    if not args.no_timing:
        for name, value in model_preselection_figures().items():
            print(f"{name}: {value:.3f}")


if __name__ == "__main__":
    main()
