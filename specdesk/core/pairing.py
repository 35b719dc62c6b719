"""Which drafter a (target, draft, drafter) request means: one rule for the engine, the planner and the CLI."""

from __future__ import annotations

from specdesk.core.errors import BadSetting

HYBRID = "model+lookup"  # the draft model, and prompt lookup's continuation where the context repeats
DRAFTERS = ("model", HYBRID, "ngram", "none")
MODEL_DRAFTERS = ("model", HYBRID)  # the drafters that need a draft model


def resolve_drafter(target: str, draft: str | None, drafter: str | None) -> tuple[str, str | None]:
    """(drafter, draft) after the defaults.

    A draft means drafter "model"; the bundled demo-target drafts with demo-draft; any other target
    with no draft uses prompt lookup ("ngram"). A draft together with drafter ngram/none is a contradiction.
    """
    if drafter is not None and drafter not in DRAFTERS:
        raise BadSetting(f"unknown drafter {drafter!r}: use one of {', '.join(DRAFTERS)}")
    if draft is not None and drafter in ("ngram", "none"):
        raise BadSetting(f"a draft model and drafter {drafter} contradict each other: choose one")
    if drafter is None:
        drafter = "model" if (draft is not None or target == "demo-target") else "ngram"
    if drafter in MODEL_DRAFTERS and draft is None:
        if target != "demo-target":
            raise BadSetting(f"drafter '{drafter}' needs a draft model (give one, or choose drafter ngram or none)")
        draft = "demo-draft"
    return drafter, (draft if drafter in MODEL_DRAFTERS else None)
