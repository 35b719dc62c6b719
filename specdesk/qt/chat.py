"""The chat pane: a conversation model, a whole-word streaming buffer and the view that draws them.

The view keeps its own list of turns (plain data) and draws from it, so toggling the draft colour
or adding a measured speed-up to an old footer is a redraw, and tests read the turns directly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from PySide6.QtCore import QTimer
from PySide6.QtGui import QColor, QFont, QTextBlockFormat, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QTextBrowser

from specdesk.qt import theme

_LAST_SPACE = re.compile(r"\s(?!.*\s)", re.S)


@dataclass
class Span:
    text: str
    drafted: bool  # proposed by the draft and accepted by the target


@dataclass(frozen=True)
class Footer:
    """The figures under a reply; speed-up fields are filled once plain decoding was measured."""

    tokens: int
    tokens_per_second: float | None
    acceptance_rate: float | None
    mean_accepted_length: float | None
    stop_reason: str
    drafter: str
    plain_tokens_per_second: float | None = None
    identical_to_plain: bool | None = None
    prompt_tokens: int = 0
    kept_tokens: int = 0  # of the prompt's, kept from the last reply's cache (a chat's earlier turns): not read again
    prefill_seconds: float | None = None
    # a short reply's comparison (core/speedpool.py): the reply run again, pooled over compare_runs runs
    compared_tokens_per_second: float | None = None
    compare_runs: int = 1

    @property
    def speedup(self) -> float | None:
        spec = self.compared_tokens_per_second or self.tokens_per_second
        if self.plain_tokens_per_second and spec:
            return spec / self.plain_tokens_per_second
        return None

    def text(self) -> str:
        parts = [f"{self.tokens} tokens", f"{self.tokens_per_second:.1f} tok/s" if self.tokens_per_second else "- tok/s"]
        if self.acceptance_rate is not None:
            parts.append(f"acceptance {self.acceptance_rate:.0%}")
        if self.mean_accepted_length is not None:
            parts.append(f"{self.mean_accepted_length:.2f} tokens/step")
        if self.speedup is not None:
            same = {True: ", same output", False: ", output differs", None: ""}[self.identical_to_plain]
            plain, n = self.plain_tokens_per_second, self.compare_runs
            if self.compared_tokens_per_second:  # the reply run again: its own figure is not the one compared
                parts.append(f"{self.speedup:.2f}× vs plain ({self.compared_tokens_per_second:.1f} against "
                             f"{plain:.1f} tok/s, {n} run{'s' if n > 1 else ''} each{same})")
            else:
                parts.append(f"{self.speedup:.2f}× vs plain ({plain:.1f} tok/s{same})")
        parts.append(f"{self.drafter}")
        if self.prefill_seconds is not None and self.prompt_tokens:
            kept = f", {self.kept_tokens} kept" if self.kept_tokens else ""
            parts.append(f"prompt {self.prompt_tokens} tokens{kept}, read in {self.prefill_seconds * 1000:.0f} ms")
        if self.stop_reason not in ("eos", "max_new_tokens"):
            parts.append(f"stopped: {self.stop_reason}")
        return " · ".join(parts)


@dataclass
class Turn:
    role: str  # "user", "assistant", "notice", "error" or "html"
    spans: list[Span] = field(default_factory=list)
    title: str = ""
    footer: Footer | None = None

    @property
    def text(self) -> str:
        return "".join(s.text for s in self.spans)

    @property
    def drafted_text(self) -> str:
        return "".join(s.text for s in self.spans if s.drafted)


class WordBuffer:
    """Holds streamed text back until a whitespace, so words never appear half-formed.

    Pieces keep their "drafted" flag, so colours survive the regrouping.
    """

    def __init__(self) -> None:
        self._pending: list[Span] = []

    def push(self, text: str, drafted: bool) -> list[Span]:
        if text:
            if self._pending and self._pending[-1].drafted == drafted:
                self._pending[-1] = Span(self._pending[-1].text + text, drafted)
            else:
                self._pending.append(Span(text, drafted))
        # the last whitespace across the pending pieces: everything up to it is whole words
        for i in range(len(self._pending) - 1, -1, -1):
            m = _LAST_SPACE.search(self._pending[i].text)
            if m:
                head = self._pending[:i]
                cut = m.end()
                piece = self._pending[i]
                out = head + [Span(piece.text[:cut], piece.drafted)]
                rest = piece.text[cut:]
                self._pending = ([Span(rest, piece.drafted)] if rest else []) + self._pending[i + 1:]
                return out
        return []

    def flush(self) -> list[Span]:
        out, self._pending = self._pending, []
        return out

    @property
    def pending_text(self) -> str:
        return "".join(s.text for s in self._pending)


class ChatView(QTextBrowser):
    """Read-only transcript: user turns, streamed replies with accepted draft tokens coloured, footers."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setOpenExternalLinks(False)
        self.setReadOnly(True)
        self.document().setDocumentMargin(10)
        self.turns: list[Turn] = []
        self.highlight = True
        self._mono = theme.mono_font(10)

    # ---------------------------------------------------------------- model

    def clear_chat(self) -> None:
        self.turns.clear()
        self.clear()

    def add_user(self, text: str, title: str = "You") -> None:
        self.turns.append(Turn("user", [Span(text, False)], title=title))
        self._draw_turn(self.turns[-1])

    def begin_reply(self, title: str) -> None:
        self.turns.append(Turn("assistant", [], title=title))
        self._draw_header(self.turns[-1])
        self._start_body(self.turns[-1])

    def append_spans(self, spans: list[Span]) -> None:
        """Add streamed text to the open reply (already cut at word boundaries)."""
        if not spans or not self.turns or self.turns[-1].role != "assistant":
            return
        turn = self.turns[-1]
        stick = self._at_bottom()
        cur = self._end_cursor()
        for s in spans:
            if turn.spans and turn.spans[-1].drafted == s.drafted:
                turn.spans[-1] = Span(turn.spans[-1].text + s.text, s.drafted)
            else:
                turn.spans.append(Span(s.text, s.drafted))
            cur.insertText(s.text, self._span_format(s.drafted))
        if stick:
            self._scroll_to_bottom()

    def end_reply(self, footer: Footer) -> None:
        if self.turns and self.turns[-1].role == "assistant":
            self.turns[-1].footer = footer
            self._draw_footer(footer)

    def set_footer(self, index: int, footer: Footer) -> None:
        self.turns[index].footer = footer
        self.redraw()

    def last_reply_index(self) -> int | None:
        for i in range(len(self.turns) - 1, -1, -1):
            if self.turns[i].role == "assistant":
                return i
        return None

    def add_notice(self, text: str, error: bool = False) -> None:
        self.turns.append(Turn("error" if error else "notice", [Span(text, False)]))
        self._draw_turn(self.turns[-1])

    def add_html(self, html: str) -> None:
        """A block of rich text (the welcome): kept as a turn, so redraws keep it."""
        self.turns.append(Turn("html", [Span(html, False)]))
        self._draw_turn(self.turns[-1])

    def pop_turns(self, n: int) -> None:
        """Remove the last n turns (a reply that was not started after all)."""
        if n > 0:
            del self.turns[-n:]
            self.redraw()

    def set_highlight(self, on: bool) -> None:
        self.highlight = on
        self.redraw()

    # ---------------------------------------------------------------- drawing

    def redraw(self) -> None:
        self.clear()
        for t in self.turns:
            self._draw_turn(t)

    def _draw_turn(self, t: Turn) -> None:
        stick = self._at_bottom()
        if t.role == "html":
            bf = QTextBlockFormat()
            bf.setTopMargin(8)
            self._new_block(bf).insertHtml(t.text)
        elif t.role in ("notice", "error"):
            bf = QTextBlockFormat()
            bf.setTopMargin(8)
            cur = self._new_block(bf)
            f = QTextCharFormat()
            f.setForeground(QColor(theme.ERROR if t.role == "error" else theme.MUTED))
            f.setFontItalic(t.role == "notice")
            cur.insertText(("⚠ " if t.role == "error" else "") + t.text, f)
        else:
            self._draw_header(t)
            self._start_body(t)
            cur = self._end_cursor()
            for s in t.spans:
                cur.insertText(s.text, self._span_format(s.drafted) if t.role == "assistant" else self._plain_format())
            if t.footer is not None:
                self._draw_footer(t.footer)
        if stick:
            self._scroll_to_bottom()

    def _draw_header(self, t: Turn) -> None:
        bf = QTextBlockFormat()
        bf.setTopMargin(14 if self.document().characterCount() > 1 else 0)
        bf.setBottomMargin(3)
        cur = self._new_block(bf)
        f = QTextCharFormat()
        f.setFontWeight(QFont.Weight.DemiBold)
        f.setForeground(QColor(theme.ACCENT if t.role == "assistant" else theme.MUTED))
        cur.insertText(t.title or ("You" if t.role == "user" else "Model"), f)

    def _start_body(self, t: Turn) -> None:
        bf = QTextBlockFormat()
        bf.setLeftMargin(8)
        bf.setRightMargin(8)
        if t.role == "user":
            bf.setBackground(QColor(theme.USER_BG))
        self._new_block(bf)

    def _draw_footer(self, footer: Footer) -> None:
        bf = QTextBlockFormat()
        bf.setTopMargin(6)
        bf.setLeftMargin(8)
        cur = self._new_block(bf)
        f = QTextCharFormat()
        f.setForeground(QColor(theme.MUTED))
        f.setFontPointSize(8.5)
        cur.insertText(footer.text(), f)

    def _new_block(self, bf: QTextBlockFormat) -> QTextCursor:
        cur = self._end_cursor()
        if self.document().characterCount() > 1:
            cur.insertBlock(bf, self._plain_format())
        else:
            cur.setBlockFormat(bf)
        return cur

    def _plain_format(self) -> QTextCharFormat:
        f = QTextCharFormat()
        f.setFont(self._mono)
        f.setForeground(QColor(theme.TEXT))
        return f

    def _span_format(self, drafted: bool) -> QTextCharFormat:
        f = self._plain_format()
        if drafted and self.highlight:
            f.setForeground(QColor(theme.DRAFT))
            f.setBackground(QColor(theme.DRAFT_BG))
        return f

    def _end_cursor(self) -> QTextCursor:
        cur = QTextCursor(self.document())
        cur.movePosition(QTextCursor.MoveOperation.End)
        return cur

    def _at_bottom(self) -> bool:
        bar = self.verticalScrollBar()
        return bar.value() >= bar.maximum() - 4

    def resizeEvent(self, event) -> None:  # noqa: N802
        # a banner appearing above the chat makes it shorter: a view that showed the end keeps showing it (the new
        # reply went below the view, seen on X11)
        stick = self._at_bottom()
        super().resizeEvent(event)
        if stick and event.size().height() < event.oldSize().height():
            self._scroll_to_bottom()

    def _scroll_to_bottom(self) -> None:
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())
        # the document lays new text out later: the maximum grows after this call (on a real display the
        # first prompt under the welcome was left below the view, and the reply then never followed)
        QTimer.singleShot(0, self, lambda: bar.setValue(bar.maximum()))
