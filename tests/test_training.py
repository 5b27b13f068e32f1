"""Training loop: exact resume (in-process and kill -9 of `dlmlab train`), atomic checkpoints, torchrun DDP."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import tiny_transformer
from dlmlab.objectives import ARObjective
from dlmlab.rundir import checkpoint as ckmod
from dlmlab.rundir.checkpoint import (CheckpointError, latest_checkpoint, list_checkpoints, load_checkpoint,
                                      save_checkpoint)
from dlmlab.training import TrainConfig, lr_at, train

BIN = Path(sys.executable).parent

TINY_YAML = """\
objective: ar
model: {{d_model: 32, n_layers: 2, n_heads: 4, d_mlp: 64, positions: learned, max_seq_len: 32}}
data: {{source: tinyshakespeare, tokenizer: char, seq_len: 32}}
train: {{steps: {steps}, batch_size: 8, lr: 3.0e-3, warmup_steps: 5, log_every: 1, ckpt_every: 10, progress: false}}
eval_batches: 2
"""


# --- in-process -------------------------------------------------------------------------------
def toy_task(V=23, B=8, T=12):
    def make_batch(step, gen):
        return {"tokens": torch.randint(0, V, (B, T + 1), generator=gen)}

    return make_batch, ARObjective()


def losses(rows):
    return [(r["step"], r["loss"]) for r in rows]


def test_lr_schedule():
    cfg = TrainConfig(steps=100, lr=1.0, warmup_steps=10, schedule="cosine", min_lr_ratio=0.1)
    assert lr_at(cfg, 5) == pytest.approx(0.5) and lr_at(cfg, 10) == pytest.approx(1.0)
    assert lr_at(cfg, 100) == pytest.approx(0.1)
    assert lr_at(TrainConfig(steps=100, lr=1.0, schedule="linear", min_lr_ratio=0.0), 50) == pytest.approx(0.5)
    assert lr_at(TrainConfig(steps=100, lr=0.3, schedule="constant"), 77) == 0.3


def test_in_process_resume_after_crash_is_exact(tmp_path):
    make_batch, loss_fn = toy_task()
    cfg = TrainConfig(steps=30, batch_size=8, lr=3e-3, log_every=1, ckpt_every=10, progress=False)
    full = train(tiny_transformer(seed=1), cfg, make_batch, loss_fn, out_dir=tmp_path / "full")

    def crashing(step, gen):
        if step == 25:
            raise RuntimeError("simulated crash")
        return make_batch(step, gen)

    with pytest.raises(RuntimeError, match="simulated crash"):
        train(tiny_transformer(seed=1), cfg, crashing, loss_fn, out_dir=tmp_path / "res")
    assert json.loads((tmp_path / "res/checkpoints/latest.json").read_text())["step"] == 20
    # a different init proves the weights really come from the checkpoint
    resumed = train(tiny_transformer(seed=99), cfg, make_batch, loss_fn, out_dir=tmp_path / "res")
    assert losses(resumed) == losses(full)
    rows = [json.loads(line) for line in (tmp_path / "res/metrics.jsonl").read_text().splitlines()]
    assert rows == full  # metrics.jsonl holds each step exactly once
    m1, m2 = tiny_transformer(), tiny_transformer()
    load_checkpoint(latest_checkpoint(tmp_path / "full"), m1)
    load_checkpoint(latest_checkpoint(tmp_path / "res"), m2)
    assert all(torch.equal(a, b) for a, b in zip(m1.state_dict().values(), m2.state_dict().values()))
    assert [s for s, _ in list_checkpoints(tmp_path / "res")] == [20, 30]  # keep_checkpoints=2


class _Constant(torch.nn.Module):
    """Logits = one learned bias vector [V] at every position (zero at initialisation: the uniform prediction)."""

    def __init__(self, V: int):
        super().__init__()
        self.b = torch.nn.Parameter(torch.zeros(V))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b.expand(*x.shape, self.b.shape[0])


def test_logged_loss_and_grad_norm_of_a_constant_model_are_known():
    """A model that predicts the uniform distribution has AR loss log V and ppl V at step 1, and its gradient is
    softmax(0) - (target frequencies), whose norm is computed here by hand from the step's batch."""
    V = 23
    make_batch, loss_fn = toy_task(V=V)
    seen = {}

    def recording(step, gen):
        seen[step] = make_batch(step, gen)
        return seen[step]

    rows = train(_Constant(V), TrainConfig(steps=2, batch_size=8, lr=1e-2, log_every=1, progress=False), recording,
                 loss_fn)
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0]["loss"] == pytest.approx(math.log(V), rel=1e-6) and rows[0]["ppl"] == pytest.approx(V, rel=1e-5)
    targets = seen[1]["tokens"][:, 1:].flatten().tolist()
    freq = [targets.count(v) / len(targets) for v in range(V)]
    assert rows[0]["grad_norm"] == pytest.approx(math.sqrt(sum((1 / V - f) ** 2 for f in freq)), rel=1e-5)
    # step 2: the model has moved towards the batch's unigram, so its loss is no longer log V
    assert rows[1]["loss"] != pytest.approx(math.log(V), rel=1e-6)


