"""User errors: one exception type (UserError), one line and exit code 2 in the CLI; a bug keeps its traceback.

One test per defect of issue 13 ("Errors" and the config / data / hook defects): configs built in Python are
checked like YAML ones (options, finite numbers, derived fields that follow ``dataclasses.replace``), the
char tokenizer is fit on the text it encodes, bad data files are named, hook names that match nothing are
refused with close matches, and ``replace`` / ``add`` move their tensors to the activation.
"""

import dataclasses
import errno
import json
import math
import subprocess
import sys

import pytest
import torch

from conftest import tiny_transformer
from dlmlab.cli.main import main
from dlmlab.config import ConfigError, from_dict, load_yaml
from dlmlab.data import DataConfig, load_corpus
from dlmlab.data.paths import DataError, DataNotFound
from dlmlab.errors import UserError, user_message
from dlmlab.interp.hooks import UnknownHookPoint
from dlmlab.models import TransformerConfig
from dlmlab.models.mamba import MambaConfig
from dlmlab.models.mamba2 import Mamba2Config
from dlmlab.models.recurrent import RecurrentConfig
from dlmlab.training import TrainConfig
from dlmlab.training.lm import RunConfig, load_run_config, run_config_dict


def one_error_line(capsys, command: str) -> str:
    """The CLI's stderr must be exactly one line ``dlmlab COMMAND: error: ...`` (no traceback)."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"dlmlab {command}: error: "), err
    assert "Traceback" not in err
    return lines[0]


# ---------------------------------------------------------------------------------------------- errors
def test_only_user_errors_are_user_errors():
    """ValueError / FileNotFoundError are no longer user errors (a bug must keep its traceback)."""
    assert issubclass(ConfigError, UserError) and issubclass(DataNotFound, UserError)
    assert issubclass(UnknownHookPoint, UserError)
    assert user_message(ValueError("a bug")) is None
    assert user_message(FileNotFoundError(2, "No such file", "x")) is None
    assert user_message(KeyError("k")) is None
    assert user_message(UserError("bad\ninput")) == "bad; input"
    full = user_message(OSError(errno.ENOSPC, "No space left on device", "/out/model.safetensors"))
    assert "no space left" in full and "/out/model.safetensors" in full
    assert "read-only" in user_message(OSError(errno.EROFS, "Read-only file system", "/ro/x"))


def test_cli_user_error_is_one_line_exit_2(tmp_path, capsys):
    assert main(["eval", str(tmp_path / "nowhere")]) == 2
    assert "nowhere" in one_error_line(capsys, "eval")


def train_run_folder(tmp_path):
    """A folder `dlmlab eval` takes for a `dlmlab train` run (a run config.json), for patching its loader."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    return run


def test_cli_bug_propagates_with_its_traceback(monkeypatch, tmp_path):
    """A ValueError / KeyError from a bug is not turned into a one-line error."""
    import dlmlab.cli.eval_cmd as eval_cmd

    def bug(*a, **k):
        raise ValueError("an internal invariant broke")

    monkeypatch.setattr(eval_cmd, "read_run_config", bug)
    with pytest.raises(ValueError, match="internal invariant"):
        main(["eval", str(train_run_folder(tmp_path))])


def test_cli_bug_prints_traceback_in_a_subprocess(tmp_path, subprocess_env):
    script = (
        "import sys\n"
        "import dlmlab.cli.eval_cmd as m\n"
        "def boom(*a, **k):\n"
        "    raise KeyError('not_a_user_error')\n"
        "m.read_run_config = boom\n"
        "from dlmlab.cli.main import main\n"
        "sys.exit(main(['eval', sys.argv[1]]))\n"
    )
    r = subprocess.run([sys.executable, "-c", script, str(train_run_folder(tmp_path))], env=subprocess_env, capture_output=True, text=True,
                       timeout=120, cwd=tmp_path)
    assert r.returncode == 1, r.stderr
    assert "Traceback (most recent call last)" in r.stderr and "KeyError: 'not_a_user_error'" in r.stderr


