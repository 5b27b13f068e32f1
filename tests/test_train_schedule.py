"""A run's noise schedule (`noise:` in the run config): validated, used by training and evaluation,
recorded for `dlmlab.load` (``Loaded.noise``), `dlmlab eval` and `dlmlab sample`; the default is
bit-identical to the historical linear schedule, also when a run resumes."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil

import pytest
import torch

import dlmlab
from dlmlab.cli.main import main
from dlmlab.config import ConfigError, from_dict
from dlmlab.data import load_corpus
from dlmlab.errors import UserError
from dlmlab.models import TransformerConfig
from dlmlab.objectives import elbo_bound, mdlm_loss
from dlmlab.objectives.schedule import CosineSchedule, LinearSchedule, LogLinearSchedule
from dlmlab.objectives import step_batch
from dlmlab.rundir.card import card_objective, model_card, read_card
from dlmlab.rundir.checkpoint import latest_checkpoint, list_checkpoints
from dlmlab.training.lm import (RunConfig, build_run_model, config_differences, evaluate_run, load_run,
                                load_run_config, make_lm_task, run_config_dict)
from dlmlab.training.loop import step_generator

MODEL = "{d_model: 16, n_layers: 1, n_heads: 2, attn_mask: bidirectional, max_seq_len: 16}"


def corpus(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("the cat sat on the mat. the dog ran to it. " * 40)
    return path


def yaml_cfg(tmp_path, noise: str | None = None, objective="mdlm", steps=2, model=MODEL, name="c.yaml", **train):
    extra = "".join(f", {k}: {v}" for k, v in train.items())
    text = (f"objective: {objective}\nmodel: {model}\ndata: {{source: {corpus(tmp_path)}, seq_len: 12}}\n"
            f"train: {{steps: {steps}, batch_size: 4, log_every: 1, progress: false{extra}}}\neval_batches: 2\n")
    if noise is not None:
        text += f"noise: {noise}\n"
    path = tmp_path / name
    path.write_text(text)
    return path


def mdlm_config(**kw) -> RunConfig:
    return RunConfig(objective="mdlm", model=TransformerConfig(attn_mask="bidirectional"), **kw)


def one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


# ---------------------------------------------------------------------------------------- the config
def test_noise_section_is_parsed_and_round_trips(tmp_path):
    cfg = load_run_config(yaml_cfg(tmp_path, "{name: loglinear, eps: 1.0e-2}"))
    assert cfg.noise is None and cfg.objective.schedule == LogLinearSchedule(eps=1e-2)  # folded into the objective
    assert load_run_config(yaml_cfg(tmp_path, "cosine")).objective.schedule == CosineSchedule()
    none = load_run_config(yaml_cfg(tmp_path))
    assert none.objective.schedule == LinearSchedule()
    data = run_config_dict(cfg)
    assert "noise" not in data
    assert data["objective"] == {"name": "mdlm", "noise": {"name": "loglinear", "eps": 0.01, "t_lo": 0.001},
                                 "t_range": None, "pad_id": None}
    assert from_dict(RunConfig, json.loads(json.dumps(data))) == cfg
    # the objective section written as the card reads the same as the old noise section
    card = yaml_cfg(tmp_path, objective="{name: mdlm, noise: {name: loglinear, eps: 1.0e-2}}", name="card.yaml")
    assert load_run_config(card) == cfg
    # Python: a schedule object, a name or a mapping
    assert mdlm_config(noise="cosine").objective.schedule == CosineSchedule()
    assert mdlm_config(noise=LogLinearSchedule(eps=0.1)).objective.schedule.eps == 0.1


@pytest.mark.parametrize("noise, objective, msg", [
    ("{name: sigmoid}", "mdlm", "noise.name: 'sigmoid' is not one of ['linear', 'loglinear', 'cosine']"),
    ("{name: linear, t_lo: 0.1}", "mdlm", "unknown field 'noise.t_lo' (allowed for noise linear: name, eps)"),
    ("{name: cosine, eps: 2}", "mdlm", "eps must be in [0, 1), got 2.0"),
    ("{name: cosine, eps: fast}", "mdlm", "noise.eps: expected a number"),
    ("{eps: 0.1}", "mdlm", "noise.name is missing"),
    ("[linear]", "mdlm", "noise: expected a schedule name or a mapping"),
    ("linear", "ar", "noise: objective 'ar' has no noise schedule (remove the noise section)"),
    ("linear", "{name: mdlm, noise: cosine}", "noise: the schedule is given twice (objective.noise and noise)"),
])
def test_bad_noise_sections_are_one_line_errors(tmp_path, capsys, noise, objective, msg):
    path = yaml_cfg(tmp_path, noise, objective=objective)
    with pytest.raises(ConfigError) as e:
        load_run_config(path)
    assert msg in str(e.value) and "\n" not in str(e.value)
    assert main(["train", str(path), "--out", str(tmp_path / "run")]) == 2
    assert msg in one_error_line(capsys)
    assert not (tmp_path / "run" / "checkpoints").exists()


def test_config_differences_read_old_configs_as_the_objective_section():
    new = run_config_dict(mdlm_config())
    assert new["objective"]["noise"] == {"name": "linear", "eps": 0.001}
    old = {k: v for k, v in new.items() if k != "objective"}
    # a config.json written before the objective section was the card: a name, and a noise section or none
    for written in ({"objective": "mdlm"}, {"objective": "mdlm", "noise": None},
                    {"objective": "mdlm", "noise": {"name": "linear", "eps": 0.001}}):
        assert config_differences({**old, **written}, new) == []
    ar = run_config_dict(RunConfig())
    assert config_differences(ar, {**ar, "objective": "ar"}) == []
    diffs = config_differences({**old, "objective": "mdlm"}, run_config_dict(mdlm_config(noise={"name": "linear",
                                                                                                   "eps": 0.01})))
    assert diffs == ["objective.noise.eps: 0.001 in the folder, 0.01 now"]
    diffs = config_differences(new, run_config_dict(mdlm_config(noise="cosine")))
    assert 'objective.noise.name: "linear" in the folder, "cosine" now' in diffs
    assert any("objective.noise.t_lo" in d for d in diffs)


# ------------------------------------------------------------------------- training and evaluation
def _historical_task(cfg, stream, vocab):
    """make_lm_task's mdlm batch and loss as they were before runs named a schedule (module sample_t, no schedule)."""
    from dlmlab.data import TokenStream

    def sample_t(batch, gen, eps=1e-3):  # the old module function: antithetic U[eps, 1]
        u = (torch.rand(1, generator=gen) + torch.arange(batch) / batch) % 1.0
        return eps + (1.0 - eps) * u

    def make_batch(step, gen):
        x = TokenStream.windows(stream.train, cfg.train.batch_size, cfg.data.seq_len, gen)
        return {"tokens": x, "t": sample_t(cfg.train.batch_size, gen), "noise": torch.rand(x.shape, generator=gen)}

    return make_batch, lambda m, b: mdlm_loss(m, b["tokens"], vocab, t=b["t"], noise=b["noise"])


