"""The report's charts keep every run's label apart however many runs a scenario has: a default run's nine (each
mode beside its floor) and a sweep's (each of them once per concurrency, and per body path), measured with
matplotlib's own geometry on the figures as they are saved. How the page shows them: test_pages_in_chromium.py."""

import pytest

from eppkit.compare import charts, output
from tests.support.report_samples import many_modes

pytestmark = pytest.mark.unit

SHAPES = {"nine runs": {}, "a sweep": {"concurrencies": (1, 8, 32)},
          "a sweep with body paths": {"concurrencies": (1, 8, 32), "body_paths": ("streamed", "buffered")}}


@pytest.fixture
def saved(monkeypatch) -> dict:
    """Every figure the charts save, by file name, laid out as saved."""
    figures = {}
    save = charts._save

    def keep(fig, stem):
        figures[stem.name] = fig
        return save(fig, stem)

    monkeypatch.setattr(charts, "_save", keep)
    return figures


def tick_labels(fig) -> list[tuple[str, object]]:
    """Each tick label the figure's panels draw (those within their axes' limits): (its text, its box)."""
    fig.canvas.draw()
    out = []
    for ax in (ax for ax in fig.axes if ax.get_visible()):
        for axis, along in ((ax.xaxis, 0), (ax.yaxis, 1)):
            low, high = sorted(axis.get_view_interval())
            out += [(t.get_text(), t.get_window_extent()) for t in axis.get_ticklabels()
                    if t.get_visible() and t.get_text() and low <= t.get_position()[along] <= high]
    return out


@pytest.mark.parametrize("shape", SHAPES)
def test_no_two_labels_of_a_chart_touch_and_each_is_on_the_figure(shape, saved, tmp_path):
    report = many_modes(**SHAPES[shape])
    runs = list(report["scenarios"]["chat"]["modes"])
    output.write(report, tmp_path)
    assert {"latency-chat", "steps-chat"} <= set(saved)
    for name, fig in saved.items():
        labels = tick_labels(fig)
        for i, (text, box) in enumerate(labels):
            assert fig.bbox.contains(box.x0, box.y0) and fig.bbox.contains(box.x1, box.y1), f"{name}: {text!r} cut"
            for other, theirs in labels[i + 1:]:
                assert not box.overlaps(theirs), f"{name}: {text!r} touches {other!r}"
    for ax in saved["latency-chat"].axes:
        assert [t.get_text().split("\n")[0] for t in ax.get_xticklabels()] == runs, "each run's box, in each panel"


def test_a_few_runs_keep_their_labels_level_and_their_panels_in_one_row(saved, tmp_path):
    block = many_modes()["scenarios"]["chat"]
    block["modes"] = {m: r for m, r in block["modes"].items() if m in ("direct", "ext_proc", "floor-ext_proc")}
    charts.latency_chart(block, tmp_path / "latency", "three runs")
    fig = saved["latency"]
    assert [ax.get_subplotspec().get_geometry()[:2] for ax in fig.axes] == [(1, 3)] * 3
    assert {t.get_rotation() for ax in fig.axes for t in ax.get_xticklabels()} == {0}
    assert fig.get_size_inches()[0] == pytest.approx(3 * charts.PANEL_IN)