def test_cli_full_disk_is_one_line_exit_2(monkeypatch, capsys, tmp_path):
    import dlmlab.cli.eval_cmd as eval_cmd

    def full(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device", "/runs/x/eval.json")

    monkeypatch.setattr(eval_cmd, "read_run_config", full)
    assert main(["eval", str(train_run_folder(tmp_path))]) == 2
    line = one_error_line(capsys, "eval")
    assert "no space left" in line and "/runs/x/eval.json" in line


def test_cli_argument_errors_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["train", "c.yaml", "--out", str(tmp_path), "--steps", "many"])
    assert e.value.code == 2
    capsys.readouterr()
    assert main(["compare", str(tmp_path), str(tmp_path), "--rtol", "-1"]) == 2
    assert "--rtol" in one_error_line(capsys, "compare")
    assert main(["compare", str(tmp_path), str(tmp_path), "--rtol", "nan"]) == 2
    assert "--rtol" in one_error_line(capsys, "compare")


def test_cli_rate_errors_are_user_errors(tmp_path, capsys):
    assert main(["rate", str(tmp_path / "nowhere")]) == 2
    assert "does not exist" in one_error_line(capsys, "rate")
    (tmp_path / "samples.jsonl").write_bytes(b'{"prompt": "a", "method": "m", "sample": "\xff"}\n')
    assert main(["rate", str(tmp_path), "--report"]) == 2
    one_error_line(capsys, "rate")
    assert main(["rate", str(tmp_path), "--port", "70000"]) == 2
    assert "--port" in one_error_line(capsys, "rate")


