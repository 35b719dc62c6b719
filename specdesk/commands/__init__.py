"""Headless subcommands of the ``specdesk`` command; each module has ``add_parser(sub)`` and sets ``func``."""
