"""One noise-schedule parser: get_schedule, parse_schedule (run configs, model.json) and DecodeConfig.noise
give equal schedules for every input form, and the same one-line errors."""

import pytest

from dlmlab.config import ConfigError
from dlmlab.objectives.schedule import CosineSchedule, LinearSchedule, LogLinearSchedule, parse_schedule
from dlmlab.sampling.config import DecodeConfig


def _three(value):
    """The schedule each entry point builds from ``value``."""
    from dlmlab.objectives.schedule import get_schedule

    return get_schedule(value), parse_schedule(value), DecodeConfig(noise=value).noise


@pytest.mark.parametrize("value, want", [
    ("linear", LinearSchedule()),
    ("loglinear", LogLinearSchedule()),
    ("cosine", CosineSchedule()),
    ({"name": "linear", "eps": 0.01}, LinearSchedule(eps=0.01)),
    ({"name": "loglinear", "eps": 0.05, "t_lo": 0.01}, LogLinearSchedule(eps=0.05, t_lo=0.01)),
    ({"name": "cosine", "eps": 0}, CosineSchedule(eps=0.0)),
    (CosineSchedule(eps=0.2, t_lo=0.1), CosineSchedule(eps=0.2, t_lo=0.1)),
])
def test_the_three_entry_points_give_equal_schedules(value, want):
    got = _three(value)
    for s in got:
        assert type(s) is type(want) and s == want
        assert type(s.eps) is float
        assert parse_schedule(s.to_data()) == s  # the one writer and the one parser round-trip
    if not isinstance(value, (str, dict)):
        assert all(s is value for s in got)  # an object is kept as it is


def test_get_schedule_with_fields_is_the_mapping_form():
    from dlmlab.objectives.schedule import get_schedule

    assert get_schedule("loglinear", eps=0.05, t_lo=0.01) == parse_schedule({"name": "loglinear", "eps": 0.05,
                                                                              "t_lo": 0.01})
    assert get_schedule() == get_schedule(None) == LinearSchedule()


@pytest.mark.parametrize("value, says", [
    ("sigmoid", "'sigmoid' is not one of ['linear', 'loglinear', 'cosine']"),
    ({"name": "sigmoid"}, ".name: 'sigmoid' is not one of ['linear', 'loglinear', 'cosine']"),
    ({"eps": 0.1}, ".name is missing; give one of linear, loglinear, cosine"),
    ({"name": "linear", "t_lo": 0.1}, "(allowed for noise linear: name, eps)"),
    ({"name": "cosine", "eps": 2}, "eps must be in [0, 1), got 2.0"),
    (3, "expected a schedule name or a mapping with a name and its fields"),
])
def test_the_three_entry_points_give_the_same_one_line_error(value, says):
    from dlmlab.objectives.schedule import get_schedule

    messages = []
    for where, build in (("noise", get_schedule), ("noise", parse_schedule),
                         ("DecodeConfig.noise", lambda v: DecodeConfig(noise=v))):
        with pytest.raises(ConfigError) as e:
            build(value)
        msg = str(e.value)
        assert says in msg and "\n" not in msg and where in msg
        messages.append(msg.replace("DecodeConfig.noise", "noise"))
    assert messages[0] == messages[1] == messages[2]
