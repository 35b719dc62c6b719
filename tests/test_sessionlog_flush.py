"""Every session-log line is on disk as soon as it is written: read back after each step, before the writer closes."""

from __future__ import annotations

from specdesk.core.events import DoneEvent, PrefillEvent, StepEvent
from specdesk.core.sessionlog import SessionLogWriter, read_log


def test_each_step_is_readable_from_the_file_while_the_writer_is_open(tiny_engine, tmp_path):
    path = tmp_path / "session.jsonl"
    writer = SessionLogWriter(path, tiny_engine.describe(), memory=lambda: {"rss_bytes": 1})
    assert read_log(path).header["target"]["name"] == tiny_engine.target.name  # the header, before any step
    writer.begin("def f(x):\n", {"k": 3}, "model", prompt_tokens=5)
    steps = 0
    for ev in tiny_engine.stream("def f(x):\n", max_new_tokens=24, k=3):
        writer.event(ev)
        log = read_log(path)  # a separate read of the file, the writer still open
        assert not log.truncated and len(log.generations) == 1
        g = log.generations[0]
        if isinstance(ev, PrefillEvent):
            assert g.prefill is not None and g.prefill["prompt_tokens"] == ev.prompt_tokens
        elif isinstance(ev, StepEvent):
            steps += 1
            assert len(g.steps) == steps and g.steps[-1]["token_ids"] == list(ev.token_ids)
            assert g.summary is None
        elif isinstance(ev, DoneEvent):
            assert g.summary["token_ids"] == list(ev.token_ids) and len(g.steps) == ev.stats.target_forwards
    assert steps >= 3
    assert not writer._f.closed  # everything above was read before the writer closed
    writer.close()
