from gpuop.reports import render, stamp_holds, stamp_text


def test_render_ends_every_line():
    assert render(["A=1", "B="]) == "A=1\nB=\n"
    assert render([]) == ""


def test_stamp_holds_only_for_the_same_text_and_inputs():
    report = render(["Unschedulable", "0/3 nodes are available: ..."])
    stamp = stamp_text(report, {"nodes": ["a", "b"]})
    assert stamp_holds(stamp, report, {"nodes": ["a", "b"]})
    assert not stamp_holds(stamp, report + "edited\n", {"nodes": ["a", "b"]})
    assert not stamp_holds(stamp, report, {"nodes": ["a"]})
    assert not stamp_holds(None, report, {"nodes": ["a", "b"]})
    assert not stamp_holds(stamp, None, {"nodes": ["a", "b"]})
