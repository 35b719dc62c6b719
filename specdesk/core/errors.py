"""Errors a user can cause and fix. Their message is one line, shown as is by the GUI and the CLI."""

from __future__ import annotations


class SpecdeskError(Exception):
    """A problem with the user's input or environment (bad path, incompatible draft, bad setting, ...)."""


class ModelNotFound(SpecdeskError):
    """A model name or path that does not lead to a usable local model."""


class BadModel(SpecdeskError):
    """A folder that exists but is not a loadable model (missing or corrupt files)."""


class IncompatibleDraft(SpecdeskError):
    """A draft whose tokenizer does not match the target's."""


class BadSetting(SpecdeskError):
    """A generation, planning or loading setting out of its valid range."""


class OutOfMemory(SpecdeskError):
    """The device ran out of memory while loading or generating."""


class OutOfDisk(SpecdeskError):
    """Not enough free disk space for a file specdesk must write (a GGUF file's converted weights)."""
