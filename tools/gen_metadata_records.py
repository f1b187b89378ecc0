"""Generate keeperless.metadata._records_gen from Kafka's metadata record JSON schemas.

    python tools/gen_metadata_records.py [SPEC_DIR] [OUT_FILE]

SPEC_DIR defaults to spec/metadata-records (Kafka's schemas, vendored so that a clone is
self-contained; refresh them from ../shared/spec/metadata-records or Apache Kafka). The
output is checked in; a unit test regenerates it and fails if it differs, so the classes
always match the specs.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SPEC = ROOT / "spec" / "metadata-records"
DEFAULT_OUT = ROOT / "src" / "keeperless" / "metadata" / "_records_gen.py"

PY_TYPES = {
    "bool": "bool",
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "int",
    "uint16": "int",
    "float64": "float",
    "string": "str",
    "bytes": "bytes",
    "uuid": "UUID",
}


def load_spec(path: Path) -> dict[str, object]:
    text = "\n".join(
        line for line in path.read_text().splitlines() if not line.strip().startswith("//")
    )
    spec: dict[str, object] = json.loads(text)
    return spec


def snake(name: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name)
    s = re.sub(r"(?<=[A-Z])([A-Z][a-z])", r"_\1", s)
    return s.lower()


def upper_snake(name: str) -> str:
    return snake(name).upper()


def versions(v: str | None) -> tuple[int, int]:
    if not v or v == "none":
        return (99, -1)
    if v.endswith("+"):
        return (int(v[:-1]), 32767)
    if "-" in v:
        lo, hi = v.split("-")
        return (int(lo), int(hi))
    return (int(v), int(v))


def default_expr(field: dict[str, object], nested: str | None) -> str:
    t = str(field["type"])
    d = field.get("default")
    if d == "null":
        return "None"
    if t.startswith("[]"):
        return "()"
    if t == "bool":
        return "True" if str(d).lower() == "true" else "False"
    if t in ("int8", "int16", "int32", "int64", "uint16"):
        return str(int(str(d))) if d is not None else "0"
    if t == "float64":
        return repr(float(str(d))) if d is not None else "0.0"
    if t == "string":
        return repr(str(d)) if d is not None else "''"
    if t == "bytes":
        return "b''"
    if t == "uuid":
        return "ZERO_UUID"
    raise ValueError(f"unknown type {t}")


def annotation(field: dict[str, object], nested: str | None) -> str:
    t = str(field["type"])
    if t.startswith("[]"):
        inner = t[2:]
        base = f"tuple[{nested or PY_TYPES[inner]}, ...]"
    else:
        base = PY_TYPES[t]
    if field.get("nullableVersions") or field.get("default") == "null":
        base += " | None"
    return base


class Gen:
    def __init__(self) -> None:
        self.classes: list[str] = []

    def struct(
        self, cls: str, fields: list[dict[str, object]], record: dict[str, object] | None
    ) -> None:
        specs: list[str] = []
        attrs: list[str] = []
        for f in fields:
            nested = None
            if "fields" in f:
                inner = str(f["type"])[2:]
                nested = f"{cls}{inner}" if record is None else f"{record['name']}{inner}"
                self.struct(nested, list(f["fields"]), None)  # type: ignore[arg-type]
            name = snake(str(f["name"]))
            attrs.append(f"    {name}: {annotation(f, nested)} = {default_expr(f, nested)}")
            lo, hi = versions(str(f["versions"]))
            nlo, _ = versions(f.get("nullableVersions"))  # type: ignore[arg-type]
            tag = f.get("tag")
            tlo, _ = versions(f.get("taggedVersions"))  # type: ignore[arg-type]
            specs.append(
                f"        FieldSpec({name!r}, {str(f['name'])!r}, {str(f['type'])!r}, {lo}, {hi}, "
                f"{nlo}, {None if tag is None else int(str(tag))}, {tlo}, {nested or 'None'}),"
            )
        lines = ["@dataclass(frozen=True, slots=True, kw_only=True)", f"class {cls}:"]
        if record is not None:
            lo, hi = versions(str(record["validVersions"]))
            lines.append(
                f'    """{record["name"]} (type {record["apiKey"]}), versions {lo}-{hi}."""'
            )
            lines.append("")
            lines.append(f"    API_KEY: ClassVar[int] = {record['apiKey']}")
            lines.append(f"    TYPE_NAME: ClassVar[str] = {upper_snake(str(record['name']))!r}")
            lines.append(f"    LOWEST_VERSION: ClassVar[int] = {lo}")
            lines.append(f"    HIGHEST_VERSION: ClassVar[int] = {hi}")
        lines.append("    FIELDS: ClassVar[tuple[FieldSpec, ...]]")
        lines.extend(attrs)
        lines.append("")
        lines.append("")
        lines.append(f"{cls}.FIELDS = (")
        lines.extend(specs)
        lines.append(")")
        self.classes.append("\n".join(lines))


def generate(spec_dir: Path) -> str:
    gen = Gen()
    records: list[tuple[int, str]] = []
    for path in sorted(spec_dir.glob("*.json")):
        spec = load_spec(path)
        if spec.get("type") != "metadata":
            continue
        gen.struct(str(spec["name"]), list(spec["fields"]), spec)  # type: ignore[arg-type]
        records.append((int(str(spec["apiKey"])), str(spec["name"])))
    records.sort()
    head = [
        '"""Metadata record classes generated from Kafka\'s JSON schemas.',
        "",
        "Do not edit: run `python tools/gen_metadata_records.py`.",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from dataclasses import dataclass",
        "from typing import ClassVar",
        "from uuid import UUID",
        "",
        "from keeperless.metadata.fieldspec import ZERO_UUID, FieldSpec",
        "",
        "",
    ]
    body = "\n\n\n".join(gen.classes)
    table = ["", "", "RECORD_TYPES: dict[int, type] = {"]
    table += [f"    {k}: {n}," for k, n in records]
    table.append("}")
    text = "\n".join(head) + body + "\n" + "\n".join(table) + "\n"
    ruff = Path(sys.executable).parent / "ruff"
    return subprocess.run(
        [str(ruff), "format", "--stdin-filename", str(DEFAULT_OUT), "-"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout


def main() -> None:
    spec = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_SPEC
    out = Path(sys.argv[2]) if len(sys.argv) > 2 else DEFAULT_OUT
    out.write_text(generate(spec))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
