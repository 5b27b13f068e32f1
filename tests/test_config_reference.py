"""docs/config_reference.md is what the config dataclasses generate now (every field, type, default, meaning)."""

from __future__ import annotations

import dataclasses

import pytest

from dlmlab import config_reference as ref


def test_committed_page_is_the_generated_one():
    assert ref.PAGE.read_text(encoding="utf-8") == ref.render(), \
        "docs/config_reference.md is out of date: run `.venv/bin/python -m dlmlab.config_reference`"


def test_every_field_of_every_section_is_on_the_page():
    page = ref.render()
    for _, _, classes in ref._sections():
        for cls in classes:
            for f in dataclasses.fields(cls):
                assert f"| `{f.name}` |" in page, f"{cls.__name__}.{f.name}"


def test_docs_name_only_real_fields():
    fields = {f"{cls.__name__}.{f.name}" for _, _, classes in ref._sections() for cls in classes
              for f in dataclasses.fields(cls)}
    assert set(ref.DOCS) <= fields, sorted(set(ref.DOCS) - fields)


def test_an_undocumented_field_is_an_error():
    @dataclasses.dataclass
    class Undocumented:
        width: int = 3

    with pytest.raises(ValueError, match="Undocumented.width has no documentation"):
        ref.field_rows(Undocumented)


def test_check_mode(capsys):
    assert ref.main(["--check"]) == 0
