"""The first-run welcome in the chat pane: what the colours, the cards and the plots mean, and how to load
your own model. Shown once (the settings remember it) and again from Help → Welcome."""

from __future__ import annotations

from specdesk.qt import theme


def welcome_html() -> str:
    chip = (f"<span style='color:{theme.DRAFT}; background:{theme.DRAFT_BG}'>&nbsp;green&nbsp;</span>")
    return f"""
<div style='color:{theme.TEXT}'>
<p style='font-size:12pt; font-weight:600; color:{theme.ACCENT}'>Welcome to specdesk</p>
<p>A small <b>draft</b> model guesses the next few tokens; the <b>target</b> model checks all the guesses in one
pass and keeps those it agrees with. Replies come faster, and are exactly what the target alone would write.
Where the text repeats itself (a sentence to rewrite, code to edit) the guesses come from the text instead
(prompt lookup): the Drafter choice "draft model + lookup", the default with a draft.</p>
<p><b>Colours.</b> In a reply, {chip} tokens were guessed by the draft and accepted by the target; plain text is
the target's own token (one per step: the correction or the bonus). View → Colour accepted draft tokens turns
it off.</p>
<p><b>Cards</b> (top right): <i>Tokens / s</i> of decoding; <i>Acceptance</i>, the share of drafted tokens
the target kept; <i>Tokens / step</i>, tokens per pass of the target (1.00 is plain decoding, higher is the
speed-up's source); <i>vs plain</i>, the speed-up once you press <i>Compare with plain decoding</i>.</p>
<p><b>Plots</b>: tokens/s through the reply (grey dashes: plain decoding, after Compare); acceptance, rolling and
overall; how many draft tokens each step kept; and memory: what specdesk holds and what is free, RAM or GPU.</p>
<p><b>Banners</b> above the chat appear when drafting slows a reply down, when a reply may not fit in memory,
or when acceptance drifts down over a conversation, each with its fix one click away.</p>
<p><b>Your own model</b>: Models → Add model folder… for a Hugging Face folder or a folder of GGUF files
(models in your Hugging Face cache, LM Studio's and Ollama's folders are listed without it), then Models → Choose models… to pick a target and a draft that
shares its tokenizer, or prompt lookup (no draft at all). Tools → VRAM fit planner… says what fits before
you load. Models with a chat template run as chat; others, like the demo pair (a small Python code model),
continue your text.</p>
<p style='color:{theme.MUTED}'>Try it: type the start of a Python function below and press Ctrl+Enter.</p>
</div>"""
