"""`specdesk generate`: streams text, --json result, --log session log, one-line errors with exit 2."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import specdesk_side_by_side

from specdesk.core.sessionlog import read_log

ROOT = Path(__file__).resolve().parent.parent


def run(*args, timeout=300, env_extra=None, **kw):
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(env_extra or {})}
    return subprocess.run([sys.executable, "-m", "specdesk", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=env, **kw)


def test_generate_json_and_log(tiny_target, tiny_draft, tmp_path):
    log = tmp_path / "s.jsonl"
    r = run("generate", "--target", str(tiny_target), "--draft", str(tiny_draft), "--prompt", "def f(x):",
            "--max-new-tokens", "12", "--k", "3", "--json", "--log", str(log))
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert len(out["token_ids"]) == 12 and out["stop_reason"] == "max_new_tokens"
    for key in ("drafted", "accepted", "acceptance_rate", "mean_accepted_length", "target_forwards",
                "decode_seconds", "tokens_per_second"):
        assert key in out["stats"]
    session = read_log(log)
    # a tiny float folder stays as stored under auto (loading.Q8_AUTO_MIN_BYTES), and the log says so
    assert session.header["versions"]["torch"] and session.header["target"]["quant"] == "none"
    assert session.header["draft"]["quant"] == "none"
    assert session.header["settings"]["k"] == 3
    gen = session.generations[0]
    assert gen.complete and sum(len(s["token_ids"]) for s in gen.steps) == 12
    assert gen.summary["token_ids"] == out["token_ids"]
    assert "rss_bytes" in gen.steps[0]["memory"]


def test_k_is_auto_unless_given():
    from specdesk.cli import build_parser

    assert build_parser().parse_args(["generate", "--prompt", "x"]).k == "auto"
    assert build_parser().parse_args(["generate", "--prompt", "x", "--k", "4"]).k == 4
    assert build_parser().parse_args(["screenshot", "out.png"]).k == "auto"
    # the screenshot shows the window as the app loads a model: a 4-bit GGUF as q4 unless told otherwise
    assert build_parser().parse_args(["screenshot", "out.png"]).target_quant == "auto"
    assert build_parser().parse_args(["generate", "--prompt", "x"]).target_quant == "auto"


def test_generate_streams_text(tiny_target, tiny_draft):
    r = run("generate", "--target", str(tiny_target), "--draft", str(tiny_draft), "--prompt", "import os",
            "--max-new-tokens", "10")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() and "tok/s" in r.stderr
    assert "drafter model+lookup" in r.stderr  # the default with a draft, said beside the figures


@pytest.mark.parametrize("args,needle", [
    (["--prompt", "x", "--max-new-tokens", "-3"], "max new tokens"),
    (["--prompt", "x", "--k", "-1"], "k must be"),
    (["--prompt", "x", "--temperature", "-1"], "temperature"),
    (["--prompt", "x", "--top-p", "2"], "top-p"),
    (["--prompt", "x", "--tree", "4,x"], "tree widths"),
    (["--prompt-file", "/no/such/file"], "cannot read prompt file"),
    (["--prompt", "x", "--target", "/no/such/model"], "no such model folder"),
    (["--prompt", "x", "--target", "nobody/nothing-7b"], "not in the local Hugging Face cache"),
    (["--prompt", "x", "--drafter", "ngram", "--draft", "demo-draft"], "contradict"),
    (["--prompt", "x", "--target-quant", "int3"], "invalid choice"),
    (["--max-new-tokens", "5"], "required"),
])
def test_bad_input_is_one_line_exit_2(args, needle):
    r = run("generate", *args, timeout=120)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specdesk: error: ") and needle in lines[0], r.stderr
    assert "Traceback" not in r.stderr


def test_help_and_bad_settings_answer_before_torch_loads():
    """The parser and the settings' checks import no torch (~2 s): `--help` and a bad setting answer at once."""
    code = ("import sys\n"
            "from specdesk.cli import main\n"
            "rc = main(['generate', '--prompt', 'x', '--tree', '4,x'])\n"
            "rc2 = main(['generate', '--prompt', 'x', '--temperature', '-1'])\n"
            "try:\n"
            "    main(['plan', '--help'])\n"
            "except SystemExit as e:\n"
            "    rc3 = e.code\n"
            "print(rc, rc2, rc3, 'torch' in sys.modules)\n")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.stdout.split()[-4:] == ["2", "2", "0", "False"], (r.stdout, r.stderr)
    assert "tree widths" in r.stderr and "temperature" in r.stderr


