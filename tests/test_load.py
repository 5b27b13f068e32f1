"""`dlmlab.load`: Hugging Face folders, runs without model.json (refused), bad paths; run configs of every
family (model.family, objective names) and what `dlmlab train` writes for loading."""

from __future__ import annotations

import json

import pytest
import torch

import dlmlab
from dlmlab.cli.main import main
from dlmlab.config import ConfigError, from_dict
from dlmlab.errors import UserError
from dlmlab.training import TrainConfig, train
from dlmlab.objectives import ARObjective, LinearSchedule, LogLinearSchedule, MaskedDiffusionObjective
from dlmlab.rundir.checkpoint import latest_checkpoint
from dlmlab.training.lm import RunConfig, config_differences, run_config_dict


def corpus(tmp_path):
    text = "the cat sat on the mat. the dog ran to it. " * 40
    (tmp_path / "c.txt").write_text(text)
    return tmp_path / "c.txt"


def yaml_cfg(tmp_path, model="{d_model: 16, n_layers: 1, n_heads: 2, max_seq_len: 16}", objective="ar", steps=2):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"objective: {objective}\nmodel: {model}\ndata: {{source: {corpus(tmp_path)}, seq_len: 12}}\n"
                   f"train: {{steps: {steps}, batch_size: 4, progress: false}}\neval_batches: 1\n")
    return cfg


def toy(V=11, B=4, T=8):
    from dlmlab.objectives import ARObjective

    def batches(step, gen):
        return torch.randint(0, V, (B, T + 1), generator=gen)

    return batches, ARObjective()


class _Custom:
    """An objective that does not write itself (no to_card): next-token loss on tokens [B, T+1]."""

    name = "custom"

    def make_batch(self, tokens, gen=None, step=0, **extra):
        return {"tokens": tokens, **extra}

    def loss(self, model, batch):
        from dlmlab.objectives import ar_loss

        return ar_loss(model, batch["tokens"])


# ------------------------------------------------------------------------------------------ bad paths
def test_bad_paths_are_one_line_errors_naming_what_is_accepted(tmp_path):
    (tmp_path / "file.txt").write_text("x")
    (tmp_path / "empty").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "config.json").write_text(json.dumps({"hello": 1}))
    for p, what in [(tmp_path / "nope", "does not exist"), (tmp_path / "file.txt", "is a file"),
                    (tmp_path / "empty", "not a folder dlmlab can load"),
                    (tmp_path / "other", "not a folder dlmlab can load")]:
        with pytest.raises(UserError, match=what) as e:
            dlmlab.load(p)
        msg = str(e.value)
        assert "\n" not in msg and "run folder" in msg and "Hugging Face" in msg and "checkpoints/step_N" in msg


