"""HF GPT-2 <-> dlmlab Transformer: logits match a tiny random GPT2LMHeadModel the test saves itself."""

import json

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import GPT2Config, GPT2LMHeadModel  # noqa: E402

from dlmlab.models import Transformer, TransformerConfig  # noqa: E402
from dlmlab.models.hf_files import HFFormatError  # noqa: E402
from dlmlab.models.hf_gpt2 import HFConversionError, load_gpt2, save_gpt2  # noqa: E402


def tiny_gpt2(dtype=torch.float32, seed=0, **kw) -> GPT2LMHeadModel:
    torch.manual_seed(seed)
    cfg = GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=50, n_positions=64,
                     bos_token_id=None, eos_token_id=None, **kw)
    m = GPT2LMHeadModel(cfg).to(dtype).eval()
    with torch.no_grad():  # LN weights 1 / biases 0 at init would hide mapping mistakes
        for p in m.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return m


def hf_logits(m, x):
    with torch.no_grad():
        return m(x).logits


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.float64, 1e-10)])
def test_load_matches_hf(tmp_path, dtype, tol):
    hf = tiny_gpt2(dtype)
    hf.save_pretrained(tmp_path)
    ours = load_gpt2(tmp_path, dtype=dtype)
    assert ours.cfg.mlp == "gelu_new" and ours.cfg.positions == "learned" and ours.cfg.d_mlp == 128
    assert ours.unembed.weight is ours.tok_emb.weight
    x = torch.randint(0, 50, (3, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got = ours(x)
    assert (got - hf_logits(hf, x)).abs().max().item() < tol
    # hooks still work on a loaded model, and the explicit path agrees too
    with torch.no_grad(), ours.cache(["blocks.*.attn.pattern"]) as c:
        explicit = ours(x)
    assert c["blocks.1.attn.pattern"].shape == (3, 4, 20, 20)
    assert (explicit - got).abs().max().item() < tol


def test_activation_and_eps_are_mapped(tmp_path):
    hf = tiny_gpt2(activation_function="relu", layer_norm_epsilon=1e-3, n_inner=48)
    hf.save_pretrained(tmp_path)
    ours = load_gpt2(tmp_path)
    assert (ours.cfg.mlp, ours.cfg.norm_eps, ours.cfg.d_mlp) == ("relu", 1e-3, 48)
    x = torch.randint(0, 50, (2, 16))
    with torch.no_grad():
        assert (ours(x) - hf_logits(hf, x)).abs().max().item() < 1e-4


def test_round_trip_save_gpt2(tmp_path):
    hf = tiny_gpt2()
    hf.save_pretrained(tmp_path / "a")
    ours = load_gpt2(tmp_path / "a")
    save_gpt2(ours, tmp_path / "b")
    assert (tmp_path / "b" / "config.json").exists() and (tmp_path / "b" / "model.safetensors").exists()
    back = GPT2LMHeadModel.from_pretrained(tmp_path / "b").eval()
    x = torch.randint(0, 50, (2, 30))
    with torch.no_grad():
        assert (hf_logits(back, x) - ours(x)).abs().max().item() < 1e-4
        assert (hf_logits(back, x) - hf_logits(hf, x)).abs().max().item() < 1e-4


def test_save_fresh_dlmlab_model_untied(tmp_path):
    torch.manual_seed(3)
    cfg = TransformerConfig(vocab_size=40, d_model=32, n_layers=1, n_heads=4, d_mlp=64, mlp="gelu_new",
                            max_seq_len=32, tie_embeddings=False)
    ours = Transformer(cfg).eval()
    save_gpt2(ours, tmp_path)
    back = GPT2LMHeadModel.from_pretrained(tmp_path).eval()
    x = torch.randint(0, 40, (2, 32))
    with torch.no_grad():
        assert (hf_logits(back, x) - ours(x)).abs().max().item() < 1e-4
    again = load_gpt2(tmp_path)
    with torch.no_grad():
        assert torch.equal(again(x), ours(x))


def test_save_refuses_non_gpt2_architecture(tmp_path):
    m = Transformer(TransformerConfig(vocab_size=20, d_model=16, n_heads=2, d_mlp=0, positions="rope"))
    with pytest.raises(HFConversionError, match="positions='rope'.*d_mlp=0"):
        save_gpt2(m, tmp_path)


def test_bad_inputs_give_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        load_gpt2(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        load_gpt2(tmp_path)
    (tmp_path / "llama").mkdir()
    (tmp_path / "llama" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(HFConversionError, match="'llama', not 'gpt2'"):
        load_gpt2(tmp_path / "llama")
    hf = tiny_gpt2()
    hf.save_pretrained(tmp_path / "bin")
    (tmp_path / "bin" / "model.safetensors").rename(tmp_path / "bin" / "pytorch_model.bin")
    with pytest.raises(HFFormatError, match="could not be read as plain tensors"):  # not a torch pickle
        load_gpt2(tmp_path / "bin")
    hf.save_pretrained(tmp_path / "bad")
    cfgj = json.loads((tmp_path / "bad" / "config.json").read_text())
    cfgj["n_embd"] = 64
    (tmp_path / "bad" / "config.json").write_text(json.dumps(cfgj))
    with pytest.raises(HFConversionError, match="shape"):
        load_gpt2(tmp_path / "bad")


def test_pytorch_model_bin_loads_through_the_restricted_unpickler(tmp_path):
    hf = tiny_gpt2()
    hf.save_pretrained(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    torch.save(hf.state_dict(), tmp_path / "pytorch_model.bin")
    x = torch.randint(0, 50, (2, 10))
    with torch.no_grad():
        assert (load_gpt2(tmp_path)(x) - hf_logits(hf, x)).abs().max().item() < 1e-4


def test_bare_gpt2model_and_sharded_checkpoints(tmp_path):
    from transformers import GPT2Model

    hf = tiny_gpt2()
    hf.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").exists()
    x = torch.randint(0, 50, (2, 10))
    with torch.no_grad():
        assert (load_gpt2(tmp_path / "sharded")(x) - hf_logits(hf, x)).abs().max().item() < 1e-4
    bare = GPT2Model(hf.config)
    bare.load_state_dict(hf.transformer.state_dict())
    bare.save_pretrained(tmp_path / "bare")  # keys without the "transformer." prefix
    with torch.no_grad():
        assert (load_gpt2(tmp_path / "bare")(x) - hf_logits(hf, x)).abs().max().item() < 1e-4
