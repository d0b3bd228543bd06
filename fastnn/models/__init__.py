"""fastnn.models: complete models built only from fastnn layers (GPT, BertEncoder)."""
from .bert import BertConfig, BertEncoder, mean_pool
from .gpt import GPT, GPTConfig

__all__ = ["GPT", "GPTConfig", "BertEncoder", "BertConfig", "mean_pool"]
