"""What several test modules share (tiny saved models and CLI arguments, sweep fakes, run folders as the runner
writes them): test modules import this module, never each other, so each test module stays a set of tests."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from conftest import tiny_llama
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from specbench.config import LoadSpec
from specbench.decoding.backend import ForwardBackend
from specbench.decoding.drafts.factory import make_proposer
from specbench.decoding.drafts.model import ModelDraft
from specbench.engines.session import Session
from specbench.engines.torch.session import TorchSession
from specbench.measure.results.reader import RunRead
from specbench.measure.run.sweep import SweepGrid
from specbench.measure.stats.metric_units import json_safe
from specbench.measure.stats.metrics import summarize
from specbench.models import wrap_model
from specbench.run_specs import parse_draft

# --- tiny saved models and `specbench run` arguments (the CLI tests) ---

CORPUS = [
    "the cat sat on the mat and the dog sat on the log",
    "speculative decoding drafts tokens and the target verifies them",
    "a small draft model proposes and a large target model checks",
] * 5


def save_tiny(
    path,
    seed: int,
    vocab: int | None = None,
    max_positions: int = 256,
    hidden: int = 32,
    heads: int = 4,
    kv_heads: int = 2,
):
    """A tiny random Llama with a word-level tokenizer trained on CORPUS, saved as a transformers folder; `hidden` and
    the head counts set its head size (vLLM's CPU attention wants 64: hidden 128, 2 heads)."""
    tok = Tokenizer(models.WordLevel(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(CORPUS, trainers.WordLevelTrainer(special_tokens=["<unk>", "<s>", "</s>"]))
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=vocab or len(fast),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=max_positions,
        bos_token_id=1,
        eos_token_id=2,
    )
    LlamaForCausalLM(cfg).save_pretrained(path)
    fast.save_pretrained(path)
    return str(path)


def run_args(models_dir, task_file, tmp_path, *extra):
    return (
        "run",
        "--target",
        models_dir["target"],
        "--draft",
        models_dir["draft"],
        "--task",
        task_file,
        "--limit",
        "3",
        "--max-new-tokens",
        "12",
        "--device",
        "cpu",
        "--results-dir",
        str(tmp_path / "res"),
        *extra,
    )


# --- sweeps over tiny random Llamas (test_sweep, test_sweep_axes, test_batch_runner) ---

MAX_NEW = 5  # differs from engines.WARMUP_TOKENS (8), so warm-up calls are told apart from measured ones
PROMPTS = [
    "The quick brown fox jumps over the lazy dog.",
    "Speculative decoding drafts and verifies.",
    "One two three four five six seven.",
    "A fourth prompt that no cell should see.",
]


class StubTokenizer:
    """Enough of a tokenizer for the runner: characters → ids in the tiny vocabulary, ids → text."""

    chat_template = None
    eos_token_id = 2

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [3 + ord(ch) % 500 for ch in text]}

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(f"t{i}" for i in ids)


class FakeSession(TorchSession):
    """A TorchSession over tiny random Llamas: a target, a model draft and prompt lookup."""

    instances = 0

    def __init__(self, *args, **kwargs):
        FakeSession.instances += 1
        self.target = wrap_model("tiny-target", tiny_llama(0), StubTokenizer())
        self.load, self.target_backend = LoadSpec("tiny-target", device="cpu"), ForwardBackend(self.target.model)
        Session.__init__(self)  # the base's draft cache and memo (no model loads)
        self.drafts = {
            "tiny-draft": ModelDraft(tiny_llama(1), "tiny-draft"),
            "prompt-lookup": make_proposer(parse_draft("prompt-lookup"), self.target),
        }

    def proposer(self, spec, corpus=None):
        return self.drafts[str(spec)]  # a draft spec or its text


def auto_run_args(tmp_path: Path, examples: int, limit: int, max_new: int, gamma_max: int) -> list[str]:
    """`specbench run --gamma auto` on a tiny target/draft pair saved under tmp_path and a task of `examples` CORPUS
    prompts (each its own reference), results under tmp_path/r, --json: the arguments."""
    target, draft = save_tiny(tmp_path / "t", 0), save_tiny(tmp_path / "d", 1)
    task = tmp_path / "task.jsonl"
    prompts = [f"{CORPUS[i % len(CORPUS)]} {i}" for i in range(examples)]
    task.write_text("".join(json.dumps({"prompt": p, "reference": p}) + "\n" for p in prompts))
    args = ["run", "--target", target, "--draft", draft, "--task", str(task), "--limit", str(limit)]
    args += ["--max-new-tokens", str(max_new), "--device", "cpu", "--gamma", "auto", "--gamma-max", str(gamma_max)]
    return args + ["--results-dir", str(tmp_path / "r"), "--json"]


def write_prompts(tmp_path: Path) -> str:
    """A JSONL task of PROMPTS with ids ex0…; its path."""
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps({"id": f"ex{i}", "prompt": p}) + "\n" for i, p in enumerate(PROMPTS)))
    return str(path)


