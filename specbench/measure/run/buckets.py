"""Prompt-length buckets: which examples a `--prompt-length short|medium|long` run measures.

A claim like "gains are consistent across prompt lengths" needs runs that differ in prompt length
and nothing else: same task, same target, same everything. So a bucket is cut from one task's own
examples by their prompt token counts under the target's tokenizer (chat template applied, as the
target sees them). The cut points are the tertiles (33rd and 67th percentile, numpy's linear
interpolation) of the candidate pool: the task's first PROMPT_POOL examples in its seeded order,
the pool every run of that task and seed draws from. A bucket run then takes the first --limit
examples of its bucket in that same order, so a smaller limit's sample is a prefix of a larger one's.

  short   tokens <= t33
  medium  t33 < tokens <= t67
  long    tokens > t67

A bucket holding fewer examples than --limit is run with what it has (the caller prints one line);
an empty bucket (many prompts of one length) is refused in one line. Everything here is pure: the
token counts come in, the selection and what the manifest and summary record go out.
"""

from __future__ import annotations

from dataclasses import dataclass

from specbench.errors import SpecbenchError

PROMPT_POOL = 1000  # candidate examples whose prompt lengths set the thresholds (tokenizing more buys little)
BUCKETS = ("short", "medium", "long")


@dataclass(frozen=True)
class BucketChoice:
    """One bucket's examples and what a run records about them."""

    bucket: str  # short, medium or long
    indices: list[int]  # positions in the candidate pool, in the seeded order, at most --limit
    thresholds: tuple[float, float]  # (t33, t67): the pool's tertiles of prompt tokens
    token_range: tuple[int, int]  # (fewest, most) prompt tokens among the bucket's candidates
    available: int  # candidates in the bucket (may be fewer than --limit)
    pool: int  # candidates the thresholds were computed from

    def to_dict(self) -> dict:
        return {
            "bucket": self.bucket,
            "thresholds": list(self.thresholds),
            "token_range": list(self.token_range),
            "available": self.available,
            "pool": self.pool,
        }


def bucket_thresholds(lengths: list[int]) -> tuple[float, float]:
    """(33rd, 67th) percentile of the prompt token counts (linear interpolation, as numpy.percentile)."""
    import numpy as np

    if not lengths:
        raise SpecbenchError("--prompt-length needs a task with examples; this one has none")
    low, high = np.percentile(np.asarray(lengths, dtype=float), [33, 67])
    return float(low), float(high)


def bucket_of(n_tokens: int, thresholds: tuple[float, float]) -> str:
    """short, medium or long for a prompt of n_tokens."""
    low, high = thresholds
    return "short" if n_tokens <= low else "medium" if n_tokens <= high else "long"


def choose_bucket(lengths: list[int], bucket: str, limit: int) -> BucketChoice:
    """The first `limit` candidates (pool order) whose prompt length falls in `bucket`.

    lengths: prompt tokens of each candidate, in the task's seeded order."""
    if bucket not in BUCKETS:
        raise SpecbenchError(f"--prompt-length {bucket!r} is not a bucket; use one of {', '.join(BUCKETS)} or all")
    thresholds = bucket_thresholds(lengths)
    members = [i for i, n in enumerate(lengths) if bucket_of(n, thresholds) == bucket]
    if not members:
        raise SpecbenchError(
            f"--prompt-length {bucket}: no prompt of this task falls in that bucket (thresholds "
            f"{thresholds[0]:g}/{thresholds[1]:g} tokens over {len(lengths)} prompts); pick another "
            f"bucket or a task whose prompts differ in length"
        )
    in_bucket = [lengths[i] for i in members]
    return BucketChoice(
        bucket, members[:limit], thresholds, (min(in_bucket), max(in_bucket)), len(members), len(lengths)
    )


def short_bucket_note(choice: BucketChoice, limit: int) -> str | None:
    """The one line printed when a bucket holds fewer examples than --limit (None when it holds enough)."""
    if choice.available >= limit:
        return None
    return (
        f"--prompt-length {choice.bucket}: the bucket holds {choice.available} of the {choice.pool} candidate "
        f"prompts, fewer than --limit {limit}; running those {choice.available}"
    )
