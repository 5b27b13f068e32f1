"""Papercuts a new user met (issue 30, section 4): each is a one-line fix or error, and nothing is lost."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from dlmlab.cli.main import main

CFG = ("objective: {obj}\nmodel: {{family: {family}, {model}}}\n"
       "data: {{seq_len: 16}}\ntrain: {{steps: 2, batch_size: 4, ckpt_every: 1, keep_checkpoints: 0, lr: {lr}}}\n"
       "eval_batches: 1\n")
TF = "d_model: 16, n_layers: 1, n_heads: 2, attn_mask: {mask}, positions: rope, max_seq_len: 64"


def _cfg(tmp_path, obj="ar", family="transformer", lr=1e-3, name="c.yaml"):
    model = TF.format(mask="causal" if obj == "ar" else "bidirectional") if family == "transformer" else \
        "d_model: 16, n_layers: 1"
    p = tmp_path / name
    p.write_text(CFG.format(obj=obj, family=family, model=model, lr=lr))
    return p


def _err(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err
    return err.splitlines()[-1] if err else ""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("papercuts")
    out = {}
    for obj in ("ar", "mdlm"):
        assert main(["train", str(_cfg(d, obj, name=f"{obj}.yaml")), "--out", str(d / obj), "--no-progress"]) == 0
        out[obj] = d / obj
    return out


# --- reproduce STUDY writes report.html -----------------------------------------------------------------------
def test_reproduce_one_study_writes_report_html(tmp_path, monkeypatch, capsys):
    from fake_studies import install, make_study

    install(monkeypatch, {"a": make_study("a"), "b": make_study("b")})
    assert main(["reproduce", "a", "--preset", "smoke", "--out", str(tmp_path / "a"), "--no-progress"]) == 0
    page = tmp_path / "a" / "report.html"
    assert f"html report: {page}" in capsys.readouterr().out
    html = page.read_text()
    assert "Fake study a" in html and "a_claim_0" in html and "data:image/png;base64," in html
    assert "Fake study b" not in html


# --- eval without tokenizer.json ---------------------------------------------------------------------------
def test_eval_falls_back_to_the_checkpoints_tokenizer(runs, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(runs["ar"], run)
    (run / "tokenizer.json").unlink()
    assert main(["eval", str(run)]) == 0
    assert "ppl" in capsys.readouterr().out
    for ck in (run / "checkpoints").glob("step_*"):
        (ck / "tokenizer.json").unlink()
    assert main(["eval", str(run)]) == 2
    line = _err(capsys)
    assert f"{run / 'tokenizer.json'} is missing" in line


def test_eval_step(runs, capsys):
    capsys.readouterr()
    assert main(["eval", str(runs["ar"]), "--step", "1"]) == 0
    first = capsys.readouterr().out
    assert main(["eval", str(runs["ar"]), "--step", "7"]) == 2
    line = _err(capsys)
    assert "no checkpoint of step 7" in line and "it keeps steps: 1, 2" in line, line
    assert main(["eval", str(runs["ar"])]) == 0
    assert capsys.readouterr().out != first                  # step 1 and the latest (step 2) differ


# --- sample: output paths checked first, the samples printed first ------------------------------------------
@pytest.mark.parametrize("where", ["folder", "missing"])
def test_sample_html_path_checked_before_decoding(runs, tmp_path, capsys, where):
    target = tmp_path if where == "folder" else tmp_path / "missing" / "dir" / "page.html"
    assert main(["sample", str(runs["mdlm"]), "--gen-len", "4", "--html", str(target), "--no-progress"]) == 2
    captured = capsys.readouterr()
    line = captured.err.strip()
    assert "Traceback" not in line and len(line.splitlines()) == 1 and ".tmp" not in line  # no temp file named
    assert ("is a folder" in line) if where == "folder" else ("does not exist" in line)
    assert "--- sample" not in captured.out  # refused before decoding


def test_sample_prints_the_samples_before_writing_files(runs, tmp_path, capsys, monkeypatch):
    import dlmlab.sampling.trajectory_html as th

    def broken(*a, **k):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(th, "trajectory_page", broken)
    assert main(["sample", str(runs["mdlm"]), "--gen-len", "4", "--html", str(tmp_path / "p.html"),
                 "--no-progress"]) == 2
    captured = capsys.readouterr()
    assert "--- sample 0 ---" in captured.out  # nothing lost
    assert "no space left" in captured.err


# --- config mismatch / another family ----------------------------------------------------------------------
def test_config_mismatch_names_the_fields_first(runs, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(runs["ar"], run)
    capsys.readouterr()
    assert main(["train", str(_cfg(tmp_path, "ar", lr=3e-3)), "--out", str(run), "--no-progress"]) == 2
    line = _err(capsys)
    assert line.index("in train.lr;") < len(str(run)) + 80, line   # the differing field comes first
    assert main(["train", str(_cfg(tmp_path, "ar", family="mamba", name="m.yaml")), "--out", str(run)]) == 2
    line = _err(capsys)
    assert "holds a transformer run and this config trains a mamba" in line, line
    assert len(line.replace(str(run), "RUN")) < 200, line   # one sentence, not every model field


def test_checkpoint_of_another_family_is_one_sentence(runs):
    from dlmlab.models.factory import build_model
    from dlmlab.rundir.checkpoint import CheckpointError, latest_checkpoint, load_checkpoint

    mamba = build_model("mamba", vocab_size=65, n_out=65, d_model=16, n_layers=1)
    with pytest.raises(CheckpointError) as e:
        load_checkpoint(latest_checkpoint(runs["ar"]), mamba)
    assert "holds a transformer model, and this model is a mamba" in str(e.value) and len(str(e.value)) < 300


def test_truncated_checkpoint_suggests_only_what_exists(runs, tmp_path, capsys):
    from dlmlab.rundir.checkpoint import latest_checkpoint

    alone = tmp_path / "ck"
    shutil.copytree(latest_checkpoint(runs["ar"]), alone)
    weights = alone / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    assert main(["eval", str(alone)]) == 2
    line = _err(capsys)
    assert "corrupt or truncated" in line and "latest.json" not in line and "--no-resume" not in line, line
    run = tmp_path / "run"
    shutil.copytree(runs["ar"], run)
    ck = latest_checkpoint(run)
    (ck / "model.safetensors").write_bytes(b"x" * 10)
    (run / "checkpoints" / "latest.json").unlink()
    assert main(["eval", str(run)]) == 2
    line = _err(capsys)
    assert f"delete {ck} to fall back" in line and "latest.json" not in line, line


# --- AR sampling options, trained length -----------------------------------------------------------------
def test_cache_on_ar_sampling_is_refused_and_long_gen_len_warns(runs, capsys):
    capsys.readouterr()
    assert main(["sample", str(runs["ar"]), "--prompt", "Th", "--kv-reuse", "dual", "--no-progress"]) == 2
    assert "--kv-reuse dual" in _err(capsys)
    assert main(["sample", str(runs["ar"]), "--prompt", "Th", "--gen-len", "20", "--no-progress"]) == 0
    assert "longer than the 16-token windows" in capsys.readouterr().err
    assert main(["sample", str(runs["mdlm"]), "--gen-len", "20", "--no-progress"]) == 0
    assert "longer than the 16-token windows" in capsys.readouterr().err


def test_sample_rows_say_what_made_them_and_rate_labels_stay_short(runs, tmp_path, capsys):
    from dlmlab.rating.samples import load_samples

    files = []
    for obj in ("ar", "mdlm"):
        f = tmp_path / f"{obj}.jsonl"
        assert main(["sample", str(runs[obj]), "--prompt", "Th", "--gen-len", "4", "--out", str(f),
                     "--no-progress"]) == 0
        row = json.loads(f.read_text())
        assert row["model"] == str(runs[obj]) and row["step"] == 2 and row["family"] == "transformer"
        assert row["objective"] == obj
        files.append(f)
    methods = {s.method for s in load_samples(files)}
    assert methods == {"ar objective=ar", "mdlm objective=mdlm"}, methods


# --- refusals name the public function ---------------------------------------------------------------------
def test_refusals_name_the_public_function():
    from dlmlab.analysis import UnsupportedModel, previous_token_scores
    from dlmlab.analysis.heads import next_token_scores
    from dlmlab.models.factory import build_model

    mamba = build_model("mamba", vocab_size=8, n_out=8, d_model=16, n_layers=1)
    tokens = torch.randint(0, 8, (2, 6))
    for fn in (previous_token_scores, next_token_scores):
        with pytest.raises(UnsupportedModel) as e:
            fn(mamba, tokens)
        assert str(e.value).startswith(f"{fn.__name__} needs an attention model"), str(e.value)


# --- flags and lines ---------------------------------------------------------------------------------------
def test_train_no_progress_and_resuming_line(runs, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(runs["ar"], run)
    capsys.readouterr()
    assert main(["train", str(_cfg(tmp_path, "ar")), "--out", str(run), "--steps", "3", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "resuming the run in" in err and "from step 2 of 3" in err
    assert "it/s" not in err  # no progress bar


def test_sample_help_mentions_ar(capsys):
    with pytest.raises(SystemExit):
        main(["sample", "--help"])
    out = capsys.readouterr().out
    assert "AR model" in out.split("positional arguments")[0]


def test_probe_classification_reports_the_majority_baseline():
    from dlmlab.analysis import probe_classification

    g = torch.Generator().manual_seed(0)
    y = (torch.rand(200, generator=g) < 0.8).long()          # 80 % ones
    X = torch.randn(200, 4, generator=g)                      # no signal
    res = probe_classification(X, y)
    assert 0.6 < res.baseline < 1.0
    assert "majority-class baseline" in str(res) and f"{res.baseline:.3f}" in str(res)