def test_cli_compare_corrupt_results_is_one_line(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    for d in (a, b):
        d.mkdir()
    (a / "results.json").write_text('{"study": "x"}')
    (b / "results.json").write_text('{"study": ')
    assert main(["compare", str(a), str(b)]) == 2
    assert "results.json" in one_error_line(capsys, "compare")


# ---------------------------------------------------------------------------------------------- configs
@pytest.mark.parametrize("make,field,options", [
    (lambda: TransformerConfig(positions="rotary"), "positions", "'learned', 'rope', 'alibi', 'none'"),
    (lambda: TransformerConfig(mlp="silu"), "mlp", "'gelu', 'gelu_new', 'relu', 'swiglu'"),
    (lambda: TransformerConfig(norm="batchnorm"), "norm", "'layernorm'"),
    (lambda: TransformerConfig(attn_mask="sideways"), "attn_mask", "'causal'"),
    (lambda: MambaConfig(vocab_size=5, scan="chunkd"), "scan", "'chunked', 'sequential'"),
    (lambda: Mamba2Config(vocab_size=5, scan="sequentail"), "scan", "'chunked', 'sequential'"),
    (lambda: RecurrentConfig(vocab_size=5, cell="rnn"), "cell", "'lstm', 'gru'"),
    (lambda: RecurrentConfig(vocab_size=5, final_norm="batch"), "final_norm", "'layernorm'"),
    (lambda: TrainConfig(schedule="exp"), "schedule", "'constant', 'cosine', 'linear'"),
    (lambda: DataConfig(tokenizer="word"), "tokenizer", "'char', 'bpe'"),
    (lambda: RunConfig(objective="mlm"), "objective", "'ar', 'mdlm'"),
])
def test_python_configs_refuse_unknown_options(make, field, options):
    """Built in Python (not only from YAML), a value outside a Literal is refused naming the valid options."""
    with pytest.raises(ConfigError, match=f"{field}: .* is not one of") as e:
        make()
    assert options in str(e.value)


def test_python_configs_check_types_and_ranges():
    with pytest.raises(ConfigError, match="d_model: expected an integer"):
        TransformerConfig(d_model="64")
    with pytest.raises(ConfigError, match="n_heads must be > 0"):
        TransformerConfig(n_heads=0)
    with pytest.raises(ConfigError, match="d_state must be > 0"):
        MambaConfig(vocab_size=5, d_state=0)
    with pytest.raises(ConfigError, match="train.steps must be > 0"):
        TrainConfig(steps=0)
    assert TrainConfig(lr=1).lr == 1.0 and isinstance(TrainConfig(lr=1).lr, float)


def test_replace_rederives_derived_fields():
    cfg = TransformerConfig(d_model=128, n_heads=4)
    assert cfg.d_head == 32
    assert dataclasses.replace(cfg, d_model=256).d_head == 64
    assert dataclasses.replace(cfg, n_heads=8).d_head == 16
    explicit = TransformerConfig(d_model=128, n_heads=4, d_head=16)
    assert dataclasses.replace(explicit, d_model=256).d_head == 16  # set by the user: kept
    with pytest.raises(ConfigError, match="not divisible"):
        dataclasses.replace(cfg, d_model=130)

    m = MambaConfig(vocab_size=5, d_model=64)
    m2 = dataclasses.replace(m, d_model=256)
    assert (m.d_inner, m.dt_rank, m2.d_inner, m2.dt_rank) == (128, 4, 512, 16)
    assert dataclasses.replace(m, expand=3.0).d_inner == 192
    assert dataclasses.replace(MambaConfig(vocab_size=5, d_inner=100), d_model=256).d_inner == 100
    assert dataclasses.replace(Mamba2Config(vocab_size=5, d_model=64), d_model=128).d_inner == 256
    assert dataclasses.replace(RecurrentConfig(vocab_size=5, d_model=8), d_model=16).hidden_size == 16


def test_derived_fields_round_trip_through_json_and_yaml(tmp_path):
    cfg = RunConfig(model=TransformerConfig(d_model=64, n_heads=4, max_seq_len=128))
    text = json.dumps(run_config_dict(cfg))  # what config.json holds (the objective as its section)
    assert json.loads(text)["model"]["d_head"] == 16
    assert json.loads(text)["objective"] == {"name": "ar", "pad_id": None, "per_row": False, "float32": False}
    back = from_dict(RunConfig, json.loads(text))
    assert back == cfg and back.model.d_head == 16
    import yaml

    (tmp_path / "c.yaml").write_text(yaml.safe_dump(run_config_dict(cfg)))
    assert load_run_config(tmp_path / "c.yaml") == cfg


@pytest.mark.parametrize("bad", [float("inf"), float("-inf"), float("nan")])
def test_non_finite_hyperparameters_are_refused(bad):
    with pytest.raises(ConfigError, match="lr: must be a finite number"):
        TrainConfig(lr=bad)
    with pytest.raises(ConfigError, match="norm_eps: must be a finite number"):
        TransformerConfig(norm_eps=bad)
    with pytest.raises(ConfigError, match="dt_max: must be a finite number"):
        MambaConfig(vocab_size=5, dt_max=bad)


def test_yaml_inf_lr_is_refused_naming_file_and_field(tmp_path, capsys):
    cfg = tmp_path / "inf.yaml"
    cfg.write_text("train:\n  lr: .inf\n")
    with pytest.raises(ConfigError, match=r"inf.yaml: train.lr: must be a finite number, got inf"):
        load_run_config(cfg)
    assert main(["train", str(cfg), "--out", str(tmp_path / "run")]) == 2
    assert "train.lr" in one_error_line(capsys, "train")


def test_seq_len_beyond_learned_positions_is_refused_when_the_config_loads(tmp_path):
    cfg = tmp_path / "long.yaml"
    cfg.write_text("model: {max_seq_len: 64}\ndata: {seq_len: 128}\n")
    with pytest.raises(ConfigError, match=r"data.seq_len \(128\) exceeds model.max_seq_len \(64\)"):
        load_run_config(cfg)
    cfg.write_text("model: {max_seq_len: 64, positions: rope}\ndata: {seq_len: 128}\n")
    assert load_run_config(cfg).data.seq_len == 128  # rope has no table to run past
    with pytest.raises(ConfigError, match="exceeds model.max_seq_len"):
        RunConfig(model=TransformerConfig(max_seq_len=16), data=DataConfig(seq_len=32))


def test_yaml_config_errors_name_the_file(tmp_path):
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"model:\n  d_model: 64 # \xe9\n")
    with pytest.raises(ConfigError, match=r"latin1.yaml is not UTF-8 text .*line 2"):
        load_run_config(bad)
    (tmp_path / "folder.yaml").mkdir()
    with pytest.raises(ConfigError, match="folder.yaml is a directory"):
        load_run_config(tmp_path / "folder.yaml")
    top = tmp_path / "list.yaml"
    top.write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="list.yaml: expected a YAML mapping"):
        load_yaml(RunConfig, top)
    unk = tmp_path / "unk.yaml"
    unk.write_text("model:\n  d_modle: 64\n")
    with pytest.raises(ConfigError, match=r"unk.yaml: unknown field 'model.d_modle'"):
        load_run_config(unk)


