"""``$DLMLAB_DATA``: a wrong one is a one-line error (no silent fall-back to ../shared/data), a good one is used."""

from __future__ import annotations

import pytest

from dlmlab.cli.main import main


@pytest.mark.parametrize("kind", ["missing", "file", "unrelated folder"])
def test_wrong_dlmlab_data_is_a_one_line_error(tmp_path, monkeypatch, capsys, kind):
    from dlmlab.data import DataConfig, load_corpus
    from dlmlab.data.paths import DataNotFound, data_root

    bad = tmp_path / "nodata"
    if kind == "file":
        bad.write_text("x")
    elif kind == "unrelated folder":
        bad.mkdir()
    monkeypatch.setenv("DLMLAB_DATA", str(bad))
    with pytest.raises(DataNotFound) as e:
        data_root()  # not a silent fall-back to ../shared/data
    msg = str(e.value)
    assert f"DLMLAB_DATA={bad}" in msg and "\n" not in msg
    with pytest.raises(DataNotFound, match="DLMLAB_DATA="):
        load_corpus(DataConfig(source="tinyshakespeare"))
    cfg = tmp_path / "c.yaml"
    cfg.write_text("model: {d_model: 16, n_layers: 1, n_heads: 2, max_seq_len: 16}\n"
                   "data: {source: tinyshakespeare, seq_len: 12}\ntrain: {steps: 1, batch_size: 2, progress: false}\n")
    assert main(["train", str(cfg), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "DLMLAB_DATA" in err and str(bad) in err


def test_a_good_dlmlab_data_is_used(tmp_path, monkeypatch):
    from dlmlab.data.paths import data_root, resolve_text

    (tmp_path / "tinyshakespeare").mkdir()
    (tmp_path / "tinyshakespeare" / "input.txt").write_text("x")
    monkeypatch.setenv("DLMLAB_DATA", str(tmp_path))
    assert data_root() == tmp_path and resolve_text("tinyshakespeare") == tmp_path / "tinyshakespeare" / "input.txt"
