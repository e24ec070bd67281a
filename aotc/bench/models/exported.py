"""Models as exporters write them: `transformers` configs with random weights, exported to ONNX.

The builders beside this module write the graph an engineer would write by hand;
users bring what `torch.onnx.export` writes for a `transformers` model, with its
layout clutter (2-D views around Gemm, Transpose pairs, Casts, Expanded and
Where-based masks, int64 shape arithmetic). This module makes those graphs from
configs, with no downloads, in three forms:

- "torchscript": torch.onnx.export(..., dynamo=False), the TorchScript exporter;
- "dynamo": torch.onnx.export(..., dynamo=True), the onnxscript exporter;
- "ortopt": the TorchScript export passed through onnxruntime's transformer
  optimizer (fused LayerNormalization in standard ops, graph cleanups; the fusions
  that emit com.microsoft contrib ops aotc does not import are switched off in
  its options, see _ORT_OPTIONS; for LLaMA and T5 that includes the RMSNorm
  fusion, whose SimplifiedLayerNormalization is no ONNX op).

Architectures (ARCHS): GPT-2 (LM head), BERT (encoder, padding mask), ViT
(classifier), LLaMA (RMSNorm, RoPE, grouped-query attention, SwiGLU, LM head)
and T5 (encoder, relative position bias, padding mask); Qwen3 (per-head q/k
RMSNorm), BLOOM (ALiBi bias), CodeGen (partial interleaved RoPE, parallel
attention and MLP) and Gemma2 (post-norms, logit softcaps, sliding window). Each
at a "small" size (2 layers, narrow: for tests) and a "real" size (GPT-2 small,
BERT-base, ViT-B/16, a 135M LLaMA-architecture model, T5-small's encoder; the
other four at their smallest released layer shape, 4 layers and an 8192-token
vocabulary: for the fusion report). Exports take seconds to minutes, so the ONNX bytes are cached under the
aotc cache dir, keyed by architecture, size, form, seed and the torch,
transformers, onnxscript and onnxruntime versions.

    model, feeds = exported("gpt2", "torchscript", size="small")
    model, feeds = exported("llama", "dynamo", dynamic=True)   # symbolic batch and sequence dims

torch, transformers and onnxscript are imported only when a model is exported.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
from pathlib import Path

import numpy as np
import onnx

FORMS = ("torchscript", "dynamo", "ortopt")
OPSET = 18
REVISION = 3          # bump when the export code changes what it writes: old cache entries go stale

# architecture -> size -> (config kwargs, shape kwargs)
ARCHS = {
    "gpt2": {
        "small": (dict(n_layer=2, n_embd=64, n_head=4, vocab_size=96, n_positions=64, bos_token_id=0,
                       eos_token_id=0), dict(batch=1, seq=16)),
        "real": (dict(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024),
                 dict(batch=1, seq=128)),
    },
    "bert": {
        "small": (dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                       vocab_size=96, max_position_embeddings=64), dict(batch=2, seq=16)),
        "real": (dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12, intermediate_size=3072,
                      vocab_size=30522, max_position_embeddings=512), dict(batch=1, seq=128)),
    },
    "vit": {
        "small": (dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                       image_size=32, patch_size=8, num_labels=10), dict(batch=1)),
        "real": (dict(num_hidden_layers=12, hidden_size=768, num_attention_heads=12, intermediate_size=3072,
                      image_size=224, patch_size=16, num_labels=1000), dict(batch=1)),
    },
    "llama": {
        "small": (dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                       intermediate_size=96, vocab_size=96, max_position_embeddings=64), dict(batch=1, seq=16)),
        # the LLaMA architecture at SmolLM-135M's shape (GQA 9/3 heads, head size 64)
        "real": (dict(num_hidden_layers=30, hidden_size=576, num_attention_heads=9, num_key_value_heads=3,
                      intermediate_size=1536, vocab_size=49152, max_position_embeddings=2048,
                      tie_word_embeddings=True), dict(batch=1, seq=128)),
    },
    "t5": {
        "small": (dict(num_layers=2, d_model=64, d_kv=16, num_heads=4, d_ff=128, vocab_size=96,
                       relative_attention_num_buckets=8, relative_attention_max_distance=16),
                  dict(batch=2, seq=16)),
        "real": (dict(num_layers=6, d_model=512, d_kv=64, num_heads=8, d_ff=2048, vocab_size=32128),
                 dict(batch=1, seq=128)),
    },
    # the four below were each a fusion blocker: Qwen3's per-head q/k RMSNorms, BLOOM's ALiBi bias,
    # CodeGen's interleaved partial RoPE, Gemma2's sandwich norms and logit softcaps
    "qwen3": {
        "small": (dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=16, intermediate_size=96, vocab_size=96, max_position_embeddings=64),
                  dict(batch=1, seq=16)),
        # Qwen3-0.6B's layer shape (16/8 heads of 128), 4 layers and a short vocabulary
        "real": (dict(num_hidden_layers=4, hidden_size=1024, num_attention_heads=16, num_key_value_heads=8,
                      head_dim=128, intermediate_size=3072, vocab_size=8192, max_position_embeddings=2048,
                      tie_word_embeddings=True), dict(batch=1, seq=128)),
    },
    "bloom": {
        "small": (dict(n_layer=2, hidden_size=64, n_head=4, vocab_size=96), dict(batch=2, seq=16)),
        # bloom-560m's layer shape, 4 layers and a short vocabulary
        "real": (dict(n_layer=4, hidden_size=1024, n_head=16, vocab_size=8192), dict(batch=1, seq=128)),
    },
    "codegen": {
        "small": (dict(n_layer=2, n_embd=64, n_head=4, rotary_dim=8, vocab_size=96, n_positions=64, n_ctx=64,
                       bos_token_id=0, eos_token_id=0), dict(batch=1, seq=16)),
        # codegen-350M's layer shape, 4 layers and a short vocabulary
        "real": (dict(n_layer=4, n_embd=1024, n_head=16, rotary_dim=32, vocab_size=8192, n_positions=2048,
                      n_ctx=2048, bos_token_id=0, eos_token_id=0), dict(batch=1, seq=128)),
    },
    # Phi: partial RoPE, attention and MLP in parallel off one LayerNorm: fc1 shares Q/K/V's input, but
    # merge-dots keeps it apart, its gelu its own GEMM's epilogue
    "phi": {
        "small": (dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                       vocab_size=96, max_position_embeddings=64), dict(batch=2, seq=16)),
        # phi-1.5's layer shape (32 heads of 64), 4 layers and a short vocabulary
        "real": (dict(num_hidden_layers=4, hidden_size=2048, num_attention_heads=32, intermediate_size=8192,
                      vocab_size=8192, max_position_embeddings=2048), dict(batch=1, seq=128)),
    },
    "gemma2": {
        "small": (dict(num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=16, intermediate_size=96, vocab_size=96, max_position_embeddings=64,
                       query_pre_attn_scalar=16, sliding_window=8), dict(batch=1, seq=16)),
        # gemma-2-2b's layer shape (8/4 heads of 256), 4 layers and a short vocabulary
        "real": (dict(num_hidden_layers=4, hidden_size=2304, num_attention_heads=8, num_key_value_heads=4,
                      head_dim=256, intermediate_size=9216, vocab_size=8192, max_position_embeddings=8192,
                      query_pre_attn_scalar=256, sliding_window=4096), dict(batch=1, seq=128)),
    },
}

# onnxruntime's optimizer: keep to standard ONNX ops (LayerNormalization; its Gelu fusions all write
# com.microsoft Gelu/FastGelu, so they are off too);
# Attention, SkipLayerNormalization, EmbedLayerNormalization, BiasGelu, FastGelu,
# SimplifiedLayerNormalization and RotaryEmbedding are com.microsoft contrib ops
_ORT_OPTIONS = dict(enable_gelu=False, enable_attention=False, enable_skip_layer_norm=False,
                    enable_embed_layer_norm=False, enable_bias_skip_layer_norm=False, enable_bias_gelu=False,
                    enable_gelu_approximation=False,
                    enable_rotary_embeddings=False, enable_qordered_matmul=False, enable_shape_inference=True,
                    enable_gemm_fast_gelu=False, enable_group_norm=False, enable_skip_group_norm=False,
                    enable_bias_splitgelu=False, enable_packed_qkv=False, enable_packed_kv=False,
                    enable_bias_add=False)
# RMSNorm fuses into SimplifiedLayerNormalization, an onnxruntime op in the default domain that is
# no ONNX op (the checker rejects it): LLaMA and T5 have no LayerNorm, so their norm fusion is off
_ORT_NO_NORM_FUSION = ("llama", "t5", "qwen3", "gemma2")
_ORT_MODEL_TYPE = {"gpt2": "gpt2", "bert": "bert", "vit": "vit", "llama": "bert", "t5": "bert", "qwen3": "bert",
                   "bloom": "bert", "codegen": "bert", "gemma2": "bert", "phi": "bert"}
_DECODERS = ("gpt2", "llama", "qwen3", "bloom", "codegen", "gemma2", "phi")


def exported(arch: str, form: str, size: str = "small", seed: int = 0, dynamic: bool = False):
    """(onnx.ModelProto, {input name: array}) for `arch` exported in `form` at `size`.

    `dynamic` exports the batch and sequence dims as symbolic (dynamic_axes / dynamic_shapes), as
    most users do; aotc then compiles it with input_shapes set to the feeds' shapes."""
    if arch not in ARCHS or size not in ARCHS[arch] or form not in FORMS:
        raise ValueError(f"no exported model {arch}/{form}/{size}: archs {sorted(ARCHS)}, forms {FORMS}, "
                         f"sizes small/real")
    config, shape = ARCHS[arch][size]
    path = _cache_path(arch, form, size, seed, config, shape, dynamic)
    if not path.exists():
        data = _export(arch, form, config, shape, seed, dynamic)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(data)
        os.replace(tmp, path)
    model = onnx.load_from_string(path.read_bytes())
    return model, _feeds(arch, config, shape, seed)


