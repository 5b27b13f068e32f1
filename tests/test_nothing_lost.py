"""Nothing lost, nothing mixed: one test per defect found by fault injection (issue 13).

Output-folder lock, ``--no-resume`` into a finished run, pruning and half-deleted checkpoints, a run
that fails before its first step, corrupt / truncated checkpoint files, a file as ``--out``, a full
or read-only disk, a loss that becomes NaN, ``kill -9`` of a process with workers, and the weight
decay of SSM parameters.  (The rating server's defects are tested in test_rate.py.)
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import tiny_transformer
from dlmlab.cli.main import main
from dlmlab.errors import UserError
from dlmlab.objectives import ARObjective
from dlmlab.rundir import checkpoint as ckmod
from dlmlab.rundir.checkpoint import latest_checkpoint, list_checkpoints, load_checkpoint, save_checkpoint
from dlmlab.training import TrainConfig, train

BIN = Path(sys.executable).parent

RUN_YAML = """\
objective: ar
model: {{d_model: 32, n_layers: 1, n_heads: 4, d_mlp: 64, positions: learned, max_seq_len: 32}}
data: {{source: {source}, tokenizer: char, seq_len: 16}}
train: {{steps: {steps}, batch_size: 4, lr: {lr}, warmup_steps: 0, log_every: 1, ckpt_every: {ckpt}, progress: false}}
eval_batches: 1
"""


def _text(tmp_path: Path) -> Path:
    p = tmp_path / "text.txt"
    if not p.exists():
        words = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "far"]
        g = torch.Generator().manual_seed(0)
        # every character occurs early: the test is about the folder, not the tokenizer's split
        p.write_text(" ".join(words[i] for i in torch.randint(0, len(words), (1500,), generator=g).tolist()))
    return p


def _cfg(tmp_path: Path, steps: int = 4, ckpt: int = 2, lr: str = "3.0e-3", name: str = "run.yaml") -> Path:
    p = tmp_path / name
    p.write_text(RUN_YAML.format(source=_text(tmp_path), steps=steps, ckpt=ckpt, lr=lr))
    return p


def _toy(V: int = 23, B: int = 4, T: int = 8, crash_at: int | None = None):
    """(make_batch, objective) of a random-token LM task; ``crash_at``: make_batch raises at that step."""
    def make_batch(step, gen):
        if step == crash_at:
            raise RuntimeError("simulated crash")
        return {"tokens": torch.randint(0, V, (B, T + 1), generator=gen)}

    return make_batch, ARObjective()


def _steps(rows: list[dict]) -> list[int]:
    return [r["step"] for r in rows]


def _strict_rows(path: Path) -> list[dict]:
    """metrics.jsonl parsed as strict JSON: NaN / Infinity tokens are an error."""
    def refuse(token):
        raise AssertionError(f"non-strict JSON token {token} in {path}")

    return [json.loads(line, parse_constant=refuse) for line in path.read_text().splitlines()]


def _one_error_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one error line, got:\n{err}"
    assert "Traceback" not in err
    return lines[0]


CFG = dict(batch_size=4, lr=3e-3, log_every=1, progress=False)


# --- 1. --no-resume into a folder that holds a finished run ------------------------------------------
def test_no_resume_into_finished_run_moves_it_aside_and_keeps_the_new_checkpoints(tmp_path):
    out = tmp_path / "run"
    cfg = TrainConfig(steps=30, ckpt_every=10, keep_checkpoints=2, **CFG)
    old = train(tiny_transformer(seed=1), cfg, *_toy(), out_dir=out)
    # start over, killed (crash) after the new run's first checkpoint
    with pytest.raises(RuntimeError, match="simulated crash"):
        train(tiny_transformer(seed=2), cfg, *_toy(crash_at=15), out_dir=out, resume=False)
    # pruning kept the NEW run's checkpoint, not the old run's higher step names
    assert [s for s, _ in list_checkpoints(out)] == [10]
    assert latest_checkpoint(out).name == "step_0000010"
    # the old run is moved aside whole, not deleted
    (previous,) = list(out.glob("previous-*"))
    assert [s for s, _ in list_checkpoints(previous)] == [20, 30]
    assert _steps(_strict_rows(previous / "metrics.jsonl")) == _steps(old)
    # resuming continues the new run exactly
    resumed = train(tiny_transformer(seed=9), cfg, *_toy(), out_dir=out)
    fresh = train(tiny_transformer(seed=2), cfg, *_toy(), out_dir=tmp_path / "fresh")
    assert [(r["step"], r["loss"]) for r in resumed] == [(r["step"], r["loss"]) for r in fresh]


def test_no_resume_killed_before_first_checkpoint_never_resumes_the_old_run(tmp_path):
    out = tmp_path / "run"
    cfg = TrainConfig(steps=20, ckpt_every=10, **CFG)
    train(tiny_transformer(seed=1), cfg, *_toy(), out_dir=out)
    with pytest.raises(RuntimeError, match="simulated crash"):
        train(tiny_transformer(seed=2), cfg, *_toy(crash_at=5), out_dir=out, resume=False)
    rerun = train(tiny_transformer(seed=2), cfg, *_toy(), out_dir=out)
    fresh = train(tiny_transformer(seed=2), cfg, *_toy(), out_dir=tmp_path / "fresh")
    assert [(r["step"], r["loss"]) for r in rerun] == [(r["step"], r["loss"]) for r in fresh]
    assert _strict_rows(out / "metrics.jsonl") == fresh  # no rows of the old run mixed in


def test_cli_no_resume_says_where_the_old_run_went(tmp_path, capsys):
    cfg, out = _cfg(tmp_path), tmp_path / "run"
    assert main(["train", str(cfg), "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["train", str(cfg), "--out", str(out), "--no-resume"]) == 0
    err = capsys.readouterr().err
    (previous,) = list(out.glob("previous-*"))
    assert str(previous) in err
    assert {p.name for p in previous.iterdir()} >= {"checkpoints", "metrics.jsonl", "config.json", "tokenizer.json",
                                                     "eval.json"}
    assert _steps(_strict_rows(out / "metrics.jsonl")) == [1, 2, 3, 4]


# --- 2. kill -9 of a process with workers ---------------------------------------------------------
def _children(pid: int) -> set[int]:
    """Live (not zombie) processes whose parent is ``pid``, from /proc."""
    kids = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                kids.add(int(d.name))
    return kids


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2:].split()[0] != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_kill_9_of_the_parent_ends_its_workers_and_the_resource_tracker(tmp_path, subprocess_env):
    script = ("import time\nfrom dlmlab.studies.parallel import map_jobs\n"
              "map_jobs(time.sleep, [(300,), (300,)], workers=2, progress=False)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], env=subprocess_env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 60
        kids: set[int] = set()
        while time.time() < deadline and len(kids) < 3:  # two workers + the resource tracker
            time.sleep(0.2)
            kids = _children(proc.pid)
        assert len(kids) >= 3, f"workers did not start: children {kids}"
        time.sleep(1)  # let the workers finish starting (their initializer runs after the imports)
        kids = _children(proc.pid)
        proc.kill()
        proc.wait()
        deadline = time.time() + 15
        while time.time() < deadline and any(_alive(k) for k in kids):
            time.sleep(0.2)
        survivors = [k for k in kids if _alive(k)]
        assert not survivors, f"processes outlived the killed parent: {survivors}"
    finally:
        if proc.poll() is None:
            proc.kill()
        for k in _children(proc.pid) | set(locals().get("kids", ())):
            try:
                os.kill(k, signal.SIGKILL)
            except OSError:
                pass


# --- 3. two runs on one --out -----------------------------------------------------------------------
def test_a_second_run_on_a_busy_out_is_refused_and_a_dead_holders_lock_is_taken_over(tmp_path, subprocess_env,
                                                                                      capsys):
    cfg, out = _cfg(tmp_path, steps=100000, ckpt=0, name="long.yaml"), tmp_path / "run"
    holder = subprocess.Popen([str(BIN / "dlmlab"), "train", str(cfg), "--out", str(out)], env=subprocess_env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while time.time() < deadline and holder.poll() is None:
            m = out / "metrics.jsonl"
            if m.exists() and m.read_text().count("\n") >= 2:
                break
            time.sleep(0.1)
        assert holder.poll() is None, holder.stderr.read()[-2000:]
        lock = out / ".dlmlab.lock"  # (checked first: without a lock the commands below would run for long)
        assert lock.exists() and lock.read_text().split()[0] == str(holder.pid)
        for argv in (["train", str(cfg), "--out", str(out)],
                     ["train", str(_cfg(tmp_path, name="other.yaml")), "--out", str(out), "--no-resume"],
                     ["reproduce", "induction", "--preset", "smoke", "--out", str(out)]):
            assert main(argv) == 2, argv
            line = _one_error_line(capsys.readouterr().err)
            assert f"{out} is in use by PID {holder.pid}" in line and "choose another --out" in line, line
        assert not list(out.glob("previous-*"))  # the refused --no-resume moved nothing
    finally:
        holder.kill()  # kill -9: the kernel drops its lock
        holder.wait()
    from dlmlab import outdir

    with outdir.locked(out):  # a dead holder's lock is taken over
        pass


# --- 5. a run that fails before step 1 ---------------------------------------------------------------
def test_a_run_that_failed_before_training_does_not_block_the_corrected_rerun(tmp_path, monkeypatch, capsys):
    import dlmlab.training.lm as lm

    out = tmp_path / "run"

    def fail(*a, **k):
        raise UserError("simulated failure at step 1")

    monkeypatch.setattr(lm, "train", fail)
    assert main(["train", str(_cfg(tmp_path, lr="1.0e-2", name="bad.yaml")), "--out", str(out)]) == 2
    monkeypatch.undo()
    capsys.readouterr()
    # the corrected config (another lr) runs: no "holds a run with a different config"
    assert main(["train", str(_cfg(tmp_path)), "--out", str(out)]) == 0, capsys.readouterr().err
    assert _steps(_strict_rows(out / "metrics.jsonl")) == [1, 2, 3, 4]


def test_a_different_config_on_resume_names_the_fields(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", str(_cfg(tmp_path)), "--out", str(out)]) == 0
    capsys.readouterr()
    assert main(["train", str(_cfg(tmp_path, lr="1.0e-2", name="b.yaml")), "--out", str(out)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "holds a run with a different config" in line and "train.lr" in line and "0.003" in line, line
    assert "model." not in line and "data." not in line  # only the differing field


# --- 6. tracebacks instead of one-line errors -----------------------------------------------------
@pytest.fixture
def finished_run(tmp_path, capsys):
    cfg, out = _cfg(tmp_path), tmp_path / "run"
    assert main(["train", str(cfg), "--out", str(out)]) == 0
    capsys.readouterr()
    return cfg, out


def _truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def test_truncated_weights_on_eval_and_on_resume_are_one_line_errors(finished_run, capsys):
    cfg, out = finished_run
    weights = latest_checkpoint(out) / "model.safetensors"
    _truncate(weights)
    assert main(["eval", str(out)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert str(weights) in line and "corrupt or truncated" in line and "--no-resume" in line, line
    assert main(["train", str(cfg), "--out", str(out)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert str(weights) in line and "corrupt or truncated" in line, line


def test_truncated_optimizer_file_on_resume_is_a_clear_error(tmp_path):
    out = tmp_path / "run"
    with pytest.raises(RuntimeError, match="simulated crash"):
        train(tiny_transformer(), TrainConfig(steps=4, ckpt_every=2, **CFG), *_toy(crash_at=3), out_dir=out)
    opt_file = latest_checkpoint(out) / "optimizer.safetensors"
    _truncate(opt_file, 0.3)
    # resume through train(): the error names the optimizer file
    with pytest.raises(UserError, match="optimizer.safetensors is corrupt or truncated") as ei:
        train(tiny_transformer(), TrainConfig(steps=4, ckpt_every=2, **CFG), *_toy(), out_dir=out)
    assert str(opt_file) in str(ei.value) and "\n" not in str(ei.value)


def test_out_that_is_a_file_is_a_one_line_error(tmp_path, capsys):
    target = tmp_path / "a_file"
    target.write_text("not a folder")
    assert main(["train", str(_cfg(tmp_path)), "--out", str(target)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert str(target) in line and "is a file" in line, line
    assert main(["reproduce", "induction", "--preset", "smoke", "--out", str(target)]) == 2
    assert "is a file" in _one_error_line(capsys.readouterr().err)
    assert target.read_text() == "not a folder"


@pytest.mark.parametrize("err", [
    OSError(errno.ENOSPC, "No space left on device"),
    OSError(errno.EROFS, "Read-only file system"),
    PermissionError(errno.EACCES, "Permission denied"),
    "safetensors",  # how safetensors reports a full disk: SafetensorError '... (os error 28)'
])
def test_full_or_read_only_disk_is_a_one_line_error_naming_the_file(tmp_path, monkeypatch, capsys, err):
    from safetensors import SafetensorError

    def broken(tensors, filename, *a, **k):
        if err == "safetensors":
            raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
        raise type(err)(err.errno, err.strerror, filename)

    monkeypatch.setattr(ckmod, "save_file", broken)
    out = tmp_path / "run"
    assert main(["train", str(_cfg(tmp_path)), "--out", str(out)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "safetensors" in line and str(out) in line, line
    assert ("disk is full" in line) == (err == "safetensors" or err.errno == errno.ENOSPC), line
    assert "another --out" in line
    assert not list((out / "checkpoints").glob("*.partial"))  # the half-written checkpoint is cleaned up


def test_shape_mismatch_lists_every_mismatched_tensor(tmp_path):
    from safetensors.torch import load_file

    path = save_checkpoint(tmp_path, 1, tiny_transformer(d_model=32), None, {})
    small = tiny_transformer(d_model=16, n_heads=2, d_mlp=32)
    saved = load_file(str(path / "model.safetensors"))  # (a tied weight is stored once)
    expected = [k for k, v in small.state_dict().items() if k in saved and saved[k].shape != v.shape]
    assert len(expected) > 30
    with pytest.raises(UserError) as ei:
        load_checkpoint(latest_checkpoint(tmp_path), small)
    msg = str(ei.value)
    assert "\n" not in msg and "do not fit this model" in msg
    for name in expected:
        assert name in msg, f"{name} missing from: {msg}"
    assert "file [" in msg and "vs model [" in msg


# --- 7. a loss that becomes NaN ---------------------------------------------------------------------
def test_non_finite_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path):
    make_batch, _ = _toy()
    calls = {"n": 0}

    class TurnsNaN(ARObjective):
        def loss(self, m, b):
            calls["n"] += 1
            loss, metrics = super().loss(m, b)
            return (loss * float("nan"), metrics) if calls["n"] >= 7 else (loss, metrics)

    out = tmp_path / "run"
    cfg = TrainConfig(steps=20, ckpt_every=5, **CFG)
    with pytest.raises(UserError, match="step 7.*NaN or infinite.*step_0000005"):
        train(tiny_transformer(), cfg, make_batch, TurnsNaN(), out_dir=out)
    assert [s for s, _ in list_checkpoints(out)] == [5]
    assert latest_checkpoint(out).name == "step_0000005"
    assert _steps(_strict_rows(out / "metrics.jsonl")) == [1, 2, 3, 4, 5, 6]
    model = tiny_transformer(seed=3)
    load_checkpoint(latest_checkpoint(out), model)
    assert all(torch.isfinite(p).all() for p in model.parameters())


def test_cli_run_that_diverges_exits_2_and_writes_strict_json(tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", str(_cfg(tmp_path, steps=6, ckpt=2, lr="1.0e+30")), "--out", str(out)]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "NaN or infinite" in line, line
    _strict_rows(out / "metrics.jsonl")
    for _, ck in list_checkpoints(out):
        json.loads((ck / "state.json").read_text(), parse_constant=lambda t: pytest.fail(f"{t} in state.json"))
    assert not (out / "eval.json").exists()


# --- 10. a kill while old checkpoints are deleted -------------------------------------------------
def test_a_kill_while_pruning_leaves_no_listed_half_checkpoint(tmp_path, monkeypatch):
    model = tiny_transformer()
    opt = torch.optim.AdamW(model.parameters())
    for step in (10, 20):
        save_checkpoint(tmp_path, step, model, opt, {}, keep=2)

    class Killed(BaseException):
        pass

    def killed_mid_rmtree(path, *a, **k):  # deletes the weights first, then the process dies
        (Path(path) / "model.safetensors").unlink(missing_ok=True)
        raise Killed()

    monkeypatch.setattr(ckmod.shutil, "rmtree", killed_mid_rmtree)
    with pytest.raises(Killed):
        save_checkpoint(tmp_path, 30, model, opt, {}, keep=2)
    monkeypatch.undo()
    listed = list_checkpoints(tmp_path)
    assert [s for s, _ in listed] == [20, 30]
    for _, path in listed:  # every listed checkpoint is complete and loads
        load_checkpoint(path, tiny_transformer(seed=4), torch.optim.AdamW(tiny_transformer().parameters()))
    save_checkpoint(tmp_path, 40, model, opt, {}, keep=2)  # the next save clears what the kill left
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest.json", "step_0000030",
                                                                           "step_0000040"]


# --- part 6: weight decay --------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["mamba", "mamba2"])
def test_no_weight_decay_on_ssm_a_log_d_dt_bias(kind):
    from dlmlab.training import make_optimizer

    if kind == "mamba":
        from dlmlab.models.mamba import Mamba, MambaConfig

        model = Mamba(MambaConfig(vocab_size=11, d_model=16, n_layers=2, d_state=4))
    else:
        from dlmlab.models.mamba2 import Mamba2, Mamba2Config

        model = Mamba2(Mamba2Config(vocab_size=11, d_model=16, n_layers=2, d_state=4, headdim=8))
    opt = make_optimizer(model, TrainConfig(weight_decay=0.1))
    decay_of = {id(p): g["weight_decay"] for g in opt.param_groups for p in g["params"]}
    names = {n.rsplit(".", 1)[-1] for n, _ in model.named_parameters()}
    ssm = {"A_log", "D"} | ({"dt_bias"} if kind == "mamba2" else set())
    assert ssm <= names
    for name, p in model.named_parameters():
        if name.rsplit(".", 1)[-1] in ssm:
            assert decay_of[id(p)] == 0.0, f"{name} gets weight decay"
        elif name.endswith("in_proj.weight"):
            assert decay_of[id(p)] == 0.1, f"{name} should get weight decay"
    assert sum(p.numel() for g in opt.param_groups for p in g["params"]) == sum(p.numel() for p in model.parameters())


def test_results_json_is_strict_json_even_with_nan(tmp_path):
    import json as _json

    from dlmlab.report import StudyResult, write_study

    res = StudyResult(study="x", preset="smoke", config={}, results={"a": float("nan"), "b": [float("inf"), 1.0]},
                      tables=[], figures=[], claims=[], wall_time_s=1.0, setup="")
    write_study(tmp_path, res, "T")

    def refuse(token):
        raise AssertionError(f"non-strict JSON token {token}")

    data = _json.loads((tmp_path / "results.json").read_text(), parse_constant=refuse)
    assert data["results"] == {"a": None, "b": [None, 1.0]}
