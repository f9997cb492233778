"""Is this line (or file) one a run wrote? The checks every reader applies to results read back.

Results are read back by hand-edited, half-copied or foreign files too, and the metrics trust what they are given
(a count that is negative, a time that is NaN, accepted lengths that do not pair with drafted ones would each become
a wrong figure rather than an error). So every reader (results/records.py's scans, the report, the export, a resume)
asks one of these: each returns why a value is not what the schema (results/schema.py) declares, or None, and never
raises. The reader decides what a problem costs (a skipped line, a skipped run, a one-line error).
"""

from __future__ import annotations

from dataclasses import MISSING, fields

from specbench.measure.results.schema import EngineRecord, ExampleRecord, Summary
from specbench.run_specs import GAMMA_POLICIES


def _split_union(annotation: str) -> list[str]:
    """'list[int | None] | None' → ['list[int | None]', 'None']: split on the '|' outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(annotation):
        depth += ch == "["
        depth -= ch == "]"
        if ch == "|" and depth == 0:
            parts.append(annotation[start:i].strip())
            start = i + 1
    return parts + [annotation[start:].strip()]


_SCALARS = {"str": (str,), "bool": (bool,), "dict": (dict,), "int": (int,), "float": (int, float)}


def conforms(value, annotation: str) -> bool:
    """Whether a JSON value has the type a schema field declares ('int', 'float | None', 'list[int]', ...)."""
    for kind in _split_union(annotation):
        if kind == "None" and value is None:
            return True
        if kind.startswith("list[") and isinstance(value, list):
            if all(conforms(v, kind[5:-1]) for v in value):
                return True
        elif kind in _SCALARS and isinstance(value, _SCALARS[kind]):
            if kind not in ("int", "float") or not isinstance(value, bool):  # JSON true is no number
                return True
    return False


def _field_problem(doc: dict, schema, where: str = "") -> str | None:
    """The first field of `schema` (a dataclass) missing without a default, or of the wrong type; None if none."""
    for f in fields(schema):
        if f.name not in doc:
            if f.default is MISSING and f.default_factory is MISSING:
                return f"{where}{f.name} is missing"
            continue
        if f.type == "EngineRecord":
            continue  # engine_problem checks it
        if not conforms(doc[f.name], str(f.type)):  # a str under `from __future__ import annotations`
            return f"{where}{f.name} is {type(doc[f.name]).__name__}, not {f.type}"
    return None


def engine_problem(doc, where: str) -> str | None:
    """Why `doc` is not an EngineRecord (types, and the invariants the metrics rely on), or None."""
    if not isinstance(doc, dict):
        return f"{where} is {type(doc).__name__}, not an object"
    problem = _field_problem(doc, EngineRecord, f"{where}.")
    if problem:
        return problem
    if doc["n_tokens"] != len(doc["token_ids"]):
        return f"{where}.n_tokens is {doc['n_tokens']} but token_ids holds {len(doc['token_ids'])}"
    steps = zip(doc["accept_lengths"], doc["draft_lengths"])
    if len(doc["accept_lengths"]) != len(doc["draft_lengths"]) or any(not 0 <= n <= g for n, g in steps):
        return f"{where}.accept_lengths do not pair with draft_lengths (0 <= accepted <= drafted at every step)"
    depths = doc.get("draft_depths") or []
    if depths and (
        len(depths) != len(doc["accept_lengths"])
        or any(not n <= d <= g for n, d, g in zip(doc["accept_lengths"], depths, doc["draft_lengths"]))
    ):
        return f"{where}.draft_depths do not pair with accept_lengths (accepted <= depth <= drafted at every step)"
    paths = doc.get("tree_paths") or []
    if paths and (
        len(paths) != len(doc["accept_lengths"])
        or any(
            p is not None and not tree_path_fits(p, n, g)
            for p, n, g in zip(paths, doc["accept_lengths"], doc["draft_lengths"])
        )
    ):
        return f"{where}.tree_paths do not pair with accept_lengths (n increasing nodes below the step's node count)"
    return engine_value_problem(doc, where)


def tree_path_fits(path: list[int], accepted: int, nodes: int) -> bool:
    """A tree step's accepted path: `accepted` node indices, increasing (a parent precedes its child), below `nodes`."""
    return len(path) == accepted and all(a < b for a, b in zip([-1, *path], path)) and (not path or path[-1] < nodes)