def test_default_schedule_is_bit_identical_to_the_historical_task_and_evaluation(tmp_path):
    cfg = load_run_config(yaml_cfg(tmp_path))
    stream, tok = load_corpus(cfg.data)
    V = tok.vocab_size
    torch.manual_seed(0)
    model = build_run_model(cfg, V)
    old_batch, old_loss = _historical_task(cfg, stream, V)
    for explicit in (cfg, dataclasses.replace(cfg, noise=LinearSchedule())):
        new_batch, new_loss = make_lm_task(explicit, stream, V)
        for step in (1, 2, 7):
            g = step_generator(0, step)
            a, b = old_batch(step, step_generator(0, step)), step_batch(new_loss, new_batch(step, g), g, step)
            assert all(torch.equal(a[k], b[k]) for k in a)
            assert torch.equal(old_loss(model, a)[0], new_loss.loss(model, b)[0])
    # evaluation: the ELBO bound on the same windows with the same generator as before
    from dlmlab.data import TokenStream

    x = TokenStream.chunks(stream.val, cfg.data.seq_len + 1, limit=cfg.eval_batches * cfg.train.batch_size)
    g = torch.Generator().manual_seed(1234)
    old = [mdlm_loss(model, xb[:, :cfg.data.seq_len], V, generator=g)[0].item() for xb in x.split(4)]
    assert evaluate_run(model, cfg, stream, V)["nelbo"] == sum(old) / len(old)