def test_study_presets_still_validate():
    """Every preset of every study builds (their nested configs check themselves when built)."""
    import importlib

    for name in ("induction", "reversal", "state", "prediff"):
        mod = importlib.import_module(f"dlmlab.studies.{name}.presets")
        presets = getattr(mod, "PRESETS", None)
        assert presets, name
        for key, p in presets.items():
            if hasattr(p, "validate"):
                p.validate()
            for f in dataclasses.fields(p):  # nested configs are still valid (e.g. after replace)
                v = getattr(p, f.name)
                if dataclasses.is_dataclass(v) and hasattr(v, "check"):
                    dataclasses.replace(v)


# ---------------------------------------------------------------------------------------------- data
def _data(tmp_path, text: str | bytes, **kw) -> DataConfig:
    path = tmp_path / "corpus.txt"
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return DataConfig(source=str(path), seq_len=kw.pop("seq_len", 8), **kw)


def test_char_tokenizer_is_fit_on_the_text_it_encodes(tmp_path):
    """A character only in the last (validation) part of the text used to fail to encode."""
    text = "abcab cabba " * 20 + "z"
    stream, tok = load_corpus(_data(tmp_path, text))
    assert tok.vocab_size == len(set(text))
    assert tok.decode(stream.val.tolist()).endswith("z")


@pytest.mark.parametrize("content,msg", [
    (b"", "is empty"),
    (b"hello world \xff\xfe not utf-8 " * 10, "is not UTF-8 text"),
    (b"tiny", "too short"),
])
def test_bad_data_files_are_named(tmp_path, content, msg):
    cfg = _data(tmp_path, content)
    with pytest.raises(DataError, match=msg) as e:
        load_corpus(cfg)
    assert "corpus.txt" in str(e.value)


def test_data_source_folder_or_missing_is_named(tmp_path):
    with pytest.raises(DataError, match="is a directory"):
        load_corpus(DataConfig(source=str(tmp_path)))
    with pytest.raises(DataNotFound, match="nope.txt"):
        load_corpus(DataConfig(source=str(tmp_path / "nope.txt")))


def test_named_corpus_missing_from_offline_data(tmp_path, monkeypatch):
    (tmp_path / "README.md").write_text("offline data")
    monkeypatch.setenv("DLMLAB_DATA", str(tmp_path))
    with pytest.raises(DataNotFound, match="wikitext2-valid.*missing"):
        load_corpus(DataConfig(source="wikitext2-valid"))


def test_unseen_characters_with_a_given_tokenizer_are_named(tmp_path):
    _, tok = load_corpus(_data(tmp_path, "abcab cabba " * 20))
    other = tmp_path / "other.txt"
    other.write_text("abc xyz " * 40)
    with pytest.raises(DataError, match=r"other.txt has 3 character\(s\) .* never saw \('xyz'\)"):
        load_corpus(DataConfig(source=str(other), seq_len=8), tok)