ENGINE_TIMES = ("prefill_s", "decode_s", "draft_s", "verify_s")  # seconds: finite, >= 0


ENGINE_COUNTS = ("n_tokens", "target_calls", "draft_calls", "drafted", "accepted", "trials")  # >= 0


def _finite_non_negative(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x < float("inf")


def engine_value_problem(doc: dict, where: str) -> str | None:
    """Values no run writes (a hand edit, a foreign tool): NaN, infinite or negative times, negative counts, more
    accepted than drafted, an acceptance expectation outside [0, 1]. Shared by every reader (report, export)."""
    for key in ENGINE_TIMES:
        if not _finite_non_negative(doc[key]):
            return f"{where}.{key} is {doc[key]}, not a finite number of seconds >= 0"
    for key in ("repeat_s", "batch_s"):
        value = doc.get(key)
        values = value if isinstance(value, list) else [] if value is None else [value]
        if not all(_finite_non_negative(v) for v in values):
            return f"{where}.{key} holds a value that is not a finite number of seconds >= 0"
    if doc["n_tokens"] > 0 and doc["prefill_s"] + doc["decode_s"] <= 0:  # a rate over no time: infinite tokens/s
        return f"{where} produced {doc['n_tokens']} tokens in 0 seconds (prefill_s + decode_s), which no run measures"
    for key in ENGINE_COUNTS:
        if doc[key] < 0:
            return f"{where}.{key} is {doc[key]}, a negative count"
    if doc["accepted"] > doc["drafted"]:
        return f"{where}.accepted is {doc['accepted']}, more than the {doc['drafted']} drafted"
    if any(v < 0 for v in doc["token_ids"]):
        return f"{where}.token_ids holds a negative id"
    if not all(_finite_non_negative(v) and v <= 1 + 1e-6 for v in doc["expected_accept"]):
        return f"{where}.expected_accept holds a value outside [0, 1]"
    return None


# the `numerics` field of an ExampleRecord (evidence/numerics.explain_example), as identity_line reads it
NUMERICS_FIELDS = {
    "floor_positions": "int",
    "floor_flips": "int",
    "floor_flip_margins": "list[float]",  # optional: the baseline's top-2 margin at each flip (the margin gate's range)
    "seconds": "float",
    "divergence": "dict | None",
}


def numerics_problem(value) -> str | None:
    """Why an ExampleRecord's `numerics` is neither null nor the classifier's dict, or None."""
    if value is None:
        return None
    for key, annotation in NUMERICS_FIELDS.items():
        if key in value and not conforms(value[key], annotation):
            return f"numerics.{key} is {type(value[key]).__name__}, not {annotation}"
    divergence = value.get("divergence")
    if divergence is not None and not isinstance(divergence.get("kind"), str):
        return "numerics.divergence has no kind"
    return None


def example_problem(row) -> str | None:
    """Why a line of examples.jsonl is not an ExampleRecord the metrics can use, or None."""
    if not isinstance(row, dict):
        return f"a JSON {type(row).__name__}, not an example record"
    return (
        _field_problem(row, ExampleRecord)
        or engine_problem(row["baseline"], "baseline")
        or engine_problem(row["speculative"], "speculative")
        or numerics_problem(row.get("numerics"))
        or turns_problem(row.get("turns"))
    )


def turns_problem(value) -> str | None:
    """Why an ExampleRecord's `turns` is neither null nor a list of per-turn engine records, or None."""
    for j, turn in enumerate(value or []):
        if not isinstance(turn, dict):
            return f"turns[{j}] is {type(turn).__name__}, not an object"
        for engine in ("baseline", "speculative"):
            if turn.get(engine) is not None and (problem := engine_problem(turn[engine], f"turns[{j}].{engine}")):
                return problem
    return None


def baseline_row_problem(row) -> str | None:
    """Why a line of a sweep's baselines/*.jsonl is not {"example_id": str, "baseline": EngineRecord}, or None."""
    if not isinstance(row, dict):
        return f"a JSON {type(row).__name__}, not a stored baseline"
    if not isinstance(row.get("example_id"), str):
        return "example_id is missing or not a string"
    return engine_problem(row.get("baseline"), "baseline")


def object_problem(row) -> str | None:
    """Every results JSONL line is a JSON object (the probes' files are checked no further)."""
    return None if isinstance(row, dict) else f"a JSON {type(row).__name__}, not an object"


def _positive(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x < float("inf")


def noise_probe_problem(row) -> str | None:
    """A line of noise_probes.jsonl: {"after": example id or null, "ms": positive milliseconds}."""
    return object_problem(row) or (None if _positive(row.get("ms")) else "ms is not a positive number")


def load_batch_problem(row) -> str | None:
    """A line of load_batches.jsonl (record_schema.LoadBatch) that the load summary can use: its arm, repeat, a
    positive wall time, the token count and one TTFT and TPOT list entry per request."""
    if object_problem(row):
        return object_problem(row)
    if row.get("arm") not in ("baseline", "speculative"):
        return "arm is not baseline or speculative"
    if not isinstance(row.get("repeat"), int) or not _positive(row.get("wall_s")):
        return "repeat is not an integer or wall_s is not a positive number"
    if not isinstance(row.get("output_tokens"), int):
        return "output_tokens is not an integer"
    ttft, tpot = row.get("ttft_s"), row.get("tpot_s")
    if not isinstance(ttft, list) or not isinstance(tpot, list) or len(ttft) != len(tpot):
        return "ttft_s and tpot_s are not lists of one entry per request"
    if not all(isinstance(t, (int, float)) for t in ttft) or not all(
        t is None or isinstance(t, (int, float)) for t in tpot
    ):
        return "ttft_s or tpot_s holds something other than numbers"
    return None


def baseline_probe_problem(row) -> str | None:
    """A line of baseline_probes.jsonl: {"example_id", "stored_s", "fresh_s", "ratio": positive or null,
    "same_tokens"}."""
    if object_problem(row):
        return object_problem(row)
    return None if row.get("ratio") is None or _positive(row["ratio"]) else "ratio is not a positive number or null"


def manifest_problem(doc: dict) -> str | None:
    """Why a manifest cannot be compared with a run's, or None (the fields a resume and an export read)."""
    for key, kind in (("config", dict), ("task", dict)):
        if not isinstance(doc.get(key), kind):
            return f"its {key} is missing or not an object"
    return None


def summary_problem(doc: dict) -> str | None:
    """Why a summary.json cannot be read as a Summary, or None. Keys Summary does not know are kept (a newer
    or older writer's); the ones it declares must have their declared type."""
    declared = {f.name: f.type for f in fields(Summary)}
    for key, value in doc.items():
        if key in declared and not conforms(value, str(declared[key])):
            return f"{key} is {type(value).__name__}, not {declared[key]}"
    if isinstance(doc.get("n_examples"), int) and doc["n_examples"] < 0:
        return "n_examples is negative"
    return summary_value_problem(doc, declared)


SIGNED_SUMMARY_FIELDS = ("seed", "overhead_s", "numerics_margin_range")  # may be below 0; every other number may not


def summary_value_problem(doc: dict, declared: dict) -> str | None:
    """Values no run writes: a NaN or infinite number (the writer stores null), a negative one where the field
    cannot be (times, rates, counts, speedups), γ below 1. One check for every reader (report, export)."""
    for key, value in doc.items():
        if key not in declared:
            continue
        for x in value if isinstance(value, list) else [value]:
            if not isinstance(x, (int, float)) or isinstance(x, bool):
                continue
            if x != x or x in (float("inf"), float("-inf")):
                return f"{key} is {x}, not a finite number (a hand edit?)"
            if x < 0 and key not in SIGNED_SUMMARY_FIELDS:
                return f"{key} is {x}, which cannot be negative"
    if isinstance(doc.get("gamma"), int) and not isinstance(doc["gamma"], bool) and doc["gamma"] < 1:
        return f"gamma is {doc['gamma']}, below 1"
    if isinstance(doc.get("gamma"), str) and doc["gamma"] not in GAMMA_POLICIES:
        return f"gamma is {doc['gamma']!r}, neither a number nor a γ policy ({', '.join(GAMMA_POLICIES)})"
    return None


def placement_problem(row) -> str | None:
    """A line of placement.jsonl: an object with a string cell_id, node and device."""
    problem = object_problem(row)
    if problem:
        return problem
    bad = [k for k in ("cell_id", "node", "device") if not isinstance(row.get(k), str)]
    return f"{bad[0]} is missing or not a string" if bad else None
