"""Evaluation metrics: likelihood (AR perplexity; the diffusion ELBO bound is ``dlmlab.prediff.eval_nelbo``),
sample diversity (Rep-n, Self-BLEU), MAUVE on local features, LAMBADA-style accuracy, throughput."""

from dlmlab.metrics.lambada import find_lambada, last_word_accuracy, read_passages, split_last_word
from dlmlab.metrics.likelihood import ar_nll, ar_nll_per_window, generative_perplexity
from dlmlab.metrics.mauve_score import mauve_score, mean_pooled_features
from dlmlab.metrics.speed import steps_to_threshold, tokens_per_second
from dlmlab.metrics.text import rep_n, self_bleu

__all__ = ["ar_nll", "ar_nll_per_window", "generative_perplexity", "rep_n", "self_bleu", "mauve_score", "mean_pooled_features",
           "find_lambada", "read_passages", "last_word_accuracy", "split_last_word", "steps_to_threshold",
           "tokens_per_second"]
