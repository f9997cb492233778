"""How a results field carries its meaning: declared with the field as its dataclass metadata, read back from there.

Every field of the results schema (measure/results/schema.py, record_schema.py) says what it means where it is
declared, and nowhere else:

    first_divergence: int | None = field(metadata=doc("index of the first differing token, None when identical"))
    alpha: float | None = documented("Σ accepted / Σ trials: ...", unit="share", label="α: accepted / ...")

`field_docs` reads them back for docs/results.md and for the `run` command's rows and units
(measure/results/schema_doc.py); a field declared without a meaning fails there, and tests/test_schema_doc.py asks it
of every schema.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any


def doc(meaning: str, unit: str = "", label: str = "") -> dict[str, str]:
    """A field's metadata. `meaning`: one sentence (markdown), what it is and where it comes from; `unit`: what its
    number counts: s, tokens/s, MiB, × (a ratio of throughputs), share, ... ("" for none); `label`: the `run` table's
    short meaning ("" for a field the table does not show)."""
    return {"doc": meaning, "unit": unit, "label": label}


def documented(meaning: str, unit: str = "", label: str = "") -> Any:
    """A field that is null until a writer fills it (`field(default=None)`), with `doc(meaning, unit, label)`."""
    return field(default=None, metadata=doc(meaning, unit, label))


@dataclass(frozen=True)
class FieldDoc:
    """One field of a results file, as its declaration says it."""

    name: str  # the JSON key (the dataclass field)
    type: str  # its declared type, as written
    unit: str  # what its number counts (see `doc`); "" for none
    meaning: str  # one sentence (markdown)
    label: str  # the `run` table's short meaning; "" for a field the table does not show


class UndocumentedField(TypeError):
    """A results field declared without `doc(...)`: a bug of the schema's, never of a run's."""


def undocumented(schema: type) -> list[str]:
    """The fields of a schema dataclass that say no meaning."""
    return [f.name for f in dataclasses.fields(schema) if not str(f.metadata.get("doc", "")).strip()]


def field_docs(schema: type) -> tuple[FieldDoc, ...]:
    """Each field of a schema dataclass as it is declared, in order; UndocumentedField if one says no meaning."""
    missing = undocumented(schema)
    if missing:
        raise UndocumentedField(f"{schema.__name__} declares {', '.join(missing)} without doc(...)")
    return tuple(
        FieldDoc(f.name, str(f.type), f.metadata.get("unit", ""), f.metadata["doc"], f.metadata.get("label", ""))
        for f in dataclasses.fields(schema)
    )