def test_checkpoint_crash_mid_save_leaves_previous_intact(tmp_path, monkeypatch):
    model = tiny_transformer()
    opt = torch.optim.AdamW(model.parameters())
    model(torch.zeros(1, 4, dtype=torch.long)).sum().backward()
    opt.step()
    save_checkpoint(tmp_path, 10, model, opt, {"note": "ok"})

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(ckmod, "save_file", boom)
    with pytest.raises(OSError):
        save_checkpoint(tmp_path, 20, model, opt, {})
    monkeypatch.undo()
    assert latest_checkpoint(tmp_path).name == "step_0000010"
    assert [s for s, _ in list_checkpoints(tmp_path)] == [10]  # the .partial dir is ignored
    state = load_checkpoint(latest_checkpoint(tmp_path), tiny_transformer(seed=5), torch.optim.AdamW(model.parameters()))
    assert state["step"] == 10 and state["note"] == "ok"
    save_checkpoint(tmp_path, 20, model, opt, {})  # the next save cleans up and succeeds
    assert latest_checkpoint(tmp_path).name == "step_0000020"
    assert not list((tmp_path / "checkpoints").glob("*.partial"))


def test_bad_checkpoints_raise_checkpoint_error(tmp_path):
    model = tiny_transformer()
    save_checkpoint(tmp_path, 1, model, None, {})
    with pytest.raises(CheckpointError, match="do not fit this model"):
        load_checkpoint(latest_checkpoint(tmp_path), tiny_transformer(d_model=16))
    (tmp_path / "checkpoints/latest.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="corrupt"):
        latest_checkpoint(tmp_path)
    (tmp_path / "checkpoints/latest.json").write_text(json.dumps({"step": 5, "path": "step_0000005"}))
    with pytest.raises(CheckpointError, match="missing or incomplete"):
        latest_checkpoint(tmp_path)
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        load_checkpoint(tmp_path / "nowhere", model)


def test_checkpoints_are_not_pickles(tmp_path):
    model = tiny_transformer()
    train(model, TrainConfig(steps=3, batch_size=8, progress=False, log_every=1), *toy_task(), out_dir=tmp_path)
    files = sorted(p.name for p in latest_checkpoint(tmp_path).iterdir())
    assert files == ["model.json", "model.safetensors", "optimizer.safetensors", "state.json"]


# --- subprocesses: kill -9 and torchrun ----------------------------------------------------------
def _write_cfg(tmp_path: Path, steps: int) -> Path:
    p = tmp_path / f"tiny{steps}.yaml"
    p.write_text(TINY_YAML.format(steps=steps))
    return p


def _metrics(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def _latest_step(run: Path) -> int:
    try:
        return json.loads((run / "checkpoints" / "latest.json").read_text())["step"]
    except (OSError, ValueError, KeyError):
        return -1


def _train_cmd(cfg: Path, out: Path) -> list[str]:
    return [str(BIN / "dlmlab"), "train", str(cfg), "--out", str(out)]


def test_kill_9_mid_run_then_resume_gives_identical_losses(tmp_path, subprocess_env):
    steps = 400
    cfg = _write_cfg(tmp_path, steps)
    run = tmp_path / "killed"
    proc = subprocess.Popen(_train_cmd(cfg, run), env=subprocess_env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    deadline = time.time() + 60
    while _latest_step(run) < 20 and proc.poll() is None and time.time() < deadline:
        time.sleep(0.005)
    proc.kill()  # SIGKILL: no cleanup, no flush
    proc.wait()
    killed_at = _latest_step(run)
    assert proc.returncode == -9, f"run was not killed mid-run (rc {proc.returncode}): {proc.stderr.read()[-2000:]}"
    assert 20 <= killed_at < steps
    # the checkpoint dir is usable: latest points at a complete checkpoint, every listed one loads
    assert latest_checkpoint(run).name == f"step_{killed_at:07d}"  # the step latest.json names, complete
    for _, path in list_checkpoints(run):
        assert {p.name for p in path.iterdir()} >= {"model.safetensors", "optimizer.safetensors", "state.json"}
    resumed = subprocess.run(_train_cmd(cfg, run), env=subprocess_env, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    full_run = tmp_path / "full"
    full = subprocess.run(_train_cmd(cfg, full_run), env=subprocess_env, capture_output=True, text=True, timeout=120)
    assert full.returncode == 0, full.stderr[-2000:]
    a, b = _metrics(run), _metrics(full_run)
    assert [r["step"] for r in a] == list(range(1, steps + 1))
    assert [r["step"] for r in b] == list(range(1, steps + 1))
    worst = max(abs(x["loss"] - y["loss"]) for x, y in zip(a, b))
    assert worst <= 1e-6, f"resumed losses differ by up to {worst} (killed at step {killed_at})"
    assert json.loads((run / "eval.json").read_text()) == pytest.approx(json.loads((full_run / "eval.json").read_text()),
                                                                         abs=1e-6)


@pytest.mark.study
@pytest.mark.skipif(not (BIN / "torchrun").exists(), reason="torchrun not installed")
def test_two_processes_equal_one_with_same_global_batch(tmp_path, subprocess_env):
    cfg = _write_cfg(tmp_path, 25)
    one = subprocess.run(_train_cmd(cfg, tmp_path / "one"), env=subprocess_env, capture_output=True, text=True,
                         timeout=120)
    assert one.returncode == 0, one.stderr[-2000:]
    cmd = [str(BIN / "torchrun"), "--nproc_per_node", "2", "--standalone", "-m", "dlmlab.cli.main",
           "train", str(cfg), "--out", str(tmp_path / "two")]
    two = subprocess.run(cmd, env=subprocess_env, capture_output=True, text=True, timeout=180)
    assert two.returncode == 0, two.stderr[-3000:]
    a, b = _metrics(tmp_path / "one"), _metrics(tmp_path / "two")
    assert [r["step"] for r in a] == [r["step"] for r in b] == list(range(1, 26))
    worst = max(abs(x["loss"] - y["loss"]) for x, y in zip(a, b))
    assert worst < 1e-5, f"2-process losses differ from 1-process by up to {worst}"
    # grad norms agree to float noise; the key-bias gradient is mathematically zero (softmax is shift
    # invariant) so it is pure rounding noise, which makes the norm's relative error ~1e-4, not 1e-7
    assert max(abs(x["grad_norm"] - y["grad_norm"]) / y["grad_norm"] for x, y in zip(a, b)) < 5e-3
    m1, m2 = tiny_transformer(vocab_size=65), tiny_transformer(vocab_size=65)
    # same final weights (vocab 65 = tinyshakespeare characters)
    load_checkpoint(latest_checkpoint(tmp_path / "one"), m1)
    load_checkpoint(latest_checkpoint(tmp_path / "two"), m2)
    assert max((p - q).abs().max().item() for p, q in zip(m1.state_dict().values(), m2.state_dict().values())) < 1e-4


SPY_FITS = """\
import os, sys
import dlmlab.data.lm as lm
fit = lm.train_tokenizer
def spy(*a, **k):  # say which rank fits a tokenizer
    print(f"FIT rank={os.environ.get('RANK')}", file=sys.stderr, flush=True)
    return fit(*a, **k)
lm.train_tokenizer = spy
from dlmlab.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.study
@pytest.mark.skipif(not (BIN / "torchrun").exists(), reason="torchrun not installed")
def test_width_matching_under_torchrun_fits_the_tokenizer_on_rank_0_only(tmp_path, subprocess_env):
    """A Mamba section without d_inner needs the vocabulary to match widths; only rank 0 reads or fits the
    tokenizer for it (and for training), and the two ranks build the model one process builds."""
    cfg = tmp_path / "m.yaml"
    cfg.write_text("objective: ar\nmodel: {family: mamba, d_model: 16, n_layers: 1, d_state: 4}\n"
                   "data: {source: tinyshakespeare, tokenizer: char, seq_len: 16}\n"
                   "train: {steps: 2, batch_size: 4, log_every: 1, progress: false}\n")
    # build (or load) the Mamba scan extension here, outside the subprocesses' timeouts: a subprocess killed by its
    # timeout mid-compile leaves the build folder locked, and every later Mamba run then waits on that lock
    from dlmlab.models.fused_scan import load_extension

    load_extension()
    spy = tmp_path / "spy.py"
    spy.write_text(SPY_FITS)
    one = subprocess.run([sys.executable, str(spy), "train", str(cfg), "--out", str(tmp_path / "one")],
                         env=subprocess_env, capture_output=True, text=True, timeout=120)
    assert one.returncode == 0, one.stderr[-2000:]
    two = subprocess.run([str(BIN / "torchrun"), "--nproc_per_node", "2", "--standalone", str(spy), "train",
                          str(cfg), "--out", str(tmp_path / "two")], env=subprocess_env, capture_output=True,
                         text=True, timeout=180)
    assert two.returncode == 0, two.stderr[-3000:]
    fits = [ln for ln in two.stderr.splitlines() if ln.startswith("FIT")]
    assert fits and set(fits) == {"FIT rank=0"}, two.stderr[-2000:]
    model = lambda run: json.loads((run / "config.json").read_text())["model"]  # noqa: E731
    assert model(tmp_path / "two") == model(tmp_path / "one")
    # the width matched for tinyshakespeare's 65 characters, as build_model matches it in this process
    from dlmlab.models.factory import model_config

    want = model_config("mamba", vocab_size=65, d_model=16, n_layers=1, d_state=4).d_inner
    assert model(tmp_path / "one")["d_inner"] == want
