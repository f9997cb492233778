"""What each field of manifest.json and examples.jsonl means: one FieldDoc per field, in its dataclass's order.

The fields are declared in measure/schema.py (Manifest, ExampleRecord, EngineRecord), each with a short comment;
these tables say the same in full sentences for docs/results.md (measure/schema_doc.py sets them into it).
tests/test_schema_doc.py keeps each table equal to its dataclass's fields. summary.json's table, with units and the
`run` table's labels, is measure/summary_field_docs.py.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FieldDoc:
    """One field of a results file."""

    name: str  # the JSON key (the dataclass field)
    unit: str  # what its number counts: s, tokens/s, MiB, × (a ratio of throughputs), share, ... ("" for none)
    meaning: str  # one sentence (markdown): what it is and where it comes from
    label: str = ""  # the `run` table's short meaning; "" for a field the table does not show


EXAMPLE_FIELDS: tuple[FieldDoc, ...] = (
    FieldDoc("schema_version", "", "SCHEMA_VERSION when the record was written"),
    FieldDoc("example_id", "", "the task's id of the example"),
    FieldDoc("prompt_tokens", "", "prompt length in target tokens"),
    FieldDoc("reference", "", "the task's reference output, if any"),
    FieldDoc(
        "baseline",
        "",
        "the target alone, timed in this run or cell (in sweeps from before per-cell baselines: the shared one)",
    ),
    FieldDoc("speculative", "", "the draft proposing, the target verifying"),
    FieldDoc("identical", "", "speculative token ids equal the baseline's (expected at T = 0 only)"),
    FieldDoc("first_divergence", "", "index of the first differing token, None when identical"),
    FieldDoc(
        "numerics",
        "",
        ("T = 0 only (measure/numerics.py): floor_positions, floor_flips, seconds, divergence (its class, or null)"),
    ),
    FieldDoc("batch_size", "", "batches only (`--batch-size` B > 1; absent from batch-1 lines): the run's B"),
    FieldDoc("batch_index", "", "which batch of the run (0, 1, …): examples grouped by B in the task's seeded order"),
    FieldDoc("row", "", "the example's row in its batch (0 .. batch_rows − 1)"),
    FieldDoc("batch_rows", "", "rows in this batch: B, or fewer in the last batch when B does not divide the examples"),
    FieldDoc(
        "nll",
        "",
        (
            "T > 0 only (evidence/perplexity.py): `baseline` and `speculative`, each output's mean negative "
            "log-likelihood per token under the target's raw law (temperature 1, no filters; null for an "
            "empty output); the report's paired equivalence test of quality reads them (TOST, "
            "evidence/perplexity.nll_equivalence)"
        ),
    ),
    FieldDoc(
        "turns",
        "",
        (
            "multi-turn questions only (Spec-Bench's MT-bench; measure/turns.py), else null: one entry per "
            "turn with that turn's `baseline` and `speculative` EngineRecords (its own timing, α counts and "
            "accepted lengths; `baseline` null for an older sweep's shared baseline) and `baseline_prompt_tokens` / "
            "`speculative_prompt_tokens` (the conversation so far, each engine's own answers in it). The "
            "record's `baseline` and `speculative` then sum the turns: counts and seconds added, token lists "
            "concatenated"
        ),
    ),
)


ENGINE_FIELDS: tuple[FieldDoc, ...] = (
    FieldDoc("text", "", "decoded output (special tokens skipped)"),
    FieldDoc("token_ids", "", "generated token ids, EOS included if emitted"),
    FieldDoc("n_tokens", "", "len(token_ids)"),
    FieldDoc("stop_reason", "", '"eos" or "length"'),
    FieldDoc("prefill_s", "", "time to first token (prompt prefill of all models + first token)"),
    FieldDoc("decode_s", "", "time from the first token to the last"),
    FieldDoc("target_calls", "", "target forward passes after prefill"),
    FieldDoc("draft_calls", "", "draft forward passes after prefill (0 for model-free drafts and the baseline)"),
    FieldDoc("drafted", "", "draft tokens proposed and verified"),
    FieldDoc("accepted", "", "of those, accepted"),
    FieldDoc("trials", "", "acceptance trials: Σ over steps of min(accepted + 1, γ')"),
    FieldDoc("accept_lengths", "", "accepted count of every verification step"),
    FieldDoc("draft_lengths", "", "drafted count γ' of every verification step (same order as accept_lengths)"),
    FieldDoc(
        "expected_accept", "", "Σ_x min(p(x), q(x)) at every verified position (up to each step's first rejection)"
    ),
    FieldDoc("draft_s", "", "decode time spent proposing"),
    FieldDoc("verify_s", "", "decode time spent in target passes and verification"),
    FieldDoc("proposal_lengths", "", "tokens offered at each pass the budget did not shorten (0 = none)"),
    FieldDoc("pass_lengths", "", "tokens fed to each target pass after prefill (speculative: 1 or g+1), in order"),
    FieldDoc(
        "repeat_s",
        "",
        ("prefill + decode seconds of each timed repeat (--repeats); the times above are their medians"),
    ),
    FieldDoc(
        "batch_s",
        "",
        (
            "batches only (absent from batch-1 records): wall seconds of this engine's whole batch, its "
            "prefill to its last row's stop; shared by the batch's rows (the throughput metrics count it once"
            " per batch)"
        ),
    ),
    FieldDoc(
        "batch_pass_rows", "", "batches only: live rows in each batched target pass after prefill (the batch's, shared)"
    ),
    FieldDoc("batch_pass_widths", "", "batches only: tokens per row fed to each such pass (the batch's, shared)"),
    FieldDoc(
        "kept_lengths",
        "",
        ("batches only: tokens each verify step kept for this row: accepted + 1, or fewer under `--batch-policy min`"),
    ),
)


MANIFEST_FIELDS: tuple[FieldDoc, ...] = (
    FieldDoc("schema_version", "", "SCHEMA_VERSION when the run started"),
    FieldDoc("run_id", "", "the folder's name"),
    FieldDoc(
        "config",
        "",
        (
            "the RunConfig (`specbench/config.py`): `target`, `draft`, `task`, `gamma` (an integer, or a γ "
            "policy: auto, adaptive, heuristic), `sampling` (`temperature`, `top_k`, `top_p`), `limit`, "
            "`seed`, `max_new_tokens` (null: the task's), `device`, `dtype`, `engine` (specbench or "
            "hf-assisted), `trust_remote_code`, `backend` (eager, static, compiled); options added later "
            "(`draft_confidence`, `gamma_max`, `repeats`, `exact_shapes`, `batch_size`, `batch_policy`, "
            "`prompt_length`) appear only when not at their default, so older manifests still match on resume"
        ),
    ),
    FieldDoc("max_new_tokens", "", "the budget actually used (the config's, or the task's default)"),
    FieldDoc(
        "task",
        "",
        (
            "`name`, `metric` (bleu, rouge or null), `n_examples`, `examples_hash` (SHA-256 of the selected "
            "examples: a resume refuses other data), `example_ids` (in selection order)"
        ),
    ),
    FieldDoc(
        "prompt_length",
        "",
        (
            "only with `--prompt-length short|medium|long` (measure/buckets.py): `bucket`, `thresholds` "
            "([t33, t67], the 33rd/67th percentile of the target-tokenized prompt lengths of the task's first"
            " 1000 examples in its seeded order, the pool), `token_range` ([fewest, most] prompt tokens in "
            "the bucket), `available` (the bucket's candidates; fewer than `--limit` runs those), `pool`"
        ),
    ),
    FieldDoc("models", "", "`target`: `spec`, `params`, `dtype`, `vocab_size`, `device`; `draft`: `spec`"),
    FieldDoc(
        "engine",
        "",
        "only with `--engine llama-cpp`: `engine` (its name), `engine_version`, `threads` and the GGUF as loaded",
    ),
    FieldDoc(
        "calibration",
        "",
        (
            "the target's pass-cost curve measured before the run (measure/calibration.py): `dtype`, "
            "`device`, `context_tokens`, `target_ms` and `target_spread` (per pass length 1..γ+1: median ms "
            "and relative spread), `repeats`, `draft`, `draft_ms` (ms per draft token, model drafts), "
            "`seconds` (calibration time), `extra`, `pass_cost` (target_ms relative to a one-token pass)"
        ),
    ),
    FieldDoc(
        "auto",
        "",
        (
            "only when something was `auto`: the resolved choice and its evidence (`requested`, `dtype`, "
            "`draft`, `gamma`, `policy_gamma`, `reasons`, `calibrations`, `draft_ms`, `pilots`, "
            "`candidates`); a resumed run keeps it"
        ),
    ),
    FieldDoc(
        "batch_calibration",
        "",
        (
            "only at `--batch-size` B > 1 (measure/calibration.calibrate_batch_grid at b = 1, 2, 4, … B, "
            "timed interleaved, then batch_calibration_dict): `batch_size`, `context_tokens` (the median over"
            " the run's batches of the longest prompt, plus half the budget: rows are padded to their batch's"
            " longest), `repeats`, `target_ms` / `target_spread` (per k = 1..γ+1: median ms and spread of one"
            " batched pass of k tokens per row, t(B, k)), `verify_cost` (γ → t(B, γ+1)/t(B, 1)), `draft_ms` "
            "and `draft_cost` (a model draft's batched token, and ÷ t(B, 1); null for model-free drafts), "
            "`rows` (b → k → ms: t(b, k) at every calibrated row count b, the table the batch cost model "
            "prices passes with; absent before it existed), `draft_rows_ms` (b → ms of a batched draft token;"
            " null for model-free drafts), `seconds`; a resumed run keeps it"
        ),
    ),
    FieldDoc("versions", "", "`python`, `torch`, `transformers`, `specbench`"),
    FieldDoc("git_commit", "", "the checkout's commit; null for an installed wheel"),
    FieldDoc(
        "hardware",
        "",
        (
            "measure/hardware.py: `cpu_model`, `isa_flags`, `cpu_count`, `usable_cpus`, `torch_threads`, "
            "`memory_gib`, `gpus`, `cuda`, `gpu_driver`, `platform`, `machine`"
        ),
    ),
    FieldDoc(
        "created",
        "",
        ("local time the run started (ISO 8601); a resume keeps it and the environment fields above"),
    ),
)