def test_a_named_schedule_drives_the_training_times_and_weights(tmp_path):
    cfg = load_run_config(yaml_cfg(tmp_path, "{name: cosine, eps: 0.0, t_lo: 0.3}"))
    stream, tok = load_corpus(cfg.data)
    torch.manual_seed(0)
    model = build_run_model(cfg, tok.vocab_size)
    make_batch, objective = make_lm_task(cfg, stream, tok.vocab_size)
    g = step_generator(0, 1)
    batch = step_batch(objective, make_batch(1, g), g, 1)
    assert batch["t"].min() >= 0.3
    expected = mdlm_loss(model, batch["tokens"], tok.vocab_size, t=batch["t"], noise=batch["noise"],
                         schedule=CosineSchedule(eps=0.0, t_lo=0.3))[0]
    assert torch.equal(objective.loss(model, batch)[0], expected)
    linear = dataclasses.replace(cfg, objective="mdlm")
    assert evaluate_run(model, cfg, stream, tok.vocab_size) != evaluate_run(model, linear, stream, tok.vocab_size)


def _metrics(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_runs_without_noise_resume_exactly_under_an_explicit_default(tmp_path, capsys):
    """A run whose config.json names no schedule (`objective: mdlm`, as runs wrote it before the objective
    section was the card) resumes after a crash with `noise: linear` written out, and ends bit-identical to
    an uninterrupted run."""
    full = tmp_path / "full"
    assert main(["train", str(yaml_cfg(tmp_path, steps=4, ckpt_every=2)), "--out", str(full)]) == 0
    assert json.loads((full / "config.json").read_text())["objective"]["noise"] == {"name": "linear", "eps": 0.001}
    part = tmp_path / "part"
    assert main(["train", str(yaml_cfg(tmp_path, steps=4, ckpt_every=2)), "--out", str(part)]) == 0
    shutil.rmtree(latest_checkpoint(part))  # the crash: step 4 never saved
    (part / "checkpoints" / "latest.json").unlink()
    assert [s for s, _ in list_checkpoints(part)] == [2]
    written = json.loads((part / "config.json").read_text())
    (part / "config.json").write_text(json.dumps({**written, "objective": "mdlm"}))  # the old spelling
    explicit = yaml_cfg(tmp_path, "{name: linear, eps: 1.0e-3}", steps=4, ckpt_every=2, name="explicit.yaml")
    assert main(["train", str(explicit), "--out", str(part)]) == 0
    assert _metrics(part) == _metrics(full)
    a, b = dlmlab.load(full), dlmlab.load(part)
    assert all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(), b.model.state_dict().values()))
    assert a.noise == b.noise == LinearSchedule()
    capsys.readouterr()
    other = yaml_cfg(tmp_path, "{name: linear, eps: 1.0e-2}", steps=4, ckpt_every=2, name="other.yaml")
    assert main(["train", str(other), "--out", str(part)]) == 2
    assert "objective.noise.eps: 0.001 in the folder, 0.01 now" in one_error_line(capsys)


# ------------------------------------------------------------------------------ what is recorded
@pytest.fixture(scope="module")
def loglinear_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("loglinear")
    assert main(["train", str(yaml_cfg(d, "{name: loglinear, eps: 0.05}")), "--out", str(d / "run")]) == 0
    return d / "run"


def test_loaded_noise_is_the_trained_schedule(loglinear_run, tmp_path):
    want = LogLinearSchedule(eps=0.05)
    assert dlmlab.load(loglinear_run).noise == want
    ck = latest_checkpoint(loglinear_run)
    assert dlmlab.load(ck).noise == want
    # a card written before cards recorded the schedule takes it from the run's config.json
    old = tmp_path / "old"
    shutil.copytree(loglinear_run, old)
    for p in [old / "model.json", *old.glob("checkpoints/*/model.json")]:
        card = json.loads(p.read_text())
        del card["noise"]
        p.write_text(json.dumps(card))
    assert dlmlab.load(old).noise == want
    assert dlmlab.load(latest_checkpoint(old)).noise == want


def test_model_json_records_the_schedule(loglinear_run, tmp_path):
    card = json.loads((loglinear_run / "model.json").read_text())
    assert card["noise"] == {"name": "loglinear", "eps": 0.05, "t_lo": 0.001}
    # a checkpoint folder taken out of its run still knows its schedule
    alone = tmp_path / "alone"
    shutil.copytree(latest_checkpoint(loglinear_run), alone)
    assert dlmlab.load(alone).noise == LogLinearSchedule(eps=0.05)


