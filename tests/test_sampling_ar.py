"""sample_ar on every model family: KV-cached where the model has a cache, recomputed otherwise; greedy decoding
equals a plain loop over full forwards."""

import pytest
import torch

from dlmlab.models.factory import ARCHITECTURES, build_model
from dlmlab.sampling import sample_ar
from dlmlab.sampling.ar import supports_kv_cache

V = 29


def model(arch):
    torch.manual_seed(0)
    return build_model(arch, vocab_size=V, d_model=32, n_layers=2).double().eval()


def plain_greedy(m, prompt, n):
    out = prompt
    for _ in range(n):
        out = torch.cat([out, m(out)[:, -1].argmax(-1, keepdim=True)], 1)
    return out


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_sample_ar_on_every_family(arch):
    m = model(arch)
    assert supports_kv_cache(m) == (arch == "transformer")
    prompt = torch.randint(0, V, (2, 4), generator=torch.Generator().manual_seed(1))
    a = sample_ar(m, prompt, 7, generator=torch.Generator().manual_seed(2))
    b = sample_ar(m, prompt, 7, generator=torch.Generator().manual_seed(2), use_cache=False)
    assert a.shape == (2, 11) and torch.equal(a[:, :4], prompt) and torch.equal(a, b)
    assert torch.equal(sample_ar(m, prompt, 7, temperature=0.0), plain_greedy(m, prompt, 7))
    assert torch.equal(sample_ar(m, prompt, 0), prompt)


def test_sample_ar_runs_a_bidirectional_transformer_causally():
    torch.manual_seed(0)
    m = build_model("transformer", vocab_size=V, d_model=32, n_layers=2, attn_mask="bidirectional").double().eval()
    prompt = torch.randint(0, V, (2, 4), generator=torch.Generator().manual_seed(1))
    ref = prompt
    for _ in range(5):
        ref = torch.cat([ref, m(ref, attn_mask="causal")[:, -1].argmax(-1, keepdim=True)], 1)
    assert torch.equal(sample_ar(m, prompt, 5, temperature=0.0), ref)
    assert torch.equal(sample_ar(m, prompt, 5, temperature=0.0, use_cache=False), ref)
