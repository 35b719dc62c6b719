"""A reader of the Prometheus text exposition format (version 0.0.4), enough for /metrics of LLM servers.

    samples = parse(text)            # [Sample(name, labels, value), ...] in file order
    value(samples, "vllm:num_requests_running")   # summed over label sets, None when absent

Comments (# HELP, # TYPE) are skipped, label values unescaped (\\\\, \\", \\n), timestamps ignored; a
malformed line is skipped rather than failing the whole scrape. ``prometheus_client``'s own parser reads
the same files (tests/test_serve.py checks the two agree on specdesk's /metrics).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict = field(default_factory=dict)
    value: float = math.nan


def _parse_labels(text: str, i: int) -> tuple[dict, int]:
    """Labels from text[i] == '{' to the closing '}'; returns (labels, index after '}')."""
    labels: dict[str, str] = {}
    i += 1
    n = len(text)
    while i < n:
        while i < n and text[i] in " ,":
            i += 1
        if i < n and text[i] == "}":
            return labels, i + 1
        eq = text.index("=", i)
        key = text[i:eq].strip()
        i = eq + 1
        while text[i] == " ":
            i += 1
        if text[i] != '"':
            raise ValueError("label value not quoted")
        i += 1
        out = []
        while text[i] != '"':
            ch = text[i]
            if ch == "\\":
                i += 1
                ch = {"n": "\n", "\\": "\\", '"': '"'}.get(text[i], "\\" + text[i])
            out.append(ch)
            i += 1
        labels[key] = "".join(out)
        i += 1
    raise ValueError("labels not closed")


def _number(text: str) -> float:
    t = text.strip()
    low = t.lower()
    if low in ("+inf", "inf"):
        return math.inf
    if low == "-inf":
        return -math.inf
    if low == "nan":
        return math.nan
    return float(t)


def parse(text: str) -> list[Sample]:
    out: list[Sample] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            brace = line.find("{")
            space = line.find(" ")
            if brace != -1 and (space == -1 or brace < space):
                name = line[:brace]
                labels, j = _parse_labels(line, brace)
                rest = line[j:].split()
            else:
                name, *rest = line.split()
                labels = {}
            if not rest:
                continue
            out.append(Sample(name, labels, _number(rest[0])))
        except (ValueError, IndexError):
            continue
    return out


def value(samples: list[Sample], name: str, **labels: str) -> float | None:
    """The sum of ``name`` over the label sets matching ``labels`` (None when there is none)."""
    found = [s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    return sum(found) if found else None


def by_label(samples: list[Sample], name: str, label: str) -> dict[str, float]:
    """{label value: summed value} for a labelled family (e.g. per draft position)."""
    out: dict[str, float] = {}
    for s in samples:
        if s.name == name and label in s.labels:
            out[s.labels[label]] = out.get(s.labels[label], 0.0) + s.value
    return out