@pytest.mark.parametrize("content,msg", [
    (b"", "is empty"),
    (b"caf\xe9 " * 200, "not UTF-8"),
    (None, "is a directory"),
])
def test_cli_train_bad_data_is_one_line(tmp_path, capsys, content, msg):
    src = tmp_path / "data.txt"
    if content is None:
        src.mkdir()
    else:
        src.write_bytes(content)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(f"model: {{d_model: 16, n_layers: 1, n_heads: 2, max_seq_len: 16}}\n"
                   f"data: {{source: '{src}', seq_len: 16}}\ntrain: {{steps: 2, batch_size: 2, progress: false}}\n")
    assert main(["train", str(cfg), "--out", str(tmp_path / "run")]) == 2
    line = one_error_line(capsys, "train")
    assert msg in line and str(src) in line


def test_cli_eval_corrupt_config_json_names_file_and_line(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text('{\n "model": {"d_model": 16,\n')
    assert main(["eval", str(run)]) == 2
    line = one_error_line(capsys, "eval")
    assert "config.json" in line and "line 3" in line and "not valid JSON" in line


# ---------------------------------------------------------------------------------------------- hooks
def test_cache_refuses_a_typo_among_valid_names(tokens):
    model = tiny_transformer()
    with pytest.raises(UnknownHookPoint, match=r"'blocks.0.resid_psot'.*did you mean 'blocks.0.resid_post'"):
        with model.cache(["blocks.0.resid_pre", "blocks.0.resid_psot"]):
            model(tokens)
    assert not any(hp.active for hp in model.hook_points.values())


def test_glob_typos_are_refused_with_close_matches():
    model = tiny_transformer()
    with pytest.raises(UnknownHookPoint, match=r"did you mean 'blocks.\*.attn.z'"):
        with model.cache("blocks.*.atn.z"):
            pass
    with pytest.raises(UnknownHookPoint, match="no hook point matches 'blocks.7.mlp_out'"):
        with model.replace({"blocks.7.mlp_out": torch.zeros(1)}):
            pass
    with pytest.raises(UnknownHookPoint, match="'finall'.*did you mean 'final'"):
        with model.add({"finall": torch.zeros(32)}):
            pass
    with pytest.raises(UnknownHookPoint):
        with model.hooks({"embedd": lambda x, hp: x}):
            pass
    assert isinstance(UnknownHookPoint("x"), KeyError) and str(UnknownHookPoint("msg")) == "msg"
    assert not any(hp.active for hp in model.hook_points.values())


def test_replace_and_add_cast_to_the_activation_dtype(tokens):
    model = tiny_transformer().double()
    steer = torch.ones(32, dtype=torch.float32)
    with torch.no_grad():
        base = model(tokens)
        with model.add({"blocks.1.resid_post": steer}), model.cache(["blocks.1.resid_post"]) as c:
            out = model(tokens)
        assert c["blocks.1.resid_post"].dtype == torch.float64 and out.dtype == torch.float64
        with model.replace({"final": torch.zeros(3, 12, 32, dtype=torch.float16)}):
            zero = model(tokens)
        assert zero.dtype == torch.float64 and zero.abs().max() == 0 and not torch.equal(out, base)
    with pytest.raises(ValueError, match=r"does not broadcast to the activation's shape \(3, 12, 32\)"):
        with model.add({"final": torch.ones(5)}):
            model(tokens)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_replace_and_add_move_tensors_to_the_activation_device(tokens):
    model = tiny_transformer().cuda()
    x = tokens.cuda()
    with torch.no_grad():
        with model.add({"blocks.0.resid_post": torch.ones(32)}), model.cache(["blocks.0.resid_post"]) as c:
            model(x)
        assert c["blocks.0.resid_post"].device.type == "cuda"
        with model.replace({"final": torch.zeros(3, 12, 32)}):
            out = model(x)
        assert out.device.type == "cuda" and math.isclose(float(out.abs().max()), 0.0)
