"""``specdesk screenshot``: the real window after a real generation, rendered offscreen to a PNG."""

from __future__ import annotations


from specdesk.cli import main


def test_screenshot_renders_the_window_after_a_generation(qapp, tmp_path, monkeypatch, capsys):
    from PySide6.QtGui import QImage

    monkeypatch.setenv("SPECDESK_CONFIG_DIR", str(tmp_path / "cfg"))
    monkeypatch.setenv("SPECDESK_DATA_DIR", str(tmp_path / "data"))
    out = tmp_path / "shot.png"
    assert main(["screenshot", str(out), "--prompt", "import os\n", "--max-new-tokens", "12",
                 "--size", "1200x800"]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    img = QImage(str(out))
    assert (img.width(), img.height()) == (1200, 800)
    colours = {img.pixel(x, y) for x in range(0, 1200, 7) for y in range(0, 800, 7)}
    assert len(colours) > 50  # a drawn window, not a blank image
    # neither the user's settings nor their session logs were touched
    assert not (tmp_path / "cfg" / "settings.json").exists() and not (tmp_path / "data").exists()


def test_screenshot_refuses_a_non_png_name(tmp_path, capsys):
    assert main(["screenshot", str(tmp_path / "shot.jpg")]) == 2
    assert "PNG" in capsys.readouterr().err
