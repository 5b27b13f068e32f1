"""Data: offline corpora, tokenizers, LM batches."""

from dlmlab.data.lm import DataConfig, TokenStream, load_corpus
from dlmlab.data.paths import DataNotFound, data_root, resolve_text
from dlmlab.data.tokenizer import BPETokenizer, CharTokenizer, load_tokenizer, train_tokenizer

__all__ = ["DataConfig", "TokenStream", "load_corpus", "data_root", "resolve_text", "DataNotFound",
           "CharTokenizer", "BPETokenizer", "load_tokenizer", "train_tokenizer"]
