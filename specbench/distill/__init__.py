"""Distil a small draft model for a target: `specbench distill --target T --out DIR`.

Speculative decoding needs a draft far cheaper than the target that still predicts its next tokens,
and for model drafts it must share the target's tokenizer. No small model shares SmolLM2's tokenizer
(shared/ASSETS.md), so a useful model draft has to be trained; this package trains it from the
target's own predictions, and the result ships as `--draft distilled` (specbench/models/distilled/).

Three stages, each resumable, one module each:

1. **Teacher data** (`teacher`, with `plan` choosing the rows and `shards` the file format). The
   target reads the offline tasks' prompts the way the runner feeds them, continues them (greedily:
   exactly what speculative decoding drafts at T = 0; and, in the small preset, with T = 1 samples)
   and reads the human references; every position keeps its top-k law as a soft label.
2. **Training** (`training`). A LlamaForCausalLM with a narrow tied embedding (the output layer is
   the cost that matters on a CPU), trained on KL(teacher top-k ‖ draft); held-out top-1 agreement on
   on-policy positions is the greedy-α proxy. A resumed run retraces the uninterrupted one exactly.
3. **Export and checks** (`save_draft`). The draft is saved with the target's tokenizer, reloaded
   through `specbench.models.load_model`, timed against the target (c), run in `decode_speculative`
   on held-out prompts (α at T = 0), and described in manifest.json with the command that rebuilds it.

`pipeline.distill` runs them in order; `settings` holds the presets and one invocation's settings.
Training excludes every example that `specbench run` picks with `--seed 0..3 --limit <= 128`
(and the whole aclsum test split), so measurements on those are on unseen prompts.
"""

from specbench.distill.pipeline import distill
from specbench.distill.settings import DistillConfig, get_preset

__all__ = ["DistillConfig", "distill", "get_preset"]
