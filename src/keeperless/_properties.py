"""Java-properties text, the format of server.properties and meta.properties."""

from __future__ import annotations

import re

__all__ = ["PropertiesError", "parse_properties"]

_LINE = re.compile(r"^([^=:\s]+)\s*[=:\s]\s*(.*)$")


class PropertiesError(ValueError):
    """A line of a properties file cannot be parsed."""


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """Parse ``key=value`` / ``key: value`` lines with ``#``/``!`` comments and
    backslash continuations."""
    out: dict[str, str] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if not line or line[0] in "#!":
            continue
        parts = [line]
        while parts[-1].endswith("\\") and i < len(lines):
            parts[-1] = parts[-1][:-1]
            parts.append(lines[i].strip())
            i += 1
        full = "".join(parts)
        m = _LINE.match(full)
        if m is None:
            raise PropertiesError(f"{source}: cannot parse line {full!r}: expected key=value")
        out[m.group(1)] = m.group(2)
    return out