def make_grid(task: str, **over) -> SweepGrid:
    kw = dict(
        target="tiny-target",
        draft="tiny-draft,prompt-lookup",
        gamma="1,3",
        temperature="0",
        task=task,
        limit=3,
        seed=0,
        max_new_tokens=MAX_NEW,
        device="cpu",
    )
    kw.update(over)
    return SweepGrid.from_specs(**kw)


# --- run folders as execute_run writes them (the report and claims tests) ---

N_EXAMPLES = 3


def engine(
    n_tokens: int,
    decode_s: float,
    gamma: int = 0,
    accept_lengths: tuple = (),
    text: str = "out",
    draft_share: float = 0.0,
) -> dict:
    """An EngineRecord dict; a speculative one derives drafted/accepted/trials from its accepted lengths."""
    accepted = sum(accept_lengths)
    trials = sum(min(a + 1, gamma) for a in accept_lengths)
    calls = len(accept_lengths) if gamma else n_tokens - 1
    return {
        "text": text,
        "token_ids": list(range(n_tokens)),
        "n_tokens": n_tokens,
        "stop_reason": "length",
        "prefill_s": 0.01,
        "decode_s": decode_s,
        "target_calls": calls,
        "draft_calls": gamma * len(accept_lengths),
        "drafted": gamma * len(accept_lengths),
        "accepted": accepted,
        "trials": trials,
        "accept_lengths": list(accept_lengths),
        "draft_lengths": [gamma] * len(accept_lengths),
        "expected_accept": [0.6] * trials,
        "draft_s": decode_s * draft_share,
        "verify_s": decode_s * (0.9 - draft_share) if gamma else 0.0,
    }


def make_run(
    root: Path,
    run_id: str,
    *,
    draft="small",
    task="ende",
    gamma=2,
    temperature=0.0,
    speedup=1.5,
    text="hello",
    reference="hallo",
    quality=None,
    target="tiny",
    policy=None,
    manifest_extra=None,
) -> Path:
    """A run folder as execute_run writes it: manifest.json, examples.jsonl, summary.json (via metrics.summarize).
    policy: a γ policy (adaptive, heuristic) drafting up to `gamma` (= gamma_max); manifest_extra: manifest keys
    to add or replace (hardware, calibration, auto)."""
    run = root / run_id
    run.mkdir(parents=True)
    lengths = tuple(min(gamma, k % (gamma + 2)) for k in range(8))
    records = []
    for i in range(N_EXAMPLES):
        base = engine(20, 1.0, text=text)
        spec = engine(20, 1.01 / speedup - 0.01, gamma, lengths, text=text, draft_share=0.3)
        records.append(
            {
                "schema_version": 1,
                "example_id": f"ex{i}",
                "prompt_tokens": 7,
                "reference": reference,
                "baseline": base,
                "speculative": spec,
                "identical": True,
                "first_divergence": None,
            }
        )
    config = {
        "target": target,
        "draft": draft,
        "task": task,
        "gamma": policy or gamma,
        "sampling": {"temperature": temperature, "top_k": 0, "top_p": 1.0},
        "limit": N_EXAMPLES,
        "seed": 0,
    }
    if policy:
        config["gamma_max"] = gamma
    (run / "manifest.json").write_text(
        json.dumps(
            {
                "schema_version": 1,
                "run_id": run_id,
                "config": config,
                "max_new_tokens": 20,
                "task": {"name": task, "n_examples": N_EXAMPLES},
                "models": {"target": {"spec": target, "params": 1000, "dtype": "torch.float32", "device": "cpu"}},
                "hardware": {"cpu_count": 2},
                "versions": {"torch": "x"},
                "git_commit": "abc",
                **(manifest_extra or {}),
            }
        )
    )
    (run / "examples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    summary = {
        "schema_version": 1,
        "run_id": run_id,
        "target": target,
        "draft": draft,
        "engine": "specbench",
        "task": task,
        "gamma": policy or gamma,
        "temperature": temperature,
        "top_k": 0,
        "top_p": 1.0,
        "seed": 0,
        "max_new_tokens": 20,
        "complete": True,
        **summarize(records, gamma, temperature == 0.0),
        "quality": quality,
    }
    (run / "summary.json").write_text(json.dumps(json_safe(summary)))
    return run


