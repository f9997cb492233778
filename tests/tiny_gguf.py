"""A tiny random Llama written as a GGUF by the `gguf` package: what the llama.cpp tests load, so that
`make test` needs no model download. Vocabulary: SentencePiece-style, <unk> <s> </s> and the 256 byte
tokens (llama.cpp requires the byte tokens of an SPM vocabulary); weights F32 or quantized to Q8_0."""

from __future__ import annotations

from pathlib import Path

import numpy as np

SPECIALS = ["<unk>", "<s>", "</s>"]
VOCAB = len(SPECIALS) + 256
EOS_ID = 2


def tensors(seed: int, d: int, ffn: int, layers: int, heads: int, kv_heads: int) -> dict[str, np.ndarray]:
    """Llama weights named as llama.cpp names them, shape [out, in] (gguf writes them reversed)."""
    rng = np.random.default_rng(seed)
    head_dim = d // heads

    def w(out: int, inp: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal((out, inp)) * scale / np.sqrt(inp)).astype(np.float32)

    out = {
        "token_embd.weight": rng.standard_normal((VOCAB, d)).astype(np.float32),
        "output_norm.weight": np.ones(d, dtype=np.float32),
        "output.weight": w(VOCAB, d, 4.0),  # sharp logits: few near ties between top tokens
    }
    for i in range(layers):
        out |= {
            f"blk.{i}.attn_norm.weight": np.ones(d, dtype=np.float32),
            f"blk.{i}.attn_q.weight": w(d, d),
            f"blk.{i}.attn_k.weight": w(kv_heads * head_dim, d),
            f"blk.{i}.attn_v.weight": w(kv_heads * head_dim, d),
            f"blk.{i}.attn_output.weight": w(d, d),
            f"blk.{i}.ffn_norm.weight": np.ones(d, dtype=np.float32),
            f"blk.{i}.ffn_gate.weight": w(ffn, d),
            f"blk.{i}.ffn_up.weight": w(ffn, d),
            f"blk.{i}.ffn_down.weight": w(d, ffn),
        }
    return out


def write_tiny_gguf(
    path: Path,
    *,
    seed: int = 0,
    quant: str = "F32",
    d: int = 64,
    ffn: int = 128,
    layers: int = 2,
    heads: int = 4,
    kv_heads: int = 2,
    context: int = 1024,
) -> Path:
    """Write the model to `path` (quant "F32" or "Q8_0": matrices quantized, norms kept F32) → path."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("specbench-tiny")
    writer.add_context_length(context)
    writer.add_embedding_length(d)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(ffn)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(d // heads)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32 if quant == "F32" else gguf.LlamaFileType.MOSTLY_Q8_0)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(SPECIALS + [f"<0x{b:02X}>" for b in range(256)])
    writer.add_token_scores([0.0] * VOCAB)
    writer.add_token_types(
        [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
    )
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(EOS_ID)
    writer.add_unk_token_id(0)
    for name, data in tensors(seed, d, ffn, layers, heads, kv_heads).items():
        if quant == "Q8_0" and data.ndim == 2:
            q = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0)
            writer.add_tensor(name, q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
        else:
            writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
