"""The tools' one error type (kept free of heavy imports: the CLI loads it first)."""

from __future__ import annotations

__all__ = ["ToolError"]


class ToolError(RuntimeError):
    """An operator-facing failure: printed as one line, exit status 1."""
