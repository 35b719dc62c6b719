"""Draft training (``specdesk distill``): data from the target's own replies, a small draft, its folder."""