def _versions() -> dict:
    from importlib.metadata import PackageNotFoundError, version
    out = {}
    for name in ("torch", "transformers", "onnxscript", "onnxruntime", "onnx"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def _cache_path(arch, form, size, seed, config, shape, dynamic=False) -> Path:
    parts = [arch, form, size, seed, config, shape, OPSET, REVISION, _versions()]
    if form == "ortopt":
        parts += [_ORT_OPTIONS, arch in _ORT_NO_NORM_FUSION]
    if dynamic:
        parts.append("dynamic")
    key = json.dumps(parts, sort_keys=True)
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    base = Path(os.environ.get("AOTC_CACHE_DIR") or Path.home() / ".cache" / "aotc")
    return base / "exported" / f"{arch}-{size}-{form}{'-dynamic' if dynamic else ''}-{digest}.onnx"


def _feeds(arch, config, shape, seed) -> dict:
    rng = np.random.default_rng(seed + 1)
    b = shape["batch"]
    if arch == "vit":
        n = config["image_size"]
        return {"pixel_values": rng.standard_normal((b, 3, n, n)).astype(np.float32)}
    s = shape["seq"]
    ids = rng.integers(0, config["vocab_size"], (b, s)).astype(np.int64)
    lengths = rng.integers(s // 2, s + 1, b)
    lengths[0] = s - s // 8                      # at least one padded sequence
    return {"input_ids": ids, "attention_mask": (np.arange(s)[None, :] < lengths[:, None]).astype(np.int64)}


def _torch_model(arch, config, seed):
    """The transformers module with random weights (biases and norm gains too), in eval mode, returning one
    tensor."""
    import torch
    import transformers as tf

    torch.manual_seed(seed)
    common = dict(attn_implementation="eager")
    if arch == "gpt2":
        net = tf.GPT2LMHeadModel(tf.GPT2Config(**config, use_cache=False, **common))
    elif arch == "bert":
        net = tf.BertModel(tf.BertConfig(**config, **common), add_pooling_layer=False)
    elif arch == "vit":
        net = tf.ViTForImageClassification(tf.ViTConfig(**config, **common))
    elif arch == "llama":
        net = tf.LlamaForCausalLM(tf.LlamaConfig(**config, use_cache=False, **common))
    elif arch == "t5":
        net = tf.T5EncoderModel(tf.T5Config(**config, use_cache=False, **common))
    else:
        classes = {"qwen3": (tf.Qwen3ForCausalLM, tf.Qwen3Config), "bloom": (tf.BloomForCausalLM, tf.BloomConfig),
                   "codegen": (tf.CodeGenForCausalLM, tf.CodeGenConfig),
                   "gemma2": (tf.Gemma2ForCausalLM, tf.Gemma2Config), "phi": (tf.PhiForCausalLM, tf.PhiConfig)}
        model_class, config_class = classes[arch]
        net = model_class(config_class(**config, use_cache=False, **common))

    with torch.no_grad():          # initializers leave biases at 0 and norm gains at 1, which folds away
        for p in net.parameters():
            if p.dim() == 1 and bool((p == 0).all()):
                p.normal_(0.0, 0.02)
            elif p.dim() == 1 and bool((p == 1).all()):
                p.add_(0.1 * torch.randn_like(p))

    class FirstOutput(torch.nn.Module):
        """The model's first output (logits or last hidden state) alone, without caches."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, *args):
            names = ["pixel_values"] if arch == "vit" else ["input_ids", "attention_mask"][:len(args)]
            kwargs = dict(zip(names, args))
            if arch in _DECODERS:
                kwargs["use_cache"] = False
            return self.inner(**kwargs, return_dict=False)[0]

    return FirstOutput(net.eval()).eval()


def _symbolic_dims(arch) -> dict:
    """Input dim -> name of the dims a dynamic export leaves symbolic: the batch, and the sequence."""
    return {0: "batch"} if arch == "vit" else {0: "batch", 1: "sequence"}


def _export(arch, form, config, shape, seed, dynamic=False) -> bytes:
    import torch

    feeds = _feeds(arch, config, shape, seed)
    names = list(feeds)
    args = tuple(torch.from_numpy(v) for v in feeds.values())
    net = _torch_model(arch, config, seed)
    dims = _symbolic_dims(arch) if dynamic else {}
    with torch.no_grad():
        if form == "dynamo":
            symbols = {i: torch.export.Dim(name) for i, name in dims.items()}
            program = torch.onnx.export(net, args, input_names=names, output_names=["output"], dynamo=True,
                                        opset_version=OPSET, external_data=False, optimize=True, verbose=False,
                                        dynamic_shapes={"args": tuple(symbols for _ in args)} if dims else None)
            return program.model_proto.SerializeToString()
        buf = io.BytesIO()
        axes = {name: dict(dims) for name in names + ["output"]} if dims else None
        torch.onnx.export(net, args, buf, input_names=names, output_names=["output"], dynamo=False,
                          opset_version=OPSET, do_constant_folding=True, dynamic_axes=axes)
    data = buf.getvalue()
    return _ort_optimize(arch, data, config) if form == "ortopt" else data


def _ort_optimize(arch, data: bytes, config) -> bytes:
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model

    model_type = _ORT_MODEL_TYPE[arch]
    options = FusionOptions(model_type)
    for name, value in _ORT_OPTIONS.items():
        if hasattr(options, name):
            setattr(options, name, value)
    if arch in _ORT_NO_NORM_FUSION:
        options.enable_layer_norm = False
    heads = config.get("n_head") or config.get("num_attention_heads") or config.get("num_heads")
    hidden = config.get("n_embd") or config.get("hidden_size") or config.get("d_model")
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.onnx"
        src.write_bytes(data)
        opt = optimize_model(str(src), model_type=model_type, num_heads=heads, hidden_size=hidden,
                             optimization_options=options, opt_level=0, use_gpu=False, only_onnxruntime=False)
    model = opt.model
    foreign = sorted({n.op_type for n in model.graph.node
                      if n.domain not in ("", "ai.onnx") or n.op_type == "SimplifiedLayerNormalization"})
    if foreign:
        raise RuntimeError(f"onnxruntime's optimizer wrote contrib ops {foreign} for {arch}; "
                           f"switch that fusion off in _ORT_OPTIONS")
    return model.SerializeToString()