SPREAD = (0.8, 0.9, 1.0, 1.1, 1.2)  # per-example factors on the speculative decode time: a real bootstrap interval


def varied_run(
    root: Path, run_id: str, *, speedup: float, spread=SPREAD, summary_extra=None, nll=None, flag=False, **kw
) -> Path:
    """make_run, with per-example spread in the speculative time (so the speedup has a non-degenerate interval),
    summary fields added or replaced (axis values), optional per-example `nll` scores, and (flag) repeats that
    disagree 3× so the noise check flags the run."""
    run = make_run(root, run_id, speedup=speedup, **kw)
    path = run / "examples.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows = [dict(rows[0], example_id=f"ex{i}") for i in range(len(spread))]
    for i, (row, f) in enumerate(zip(rows, spread)):
        row["speculative"] = dict(
            row["speculative"],
            decode_s=row["speculative"]["decode_s"] * f,
            verify_s=row["speculative"]["verify_s"] * f,
            draft_s=row["speculative"]["draft_s"] * f,
        )
        if nll is not None:
            row["nll"] = {"baseline": nll[0][i], "speculative": nll[1][i]}
        if flag:
            row["speculative"]["repeat_s"] = [1.0, 3.0]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["task"]["n_examples"] = len(spread)  # the records' count, as a run's manifest plans it
    (run / "manifest.json").write_text(json.dumps(manifest))
    summary = json.loads((run / "summary.json").read_text())
    summary.update(json_safe(summarize(rows, kw.get("gamma", 2), kw.get("temperature", 0.0) == 0.0)))  # its records'
    summary.update(summary_extra or {}, n_examples=len(spread))
    (run / "summary.json").write_text(json.dumps(summary))
    return run


# --- a bf16-sensitive pair (test_numerics, test_bit_exact) ---


def wide_llama(seed: int, hidden: int = 128) -> LlamaForCausalLM:
    """Wide enough (128) that bf16 matmuls of 1 and γ+1 rows round differently: the 32-wide test models
    never diverge in bf16, so they could not exercise the classifier."""
    return tiny_llama(seed, hidden=hidden, intermediate=4 * hidden)


def noisy_pair(dtype: torch.dtype, noise: float = 0.1):
    """A target and a draft that is the target plus weight noise: agreements and near-ties both happen."""
    target = wide_llama(0).to(dtype)
    draft = wide_llama(0)
    torch.manual_seed(7)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(noise * torch.randn_like(p) * p.abs().mean())
    return target, draft.to(dtype)


def greedy_tail(model, ids: list[int], k: int) -> list[int]:
    """The k tokens plain greedy decoding (full forwards, no cache) appends to ids: what a tree draft's planted
    prompts are built to make the target continue with."""
    out = list(ids)
    with torch.inference_mode():
        for _ in range(k):
            out.append(int(model(input_ids=torch.tensor([out])).logits[0, -1].argmax()))
    return out[len(ids) :]


def recorded_tree_steps(monkeypatch, speculative_module) -> list:
    """Patch the loop's greedy tree verifier to record every tree step's (tree, accepted path); → that list."""
    steps: list = []
    real = speculative_module.verify_tree_greedy

    def recording(tree, tokens, best):
        verdict = real(tree, tokens, best)
        steps.append((tree, verdict.path))
        return verdict

    monkeypatch.setattr(speculative_module, "verify_tree_greedy", recording)
    return steps


def off_first_branch(steps) -> int:
    """Tree steps whose accepted path took a child other than its parent's first: only a tree offers that node."""
    return sum(any(tree.children(tree.parents[n])[0] != n for n in path) for tree, path in steps)


# --------------------------------------------------------------------------- method-table records


def method_record(example_id: str, ratio: float, tokens: int = 30, calls: int = 9) -> dict:
    """An example whose speculative throughput is `ratio` × its baseline's (same tokens, 1/ratio the seconds) and
    whose #MAT is tokens ÷ (calls + 1)."""
    engine = {"n_tokens": tokens, "prefill_s": 0.1, "decode_s": 0.9, "target_calls": tokens - 1}
    spec = {**engine, "prefill_s": 0.1 / ratio, "decode_s": 0.9 / ratio, "target_calls": calls}
    return {"example_id": example_id, "baseline": engine, "speculative": spec}


def method_run(draft: str, records: list[dict], task: str = "spec-bench", dtype: str = "bfloat16") -> RunRead:
    manifest = {
        "config": {"draft": draft, "gamma": 4, "dtype": dtype, "target": "t", "sampling": {"temperature": 0.0}},
        "task": {"name": task},
    }
    return RunRead(Path(f"{task}-{draft}"), None, manifest, records)
