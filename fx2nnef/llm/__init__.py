"""LLM deployment: a transformers causal LM to a tract asset with a KV cache, checked in tract.

``export_causal_lm`` writes ``OUT_DIR/model.nnef.tgz`` (I/O contract: ``input_ids [1, S]``,
``in_cache_key_i`` / ``in_cache_value_i [1, kv_heads, P, head_dim]`` in; ``outputs``,
``out_cache_key_i`` / ``out_cache_value_i [1, kv_heads, P+S, head_dim]`` out; fixed-size
``in_/out_conv_state_i`` and ``in_/out_recurrent_state_i`` for the state layers of hybrids), the
model's config, tokenizer and generation files, and ``fx2nnef.json``.
``greedy_generate`` / ``TractCausalLM`` drive such an asset from numpy.
"""
from .calibration import calibrate
from .export import LLMExportResult, export_causal_lm, load_causal_lm
from . import multimodal  # noqa: F401 - registers the multimodal source with export_causal_lm
from .generate import TractCausalLM, greedy_generate
from .multimodal_run import generate_multimodal

__all__ = ["LLMExportResult", "TractCausalLM", "calibrate", "export_causal_lm", "generate_multimodal", "greedy_generate",
           "load_causal_lm"]
