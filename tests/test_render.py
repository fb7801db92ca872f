from tfcalc.render import bar, flatten, human, sci


def test_human_units():
    assert [human(174_604_259_328), human(124_439_808), human(1_536), human(512)] == ["174.6B", "124.4M", "1.5K",
                                                                                      "512"]


def test_sci():
    assert sci(367_402_130_866_176) == "3.67e14" and sci(0) == "0" and sci(2_048) == "2.05e3"


def test_bar_is_proportional():
    assert bar(1.0, width=4) == "████" and bar(0.5, width=4) == "██" and bar(0.0) == ""


def test_flatten():
    assert flatten({"a": {"b": 1, "c": {"d": 2}}, "e": 3}) == [("a.b", 1), ("a.c.d", 2), ("e", 3)]
