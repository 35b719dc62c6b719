"""The remote engine (core's client of an OpenAI endpoint) yields the local engine's events, and the server
figures read from /metrics (specdesk:, vllm: and llamacpp: names) are the step figures the plots draw."""

from __future__ import annotations

import threading

import pytest

from specdesk.core.events import DoneEvent, PrefillEvent, StepEvent
from specdesk.core.remote import figures as F
from specdesk.core.remote.engine import RemoteEngine
from specdesk.core.remote.promtext import parse


@pytest.fixture(scope="module")
def served(tiny_engine, tmp_path_factory):
    from specdesk.serve import EngineHost, SpecdeskServer

    srv = SpecdeskServer(EngineHost(tiny_engine), port=0,
                         log_file=tmp_path_factory.mktemp("remote") / "s.jsonl").start()
    yield srv
    srv.stop()


def test_remote_events_equal_local_events(served, tiny_engine):
    remote = RemoteEngine.connect(served.url)
    assert remote.server == "specdesk" and not remote.has_chat_template
    assert remote.draft is not None and remote.max_context == tiny_engine.max_context
    prompt = "import os\nimport sys\n"
    local = tiny_engine.generate(prompt, max_new_tokens=20, k=3)
    events = list(remote.stream(remote.encode(prompt), max_new_tokens=20, k=3))
    assert isinstance(events[0], PrefillEvent) and events[0].prompt_tokens == local.stats.prompt_tokens
    steps = [e for e in events if isinstance(e, StepEvent)]
    done = events[-1]
    assert isinstance(done, DoneEvent)
    assert [s.token_ids for s in steps] == [s.token_ids for s in local.steps]
    assert [(s.drafted, s.accepted, s.k) for s in steps] == [(s.drafted, s.accepted, s.k) for s in local.steps]
    assert list(done.token_ids) == local.token_ids and done.text == local.text
    assert (done.stats.drafted, done.stats.accepted) == (local.stats.drafted, local.stats.accepted)
    # plain decoding on demand (the app's "Compare") reaches the server's engine
    plain = list(remote.stream(remote.encode(prompt), max_new_tokens=20, k=3, drafter="none"))
    assert list(plain[-1].token_ids) == local.token_ids and plain[-1].stats.drafted == 0


def test_cancel_ends_a_remote_stream(served):
    remote = RemoteEngine.connect(served.url)
    cancel = threading.Event()
    got = []
    for ev in remote.stream(remote.encode("x"), max_new_tokens=800, k=2, cancel=cancel):
        got.append(ev)
        if sum(isinstance(e, StepEvent) for e in got) == 2:
            cancel.set()
    assert isinstance(got[-1], DoneEvent) and got[-1].stop_reason == "cancelled"
    assert len(got[-1].token_ids) < 800


def _idle(remote) -> None:
    """Wait until the server has finished whatever an earlier test left running (a cancel ends within a step)."""
    import time

    for _ in range(200):
        if F.read_counters(parse(remote.endpoint.metrics_text()), 0.0).get("running") == 0:
            return
        time.sleep(0.05)


def test_server_figures_from_specdesk_metrics(served):
    remote = RemoteEngine.connect(served.url)
    _idle(remote)
    t0 = F.read_counters(parse(remote.endpoint.metrics_text()), 0.0)
    events = list(remote.stream(remote.encode("def f(x):\n"), max_new_tokens=24, k=4))
    t1 = F.read_counters(parse(remote.endpoint.metrics_text()), 2.0)
    fig = F.figures(t0, t1)
    steps = [e for e in events if isinstance(e, StepEvent)]
    drafting = [s for s in steps if s.drafted]
    assert fig.prefix == "specdesk:" and fig.generated == 24 and fig.tokens_per_second == pytest.approx(12.0)
    assert fig.draft_tokens == sum(s.drafted for s in steps) and fig.accepted == sum(s.accepted for s in steps)
    assert fig.drafts == len(drafting)
    if drafting:
        assert fig.mean_accepted_length == pytest.approx(1 + fig.accepted / len(drafting))
        assert fig.per_position[0] == pytest.approx(sum(1 for s in drafting if s.accepted >= 1) / len(drafting))
    assert fig.running == 0 and fig.memory_bytes and fig.memory_bytes > 0


VLLM_SCRAPE = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_waiting{engine="0",model_name="m"} 1.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:generation_tokens_total{engine="0",model_name="m"} %(gen)s
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} %(drafts)s
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} %(dtoks)s
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} %(acc)s
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} %(p0)s
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} %(p1)s
"""

LLAMACPP_SCRAPE = """# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total %(gen)s
llamacpp:requests_processing 2
llamacpp:requests_deferred 0
llamacpp:kv_cache_usage_ratio 0.5
"""


def test_vllm_and_llamacpp_names():
    a = F.read_counters(parse(VLLM_SCRAPE % dict(gen=100, drafts=10, dtoks=20, acc=12, p0=8, p1=4)), 10.0)
    b = F.read_counters(parse(VLLM_SCRAPE % dict(gen=300, drafts=60, dtoks=120, acc=72, p0=48, p1=24)), 12.0)
    fig = F.figures(a, b)
    assert fig.prefix == "vllm:" and fig.tokens_per_second == 100.0
    assert fig.acceptance_rate == pytest.approx(60 / 100) and fig.mean_accepted_length == pytest.approx(1 + 60 / 50)
    assert fig.per_position == pytest.approx((40 / 50, 20 / 50))
    assert (fig.running, fig.waiting, fig.kv_usage) == (3.0, 1.0, 0.25)
    c = F.read_counters(parse(LLAMACPP_SCRAPE % dict(gen=10)), 0.0)
    d = F.read_counters(parse(LLAMACPP_SCRAPE % dict(gen=60)), 1.0)
    fig = F.figures(c, d)
    assert fig.prefix == "llamacpp:" and fig.tokens_per_second == 50.0 and fig.acceptance_rate is None
    assert (fig.running, fig.waiting, fig.kv_usage) == (2.0, 0.0, 0.5)
    # draft counters under the names llama-server builds have used (no drafts count: no mean length)
    for drafted, accepted in (("n_drafted_total", "n_drafted_accepted_total"), ("n_draft_total", "n_accepted_total")):
        extra = "llamacpp:%s %%(dt)s\nllamacpp:%s %%(acc)s\n" % (drafted, accepted)
        c = F.read_counters(parse((LLAMACPP_SCRAPE + extra) % dict(gen=10, dt=40, acc=10)), 0.0)
        d = F.read_counters(parse((LLAMACPP_SCRAPE + extra) % dict(gen=60, dt=80, acc=40)), 1.0)
        fig = F.figures(c, d)
        assert fig.acceptance_rate == pytest.approx(30 / 40) and fig.mean_accepted_length is None


def test_promtext_agrees_with_prometheus_client(served):
    prom = pytest.importorskip("prometheus_client.parser")
    text = served.render_metrics()
    ours = {(s.name, tuple(sorted(s.labels.items()))): s.value for s in parse(text)}
    theirs = {(s.name, tuple(sorted(s.labels.items()))): s.value
              for fam in prom.text_string_to_metric_families(text) for s in fam.samples}
    assert ours == theirs and ours