def test_folders_that_are_not_models(tmp_path, tiny_target):
    empty = tmp_path / "empty"
    empty.mkdir()
    corrupt_cfg = tmp_path / "corrupt-config"
    corrupt_cfg.mkdir()
    (corrupt_cfg / "config.json").write_text("{not json")
    corrupt_st = tmp_path / "corrupt-weights"
    import shutil

    shutil.copytree(tiny_target, corrupt_st)
    (corrupt_st / "model.safetensors").write_bytes(b"\x00\x01garbage")
    cases = ((empty, "no config.json"), (corrupt_cfg, "corrupt config.json"), (corrupt_st, "corrupt weights file"))
    done = specdesk_side_by_side(*(["generate", "--target", str(folder), "--drafter", "none", "--prompt", "x"]
                                   for folder, _ in cases), timeout=120)
    for (_, needle), r in zip(cases, done):
        assert r.returncode == 2 and needle in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_killed_process_leaves_a_readable_log(tiny_target, tiny_draft, tmp_path):
    log = tmp_path / "killed.jsonl"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.Popen([sys.executable, "-m", "specdesk", "generate", "--target", str(tiny_target), "--draft",
                          str(tiny_draft), "--prompt", "x", "--max-new-tokens", "1000", "--log", str(log)],
                         cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.time() + 120
    while time.time() < deadline:
        if log.exists() and log.read_text().count('"type":"step"') >= 5:
            break
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.wait()
    session = read_log(log)
    steps = session.generations[0].steps
    assert len(steps) >= 5 and not session.generations[0].complete
    assert all("token_ids" in s for s in steps)


def test_interrupt_writes_summary(tiny_target, tiny_draft, tmp_path):
    log = tmp_path / "int.jsonl"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    p = subprocess.Popen([sys.executable, "-m", "specdesk", "generate", "--target", str(tiny_target), "--draft",
                          str(tiny_draft), "--prompt", "x", "--max-new-tokens", "1000", "--log", str(log)],
                         cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, text=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        if log.exists() and log.read_text().count('"type":"step"') >= 3:
            break
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 130 and "Traceback" not in err
    gen = read_log(log).generations[0]
    assert gen.complete and gen.summary["stop_reason"] == "cancelled"


FULL_DISK = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
             "resource.setrlimit(resource.RLIMIT_FSIZE, ({0}, {0})); from specdesk.cli import main; "
             "sys.exit(main(sys.argv[1:]))")


def test_a_log_the_disk_cannot_hold_stops_the_log_not_the_reply(tiny_target, tiny_draft, tmp_path):
    """Writes past a file-size limit fail as on a full disk: the reply is printed whole, then one error line
    (exit 2); the log keeps the lines written before. A log that cannot take even its header: refused first."""
    from specdesk.core import kernels

    kernels.library()  # built here first: the limit below would stop the build's own writes
    log = tmp_path / "full.jsonl"
    args = ["generate", "--target", str(tiny_target), "--draft", str(tiny_draft), "--prompt", "def f(x):",
            "--max-new-tokens", "40", "--k", "2", "--device", "cpu", "--json", "--log", str(log)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-c", FULL_DISK.format(8000), *args], cwd=ROOT, capture_output=True,
                       text=True, timeout=300, env=env)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("specdesk: error: the session log") and "stopped" in r.stderr
    assert json.loads(r.stdout)["new_tokens"] == 40  # the whole reply
    session = read_log(log)
    assert session.generations and len(session.generations[0].steps) >= 1 and not session.generations[0].complete
    small = tmp_path / "tiny.jsonl"
    r = subprocess.run([sys.executable, "-c", FULL_DISK.format(100), *args[:-1], str(small)], cwd=ROOT,
                       capture_output=True, text=True, timeout=300, env=env)
    assert r.returncode == 2 and r.stderr.startswith("specdesk: error: cannot write the log file"), r.stderr
    assert r.stdout == ""  # refused before generating


def test_prompts_that_are_not_utf8_are_one_line_errors(tiny_target):
    """Undecodable bytes on standard input or in an argument (Python keeps them as lone surrogates) were the
    tokenizer's TypeError and a traceback."""
    r = subprocess.run([sys.executable, "-m", "specdesk", "generate", "--target", str(tiny_target), "--device", "cpu",
                        "--max-new-tokens", "2", "--prompt-file", "-"], input=b"caf\xe9 \xff", cwd=ROOT,
                       capture_output=True, timeout=300)
    assert r.returncode == 2
    assert r.stderr.decode().startswith("specdesk: error: the prompt on standard input is not UTF-8"), r.stderr
    r = subprocess.run([sys.executable, "-m", "specdesk", "generate", "--target", str(tiny_target), "--device", "cpu",
                        "--max-new-tokens", "2", "--prompt", b"caf\xe9 \xff"], cwd=ROOT, capture_output=True, timeout=300)
    assert r.returncode == 2 and r.stderr.decode().startswith("specdesk: error: the prompt is not valid UTF-8 text")


def test_a_cache_folder_that_cannot_be_made_leaves_torchs_kernels(tiny_target, tmp_path):
    """SPECDESK_CACHE_DIR naming a file: the kernels cannot be built there; generation runs on torch's kernels and
    says why (was a NotADirectoryError traceback)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    r = run("generate", "--target", str(tiny_target), "--device", "cpu", "--prompt", "x", "--max-new-tokens", "3",
            "--drafter", "none", env_extra={"SPECDESK_CACHE_DIR": str(blocker)})
    assert r.returncode == 0, r.stderr
    assert "no place to build specdesk's own" in r.stderr and "Traceback" not in r.stderr