def test_cards_record_noise_for_mdlm_only_and_bad_ones_are_one_line_errors(tmp_path):
    from conftest import tiny_transformer
    from dlmlab.objectives import ARObjective, MaskedDiffusionObjective
    from dlmlab.rundir.card import write_card

    model = tiny_transformer(attn_mask="bidirectional")
    card = model_card(model, MaskedDiffusionObjective(22, CosineSchedule(eps=0.01)))
    assert card["noise"] == {"name": "cosine", "eps": 0.01, "t_lo": 0.001}
    assert model_card(model, MaskedDiffusionObjective(22))["noise"] == {"name": "linear", "eps": 0.001}
    assert "noise" not in model_card(model, ARObjective())
    write_card(tmp_path, {**card, "noise": {"name": "sigmoid"}})
    with pytest.raises(UserError, match=r"model.json: noise.name: 'sigmoid' is not one of"):
        card_objective(read_card(tmp_path))


def test_ar_runs_have_no_noise_and_mdlm_runs_without_one_are_linear(tmp_path):
    ar = tmp_path / "ar"
    assert main(["train", str(yaml_cfg(tmp_path, objective="ar", model="{d_model: 16, n_layers: 1, n_heads: 2}")),
                 "--out", str(ar)]) == 0
    assert dlmlab.load(ar).noise is None
    md = tmp_path / "mdlm"
    assert main(["train", str(yaml_cfg(tmp_path)), "--out", str(md)]) == 0
    assert dlmlab.load(md).noise == LinearSchedule()


def test_eval_and_elbo_bound_use_the_trained_schedule(loglinear_run, capsys):
    capsys.readouterr()
    assert main(["eval", str(loglinear_run)]) == 0
    printed = json.loads(capsys.readouterr().out)
    model, cfg, tok = load_run(loglinear_run)
    stream, _ = load_corpus(cfg.data, tok)
    assert printed == evaluate_run(model, cfg, stream, tok.vocab_size)
    assert printed == json.loads((loglinear_run / "eval.json").read_text())
    linear = evaluate_run(model, dataclasses.replace(cfg, objective="mdlm"), stream, tok.vocab_size)
    assert printed["nelbo"] != linear["nelbo"]
    # elbo_bound with the loaded schedule: the schedule's weight on the masked NLL, checked by hand
    run = dlmlab.load(loglinear_run)
    x = stream.val[:24].view(2, 12)
    nelbo = elbo_bound(run.model, x, run.mask_id, n_samples=2, seed=3, schedule=run.noise)
    g = torch.Generator().manual_seed(3)
    total = 0.0
    for _ in range(2):
        t = run.noise.sample_t(2, g)
        u = torch.rand(x.shape, generator=g)
        masked = u < ((1 - 0.05) * t)[:, None]  # loglinear: mask share 1 - alpha(t) = (1 - eps) t
        noisy = torch.where(masked, torch.full_like(x, run.mask_id), x)
        with torch.no_grad():
            logits = run.model(noisy).double()
        logits[..., run.mask_id] = -math.inf
        nll = -logits.log_softmax(-1).gather(-1, x[..., None])[..., 0] * masked
        total += float((nll.sum(1) / t.double() / 12).mean())  # weight 1 / t
    assert nelbo == pytest.approx(total / 2, rel=1e-5)


def test_sample_noise_defaults_to_the_trained_schedule(tmp_path, capsys):
    run = tmp_path / "cos"
    assert main(["train", str(yaml_cfg(tmp_path, "cosine")), "--out", str(run)]) == 0
    args = ["sample", str(run), "--gen-len", "6", "--format", "jsonl", "--no-progress", "--unmask-rule", "ancestral",
            "--steps", "3"]
    capsys.readouterr()
    assert main(args) == 0
    out = capsys.readouterr()
    assert json.loads(out.out)["config"]["noise"] == {"name": "cosine", "eps": 0.001, "t_lo": 0.001} and out.err == ""
    assert main(args + ["--noise", "linear"]) == 0
    assert json.loads(capsys.readouterr().out)["config"]["noise"] == {"name": "linear", "eps": 0.001}


def test_sample_follows_the_trained_schedule_with_its_fields(loglinear_run, capsys):
    args = ["sample", str(loglinear_run), "--gen-len", "4", "--format", "jsonl", "--no-progress"]
    capsys.readouterr()
    assert main(args + ["--unmask-rule", "ancestral"]) == 0
    out = capsys.readouterr()  # the decoder takes the schedule object itself: eps 0.05 included, nothing to warn
    assert json.loads(out.out)["config"]["noise"] == {"name": "loglinear", "eps": 0.05, "t_lo": 0.001}
    assert out.err == ""
    assert main(args) == 0
    assert capsys.readouterr().err == ""