def test_a_run_folder_without_a_checkpoint_says_so(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    with pytest.raises(UserError, match="no complete checkpoint"):
        dlmlab.load(tmp_path)


# ------------------------------------------------------------------------------- runs and train()
def test_cli_run_writes_model_json_and_runs_without_it_are_refused(tmp_path):
    out = tmp_path / "run"
    assert main(["train", str(yaml_cfg(tmp_path)), "--out", str(out)]) == 0
    card = json.loads((out / "model.json").read_text())
    assert (card["family"], card["objective"], card["mask_id"]) == ("transformer", "ar", None)
    ck = latest_checkpoint(out)
    assert {"model.json", "tokenizer.json"} <= {p.name for p in ck.iterdir()}
    assert json.loads((out / "config.json").read_text())["model"]["family"] == "transformer"
    assert dlmlab.load(out).step == 2
    # a run from before model.json existed (config.json + checkpoints) is no longer loaded: one line says so
    for p in [out / "model.json", ck / "model.json"]:
        p.unlink()
    with pytest.raises(UserError, match="run folder without model.json .* train it again"):
        dlmlab.load(out)
    with pytest.raises(UserError, match="checkpoint folder without model.json .* train it again"):
        dlmlab.load(ck)


def test_resume_of_another_family_checks_its_fields(tmp_path, capsys):
    model = "{family: lstm, d_model: 8, n_layers: 1, hidden_size: 8}"
    out = tmp_path / "run"
    assert main(["train", str(yaml_cfg(tmp_path, model)), "--out", str(out)]) == 0
    assert main(["train", str(yaml_cfg(tmp_path, model)), "--out", str(out)]) == 0  # resumed: nothing left
    assert dlmlab.load(out).step == 2
    assert main(["eval", str(out)]) == 0  # `dlmlab eval` reads runs of every family
    capsys.readouterr()
    changed = "{family: lstm, d_model: 8, n_layers: 1, hidden_size: 12}"
    assert main(["train", str(yaml_cfg(tmp_path, changed)), "--out", str(out)]) == 2
    assert "model.hidden_size: 8 in the folder, 12 now" in capsys.readouterr().err


def test_config_json_from_before_families_resumes():
    cfg = RunConfig()
    old = run_config_dict(cfg)
    del old["model"]["family"]
    assert config_differences(old, run_config_dict(cfg)) == []
    assert from_dict(RunConfig, old) == cfg


def test_train_without_a_card_objective_or_with_a_custom_model(tmp_path):
    from conftest import tiny_transformer

    train(tiny_transformer(vocab_size=11), TrainConfig(steps=2, batch_size=4, progress=False), toy()[0], _Custom(),
          out_dir=tmp_path / "a")
    run = dlmlab.load(tmp_path / "a")
    assert (run.objective, run.mask_id, run.tokenizer, run.format) == (None, None, None, "run")

    class Plain(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(11, 11)

        def forward(self, x):
            return self.emb(x)

    train(Plain(), TrainConfig(steps=2, batch_size=4, progress=False), *toy(), out_dir=tmp_path / "b")
    assert not (tmp_path / "b" / "model.json").exists()
    with pytest.raises(UserError, match="without model.json"):
        dlmlab.load(tmp_path / "b")
    with pytest.raises(UserError, match="needs an objective"):
        train(tiny_transformer(vocab_size=11), TrainConfig(steps=1, progress=False), toy()[0], "ar")
    with pytest.raises(UserError, match=r"mask_id must be a token id in \[0, 11\), got 11"):
        train(tiny_transformer(vocab_size=11), TrainConfig(steps=1, progress=False), toy(V=10, T=7)[0],
              MaskedDiffusionObjective(11), out_dir=tmp_path / "d")


def test_the_objective_travels_from_train_to_card_to_load(tmp_path):
    """Every field of the objective (mask id, noise schedule, t_range, pad_id; AR's pad_id, per_row, float32) is
    written into model.json and comes back from dlmlab.load as an equal objective."""
    from conftest import tiny_transformer

    objectives = {"mdlm": MaskedDiffusionObjective(10, LogLinearSchedule(eps=0.01), t_range=(0.1, 0.5), pad_id=3),
                  "ar": ARObjective(pad_id=2, per_row=True, float32=True)}
    for name, obj in objectives.items():
        model = tiny_transformer(vocab_size=11, attn_mask="bidirectional" if name == "mdlm" else "causal")
        train(model, TrainConfig(steps=1, batch_size=4, progress=False), toy(V=10, T=7 if name == "mdlm" else 8)[0], obj,
              out_dir=tmp_path / name)
        card = json.loads((tmp_path / name / "model.json").read_text())
        assert {k: card[k] for k in obj.to_card()} == obj.to_card()
        run = dlmlab.load(tmp_path / name)
        assert run.objective == obj and run.objective == name and run.objective_name == name
        assert (run.mask_id, run.pad_id) == (getattr(obj, "mask_id", None), obj.pad_id)
        assert run.shift_logits == (name == "ar") and card["shift_logits"] == (name == "ar")
    run = dlmlab.load(tmp_path / "mdlm")
    assert (run.noise, run.t_range) == (LogLinearSchedule(eps=0.01), (0.1, 0.5))


def test_a_card_written_the_old_way_still_loads(tmp_path):
    """A model.json of before issue 28 (objective / mask_id / shift_logits by hand, no pad_id; an old mdlm card
    without noise) loads: the objective from its fields, the missing ones at their defaults."""
    from conftest import tiny_transformer

    train(tiny_transformer(vocab_size=11, attn_mask="bidirectional"), TrainConfig(steps=1, batch_size=4, progress=False),
          toy(V=10, T=7)[0], MaskedDiffusionObjective(10), out_dir=tmp_path / "r")
    new = json.loads((tmp_path / "r" / "model.json").read_text())
    old = {k: new[k] for k in ("format", "version", "family", "config")}
    old.update({"objective": "mdlm", "mask_id": 10, "shift_logits": False, "bidirectional": True,
                "t_range": [0.02, 0.5]})  # as training/card.py wrote it (an old run: no noise, no pad_id)
    for f in (tmp_path / "r").rglob("model.json"):
        f.write_text(json.dumps(old))
    run = dlmlab.load(tmp_path / "r")
    assert run.objective == MaskedDiffusionObjective(10, LinearSchedule(), t_range=(0.02, 0.5), pad_id=None)
    assert (run.mask_id, run.noise, run.t_range, run.pad_id, run.shift_logits) == (10, LinearSchedule(), (0.02, 0.5),
                                                                                    None, False)
    for f in (tmp_path / "r").rglob("model.json"):
        f.write_text(json.dumps({**old, "objective": "ar", "mask_id": None, "shift_logits": True}))
    assert dlmlab.load(tmp_path / "r").objective == ARObjective()
    for f in (tmp_path / "r").rglob("model.json"):
        f.write_text(json.dumps({**old, "objective": "dlm"}))
    with pytest.raises(UserError, match="'dlm' is an old name of masked diffusion; write 'mdlm'"):
        dlmlab.load(tmp_path / "r")


def test_a_cards_mask_time_range_is_checked(tmp_path):
    from conftest import tiny_transformer

    with pytest.raises(UserError, match=r"t_range must satisfy 0 <= lo < hi <= 1, got \[0.5, 0.1\]"):
        MaskedDiffusionObjective(10, t_range=(0.5, 0.1))
    train(tiny_transformer(vocab_size=11), TrainConfig(steps=1, progress=False), toy(V=10, T=7)[0],
          MaskedDiffusionObjective(10, t_range=(0.1, 0.5)), out_dir=tmp_path / "c")
    assert dlmlab.load(tmp_path / "c").t_range == (0.1, 0.5)
    card = json.loads((tmp_path / "c" / "model.json").read_text())
    for f in (tmp_path / "c").rglob("model.json"):  # the run's card and each checkpoint's
        f.write_text(json.dumps({**card, "t_range": "wide"}))
    with pytest.raises(UserError, match="model.json: t_range must be two numbers"):
        dlmlab.load(tmp_path / "c")


@pytest.mark.parametrize("text,msg", [
    ("objective: dlm\n", "objective: 'dlm' is an old name of masked diffusion; write objective: mdlm"),
    ("objective: mdm\n", "write objective: mdlm"),
    ("model: {family: rwkv}\n", "model.family: 'rwkv' is not one of"),
    ("model: {family: lstm, cell: gru}\n", "contradicts model.family"),
    ("model: {family: mamba, n_heads: 4}\n", "unknown field 'model.n_heads'"),
    ("model: {family: mamba2, d_model: 30, headdim: 7}\n", "must be a multiple of model.headdim"),
])
def test_bad_family_configs_are_one_line_errors(tmp_path, capsys, text, msg):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    assert main(["train", str(cfg), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and msg in err[0], err
    with pytest.raises(ConfigError):
        from_dict(RunConfig, __import__("yaml").safe_load(text))


def test_every_family_round_trips_through_config_json():
    for fam in ("transformer", "mamba", "mamba2", "lstm", "gru"):
        cfg = RunConfig(model={"family": fam, "d_model": 16, "n_layers": 1})
        assert cfg.family == fam and cfg.model.vocab_size == 0  # taken from the tokenizer at run time
        assert from_dict(RunConfig, json.loads(json.dumps(run_config_dict(cfg)))) == cfg


# ------------------------------------------------------------------------------ Hugging Face folders
def _tiny_gpt2(tmp_path, with_tokenizer: bool):
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    hf = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        n_layer=1, n_embd=16, n_head=2, vocab_size=20, n_positions=32, bos_token_id=None, eos_token_id=None)).eval()
    hf.save_pretrained(tmp_path)
    if with_tokenizer:
        from tokenizers import Tokenizer, models, pre_tokenizers

        vocab = {w: i for i, w in enumerate("the cat sat on a mat dog ran [UNK]".split())}
        tok = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
        tok.pre_tokenizer = pre_tokenizers.Whitespace()
        transformers.PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]").save_pretrained(tmp_path)
    return hf


def test_hugging_face_folder_loads_with_its_tokenizer(tmp_path):
    hf = _tiny_gpt2(tmp_path, with_tokenizer=True)
    run = dlmlab.load(tmp_path)
    assert (run.format, run.family, run.objective, run.mask_id, run.shift_logits, run.step) == \
        ("gpt2", "transformer", "ar", None, True, None)
    assert not run.model.training
    ids = run.tokenizer("the cat sat on a mat")["input_ids"]
    assert ids == [0, 1, 2, 3, 4, 5]
    x = torch.tensor([ids])
    with torch.no_grad():
        assert torch.allclose(run.model(x), hf(x).logits, atol=1e-5)


def test_hugging_face_folder_without_tokenizer_files(tmp_path):
    _tiny_gpt2(tmp_path, with_tokenizer=False)
    run = dlmlab.load(tmp_path, dtype=torch.float64)
    assert run.tokenizer is None and next(run.model.parameters()).dtype == torch.float64


def test_import_dlmlab_stays_cheap():
    import subprocess
    import sys

    code = "import sys, dlmlab; print(sorted(m for m in ('torch', 'dlmlab.rundir.load') if m in sys.modules))"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "[]", r.stdout + r.stderr


@pytest.mark.parametrize("fmt, objective, shift, noise", [
    ("gpt2", "ar", True, None), ("mamba", "ar", True, None),  # next-token logits: shifted
    ("llada", "mdlm", False, "linear"), ("dream", "mdlm", True, "linear"),  # Dream's diffusion output is shifted
])
def test_hugging_face_shift_logits_and_noise(tmp_path, fmt, objective, shift, noise):
    """Loaded.shift_logits: True for every AR model and Dream (HFInfo.shift_logits marks only Dream's);
    Loaded.noise: the linear schedule for LLaDA / Dream, None for AR."""
    pytest.importorskip("transformers")
    from test_hf_auto import _save

    _save(fmt, tmp_path)
    run = dlmlab.load(tmp_path)
    assert (run.objective, run.shift_logits) == (objective, shift)
    assert (run.noise.name if run.noise is not None else None) == noise


# ------------------------------------------------------------------- issue 37: the run folder, no surprises
MDLM_MODEL = "{d_model: 16, n_layers: 1, n_heads: 2, max_seq_len: 16, attn_mask: bidirectional}"


@pytest.fixture(scope="module")
def mdlm_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("mdlm_run")
    assert main(["train", str(yaml_cfg(d, MDLM_MODEL, objective="mdlm")), "--out", str(d / "run")]) == 0
    return d / "run"


def _copy_with_card(run, tmp_path, **change):
    import shutil

    out = tmp_path / "copy"
    shutil.copytree(run, out)
    for p in [out / "model.json", *out.glob("checkpoints/*/model.json")]:
        card = {**json.loads(p.read_text()), **change}
        p.write_text(json.dumps({k: v for k, v in card.items() if v is not ...}))
    return out


@pytest.mark.parametrize("change, msg", [
    ({"objective": ["mdlm"]}, "model.json: objective must be an objective's name (a string) or null, got list"),
    ({"objective": {"name": "mdlm"}}, "model.json: objective must be an objective's name (a string) or null, got dict"),
    ({"objective": "mlm"}, "model.json: objective 'mlm' is not one of"),
    ({"shift_logits": "yes"}, "model.json: shift_logits must be true or false, got 'yes'"),
    ({"mask_id": 9999}, "model.json: mask_id must be a token id in [0, "),
    ({"mask_id": None}, "model.json: mask_id is null, and objective 'mdlm' needs its mask token"),
    ({"pad_id": "x"}, "model.json: pad_id must be a token id or null, got 'x'"),
])
def test_bad_model_cards_are_one_line_errors_naming_the_file_and_field(mdlm_run, tmp_path, capsys, change, msg):
    run = _copy_with_card(mdlm_run, tmp_path, **change)
    ck = latest_checkpoint(run)
    with pytest.raises(UserError) as e:
        dlmlab.load(run)
    assert msg in str(e.value) and "\n" not in str(e.value) and str(ck / "model.json") in str(e.value)
    for cmd in (["sample", str(run), "--gen-len", "4", "--steps", "2"], ["eval", str(ck)]):  # a lone checkpoint
        capsys.readouterr()
        assert main(cmd) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and msg in err[0], err


def test_a_card_naming_no_objective_takes_the_run_configs(mdlm_run, tmp_path, capsys):
    strip = {k: ... for k in ("objective", "mask_id", "noise", "t_range", "pad_id", "shift_logits", "bidirectional")}
    run = _copy_with_card(mdlm_run, tmp_path, **strip)
    assert set(json.loads((run / "model.json").read_text())) == {"format", "version", "family", "config"}
    want = dlmlab.load(mdlm_run)
    got = dlmlab.load(run)
    assert got.objective == want.objective and got.mask_id == want.mask_id == want.model.cfg.vocab_size - 1
    assert (got.shift_logits, got.noise) == (False, want.noise)
    capsys.readouterr()
    assert main(["sample", str(run), "--gen-len", "4", "--steps", "2", "--format", "jsonl", "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[0])["objective"] == "mdlm"


def _steps_cfg(tmp_path, steps):
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"objective: ar\nmodel: {{d_model: 16, n_layers: 1, n_heads: 2, max_seq_len: 16}}\n"
                   f"data: {{source: {corpus(tmp_path)}, seq_len: 12}}\n"
                   f"train: {{steps: {steps}, batch_size: 4, ckpt_every: 2, progress: false}}\neval_batches: 1\n")
    return cfg


def test_a_failed_extension_changes_nothing_in_the_folder(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", str(_steps_cfg(tmp_path, 4)), "--out", str(out)]) == 0
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != ".dlmlab.lock"}
    ck = latest_checkpoint(out)
    weights = ck / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])  # truncated
    before[weights] = weights.read_bytes()
    capsys.readouterr()
    assert main(["train", str(_steps_cfg(tmp_path, 4)), "--out", str(out), "--steps", "6"]) == 2
    assert "corrupt or truncated" in capsys.readouterr().err
    after = {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and p.name != ".dlmlab.lock"}
    assert after == before  # config.json still says 4 steps
    assert json.loads((out / "config.json").read_text())["train"]["steps"] == 4
    # following the error's advice (delete the damaged checkpoint and latest.json), the plain command resumes
    import shutil

    shutil.rmtree(ck)
    (out / "checkpoints" / "latest.json").unlink()
    assert main(["train", str(_steps_cfg(tmp_path, 4)), "--out", str(out)]) == 0
    assert dlmlab.load(out).step == 4
    assert main(["train", str(_steps_cfg(tmp_path, 4)), "--out", str(out), "--steps", "6"]) == 0
    assert json.loads((out / "config.json").read_text())["train"]["steps"] == 6 and dlmlab.load(out).step == 6


def test_a_rerun_removes_what_a_kill_mid_prune_left(tmp_path):
    out = tmp_path / "run"
    assert main(["train", str(_steps_cfg(tmp_path, 2)), "--out", str(out)]) == 0
    left = [out / "checkpoints" / "step_0000001.deleting", out / "checkpoints" / "step_0000003.partial"]
    for d in left:
        d.mkdir()
        (d / "model.safetensors").write_bytes(b"x")
    assert main(["train", str(_steps_cfg(tmp_path, 2)), "--out", str(out)]) == 0  # finished: nothing to train
    assert not any(d.exists() for d in left)
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["latest.json", "step_0000002"]


def test_the_removed_dlmlab_loading_points_to_its_successor():
    with pytest.raises(ModuleNotFoundError, match=r"dlmlab.loading was removed: call dlmlab.load\(path\).*"
                                                  r"dlmlab.rundir"):
        import dlmlab.loading  # noqa: F401
