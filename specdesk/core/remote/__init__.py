"""Talking to a server instead of a local engine: an OpenAI-compatible endpoint and its Prometheus metrics.

The remote engine (:mod:`.engine`) yields the same frozen events as the local decode loop, so the app's
chat, plots and session logs do not care which one produced them; :mod:`.figures` turns the server's
``/metrics`` (vLLM, llama.cpp or specdesk names) into the same kind of step-level figures.
"""
