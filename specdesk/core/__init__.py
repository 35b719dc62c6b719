"""The engine layer: torch + transformers only (no Qt, no NVML, no printing)."""
