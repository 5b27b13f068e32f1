"""files.atomic_write: the one temp-file-and-rename (text, bytes, or a library's own writer)."""

from __future__ import annotations

import pytest

from dlmlab.files import atomic_write, atomic_write_bytes, atomic_write_text, temp_path


def test_text_bytes_and_callback_replace_the_file_in_one_step(tmp_path):
    p = tmp_path / "a.json"
    atomic_write_text(p, "one")
    atomic_write_text(p, "twö", fsync=True)
    assert p.read_text(encoding="utf-8") == "twö"
    atomic_write_bytes(tmp_path / "b.bin", b"\x00\x01")
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\x01"
    seen = []
    atomic_write(tmp_path / "fig.png", lambda tmp: (seen.append(tmp), tmp.write_bytes(b"png")))
    assert seen[0].suffix == ".png" and seen[0] == temp_path(tmp_path / "fig.png")  # savefig picks the format by suffix
    assert sorted(x.name for x in tmp_path.iterdir()) == ["a.json", "b.bin", "fig.png"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp_file(tmp_path):
    p = tmp_path / "a.txt"
    atomic_write_text(p, "old")

    def half(tmp):
        tmp.write_text("ha")
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        atomic_write(p, half)
    assert p.read_text() == "old" and [x.name for x in tmp_path.iterdir()] == ["a.txt"]
