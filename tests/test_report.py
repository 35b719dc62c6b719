"""``specdesk report``: HTML (plots embedded) and CSV from real session logs, headless."""

from __future__ import annotations

import base64
import csv
import re

import pytest

from specdesk.cli import main
from specdesk.core.sessionlog import read_log

PROMPT = "for i in range(10):\n    print(i)\n"


@pytest.fixture(scope="module")
def session_log(tmp_path_factory, tiny_target, tiny_draft):
    """Two generations of the same prompt in one log: speculative, then plain decoding."""
    path = tmp_path_factory.mktemp("report") / "session.jsonl"
    common = ["generate", "--target", str(tiny_target), "--prompt", PROMPT, "--max-new-tokens", "12",
              "--device", "cpu", "--log", str(path)]
    assert main(common + ["--draft", str(tiny_draft)]) == 0
    assert main(common + ["--drafter", "none"]) == 0
    return path


def test_html_and_csv_reports(session_log, tmp_path, capsys):
    out_html, out_csv = tmp_path / "r.html", tmp_path / "r.csv"
    assert main(["report", str(session_log), "--html", str(out_html), "--csv", str(out_csv)]) == 0
    assert f"wrote {out_html}" in capsys.readouterr().out
    log = read_log(session_log)
    assert len(log.generations) == 2
    rows = list(csv.DictReader(out_csv.open()))
    assert len(rows) == sum(len(g.steps) for g in log.generations)
    assert [r["generation"] for r in rows].count("1") == len(log.generations[1].steps)
    assert all(int(r["tokens"]) == len(r["token_ids"].split()) for r in rows)
    html = out_html.read_text()
    images = re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", html)
    assert len(images) == 2
    assert all(base64.b64decode(i)[:8] == b"\x89PNG\r\n\x1a\n" for i in images)
    assert "<h2>Summary</h2>" in html and html.count("<tr><td>") == 2  # one summary row per generation
    assert "<th>seed</th>" in html
    spec, plain = (g.summary["stats"] for g in log.generations)
    ratio = (spec["new_tokens"] / spec["decode_seconds"]) / (plain["new_tokens"] / plain["decode_seconds"])
    assert f"{ratio:.2f}×" in html  # the speed-up against the plain run of the same prompt


def test_summary_without_outputs_and_a_cut_log(session_log, tmp_path, capsys):
    assert main(["report", str(session_log)]) == 0
    out = capsys.readouterr().out
    assert out.count("generation ") == 2 and "tok/s" in out
    cut = tmp_path / "cut.jsonl"
    text = session_log.read_text()
    cut.write_text(text[: len(text) - 40])  # killed mid-line: the summary line is half written
    assert main(["report", str(cut), "--html", str(tmp_path / "cut.html"), "--no-plots"]) == 0
    html = (tmp_path / "cut.html").read_text()
    assert "last line of this log was cut" in html and "incomplete" in html
    assert "data:image/png" not in html


def test_user_errors_are_one_line(tmp_path, session_log, capsys):
    assert main(["report", str(tmp_path / "missing.jsonl")]) == 2
    assert "no such session log" in capsys.readouterr().err
    junk = tmp_path / "junk.jsonl"
    junk.write_text('{"hello": 1}\n')
    assert main(["report", str(junk)]) == 2
    assert "not a specdesk session log" in capsys.readouterr().err
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    assert main(["report", str(session_log), "--csv", str(blocker / "out.csv")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("specdesk: error: cannot write") and err.count("\n") == 1


def test_a_run_appended_to_a_cut_log_keeps_both(session_log, tiny_target, tmp_path, capsys):
    """A run killed mid-line, then another run with the same --log: the writer starts on a new line and both runs'
    whole lines stay readable (before, the header was glued to the cut line and the report refused the file)."""
    text = session_log.read_text()
    cut = tmp_path / "cut.jsonl"
    cut.write_text(text[: len(text) - 40])
    assert main(["generate", "--target", str(tiny_target), "--prompt", PROMPT, "--max-new-tokens", "4",
                 "--device", "cpu", "--drafter", "none", "--log", str(cut)]) == 0
    assert cut.read_text()[len(text) - 40:].startswith('\n{"type":"header"')  # the new run on a line of its own
    log = read_log(cut)
    assert len(log.generations) == 3 and log.generations[2].summary["stats"]["new_tokens"] == 4
    assert log.damaged == 1 and not log.truncated  # the cut summary line, skipped
    assert main(["report", str(cut)]) == 0
    assert "1 damaged line(s) skipped" in capsys.readouterr().out
    # an older writer's file: the new header glued onto the cut line is recovered
    glued = tmp_path / "glued.jsonl"
    glued.write_text(text[: len(text) - 40] + text)
    old = read_log(glued)
    assert len(old.generations) == 4 and old.damaged == 1 and old.generations[3].summary is not None
    assert [len(g.steps) for g in old.generations[2:]] == [len(g.steps) for g in read_log(session_log).generations]


def test_odd_lines_in_a_log_are_skipped_not_fatal(session_log, tmp_path, capsys):
    lines = session_log.read_text().splitlines()
    odd = tmp_path / "odd.jsonl"
    steps = [i for i, line in enumerate(lines) if '"type":"step"' in line]
    lines[steps[0]] = lines[steps[0]].replace('"drafted":', '"drafted":null,"was":')
    summaries = [i for i, line in enumerate(lines) if '"type":"summary"' in line]
    lines[summaries[0]] = lines[summaries[0]].split('"stats":')[0] + '"stats":"x"}'
    odd.write_text("\n".join(lines[:2] + ["[1, 2, 3]"] + lines[2:]) + "\n")
    assert main(["report", str(odd), "--csv", str(tmp_path / "o.csv"), "--html", str(tmp_path / "o.html"),
                 "--no-plots"]) == 0
    assert read_log(odd).damaged == 1 and len(read_log(odd).generations) == 2
    # a figure of 0 in a whole summary line is a figure, not a damaged field
    from specdesk.qt.export import generation_summary

    g = read_log(session_log).generations[1]
    g.summary["stats"]["prefill_seconds"] = 0.0
    assert generation_summary(g)["prefill_seconds"] == 0.0
    assert main(["report", str(tmp_path)]) == 2
    assert "is a folder" in capsys.readouterr().err


def test_a_sampled_generation_shows_the_seed_it_drew(tiny_target, tmp_path):
    """A "random" seed is drawn per reply and logged: the report shows it (it read "–", the setting)."""
    path = tmp_path / "sampled.jsonl"
    assert main(["generate", "--target", str(tiny_target), "--prompt", PROMPT, "--max-new-tokens", "4",
                 "--temperature", "0.7", "--device", "cpu", "--drafter", "none", "--log", str(path)]) == 0
    seed = read_log(path).generations[0].summary["seed"]
    assert isinstance(seed, int)
    assert main(["report", str(path), "--html", str(tmp_path / "s.html"), "--no-plots"]) == 0
    assert f"<td class=n>{seed}</td>" in (tmp_path / "s.html").read_text()


def test_a_headless_report_prints_no_qt_noise(session_log, tmp_path):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    r = subprocess.run([sys.executable, "-m", "specdesk", "report", str(session_log), "--html", str(tmp_path / "r.html")],
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 0 and r.stderr == "", r.stderr  # the offscreen plugin's propagateSizeHints warning: gone
