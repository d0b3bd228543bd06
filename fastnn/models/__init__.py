"""fastnn.models: complete models built only from fastnn layers (GPT, BertEncoder, SentenceEncoder)."""
from .bert import BertConfig, BertEncoder, mean_pool
from .gpt import GPT, GPTConfig
from .sentence import SentenceEncoder

__all__ = ["GPT", "GPTConfig", "BertEncoder", "BertConfig", "mean_pool", "SentenceEncoder"]
