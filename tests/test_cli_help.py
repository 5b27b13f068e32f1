"""What `dlmlab --help` and `dlmlab sample --help` say, and the GRU's logit-lens refusal (issue 37)."""

import argparse

import pytest
import torch

from dlmlab.cli.main import build_parser
from dlmlab.errors import UserError


def _sub(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name]


def test_top_level_help_says_sample_serves_ar_runs_too():
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    line = next(a.help for a in action._choices_actions if a.dest == "sample")
    assert "masked-diffusion" in line and "AR" in line
    assert line in " ".join(build_parser().format_help().split())


def test_every_sample_option_has_help():
    sample = _sub(build_parser(), "sample")
    missing = [a.option_strings[0] for a in sample._actions
               if a.option_strings and a.help is None]
    assert missing == []
    text = " ".join(sample.format_help().split())
    for flag, words in (("--steps", "denoising steps"), ("--seed", "random seed"), ("--num-samples", "samples to draw")):
        assert f"{flag} " in text and words in text


def test_gru_logit_lens_refusal_names_the_public_method():
    from dlmlab.models.factory import build_model

    m = build_model("gru", vocab_size=11, d_model=8, n_layers=2)
    _, cache = m.run_with_cache(torch.randint(0, 10, (1, 5)))
    with pytest.raises(UserError, match=r"^logit_lens needs a residual stream; this GRU model has none") as e:
        cache.logit_lens()
    assert "accumulated_resid" not in str(e.value)
