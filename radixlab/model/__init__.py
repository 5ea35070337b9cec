"""A Llama-architecture model that reads and writes the KV pool (notebook 07_kv_memory_pool).

``config`` (ModelConfig, Hugging Face field names), ``forward_batch`` (ForwardMode, ForwardBatch),
``layers`` (RMSNorm, rotary, SwiGLU, RadixAttention), ``llama`` (LlamaForCausalLM), ``loader``
(``load_model("tiny" | "smollm2-135m")``).
"""

from .config import ModelConfig
from .forward_batch import ForwardBatch, ForwardMode
from .layers import RadixAttention
from .llama import Adapter, LlamaForCausalLM
from .loader import MODEL_NAMES, load_model, tiny_config

__all__ = ["Adapter", "ForwardBatch", "ForwardMode", "LlamaForCausalLM", "MODEL_NAMES", "ModelConfig",
           "RadixAttention", "load_model", "tiny_config"]
