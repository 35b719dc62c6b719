"""Which drafter a (target, draft, drafter) request means: one rule for the engine, the planner and the CLI."""

from __future__ import annotations

from specdesk.core.errors import BadSetting

HYBRID = "model+lookup"  # the draft model, and prompt lookup's continuation where the context repeats
PHRASES = "phrases"  # prompt lookup, then a distilled draft's table of the target's own phrases (no model pass)
DRAFTERS = ("model", HYBRID, PHRASES, "ngram", "none")
MODEL_DRAFTERS = ("model", HYBRID)  # the drafters that draft with a draft model
NEEDS_DRAFT = (*MODEL_DRAFTERS, PHRASES)  # the drafters that need a draft folder (phrases: only its table is read)


def default_drafter(has_draft: bool) -> str:
    """The drafter a pair decodes with unless told otherwise (see :func:`resolve_drafter`)."""
    return HYBRID if has_draft else "ngram"


def may_take_own_draft(target: str, draft: str | None, drafter: str | None) -> bool:
    """Whether a request leaves the draft to specdesk: no draft given, a drafter that may use one, and not the demo
    target (its pairing is demo-draft). Such a target then drafts with a draft distilled for it, if there
    is one (discovery.own_draft): the engine, the command line and the app decide by this one rule."""
    return draft is None and drafter in (None, *NEEDS_DRAFT) and target != "demo-target"


def resolve_drafter(target: str, draft: str | None, drafter: str | None) -> tuple[str, str | None]:
    """(drafter, draft) after the defaults.

    A draft means drafter "model+lookup": the draft model, and prompt lookup's continuation where the context
    repeats (measured on q4 SmolLM2-135M-Instruct with its distilled draft, 2-core AMD EPYC, 8 chat prompts side by
    side, k=auto: greedy 1.34x of plain against the draft model alone's 1.21x; sampled at 0.7 1.07x against 1.06x;
    the demo pair at 0.7 1.38x against 1.41x, and greedy on its editing prompts 2.17x against 1.37x in the bench). The
    bundled demo-target drafts with demo-draft; any other target with no draft uses prompt lookup ("ngram"). A
    draft together with drafter ngram/none is a contradiction.
    """
    if drafter is not None and drafter not in DRAFTERS:
        raise BadSetting(f"unknown drafter {drafter!r}: use one of {', '.join(DRAFTERS)}")
    if draft is not None and drafter in ("ngram", "none"):
        raise BadSetting(f"a draft model and drafter {drafter} contradict each other: choose one")
    if drafter is None:
        drafter = default_drafter(draft is not None or target == "demo-target")
    if drafter in NEEDS_DRAFT and draft is None:
        if target != "demo-target":
            if drafter == PHRASES:
                raise BadSetting(f"drafter 'phrases' needs a table of this model's phrases: a distilled draft's, or "
                                 f"one `specdesk distill --phrases-only --target {target} --out DIR` makes (or "
                                 f"choose drafter ngram or none)")
            raise BadSetting(f"drafter '{drafter}' needs a draft model (give one, or choose drafter ngram or none)")
        draft = "demo-draft"
    return drafter, (draft if drafter in NEEDS_DRAFT else None)
