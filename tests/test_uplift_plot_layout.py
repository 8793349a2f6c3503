"""The uplift plot: its legend covers no bar, and the error bars have width (issue 26's seed layout).

The issue saw the legend over the c1 bar and error caps of zero width (no interval reached the
plot). Measured on the drawn figure: the legend's box against every bar's box, and the whisker
of every bar against its decision's interval.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_p2p.report.summary_types import Summary

pytest.importorskip("matplotlib")

# the seed's four points (+9.0 % .. +13.9 %), as a campaign's decisions at one level, threshold +5 %
SEED = [(1, 0.090, 0.041, 0.139), (2, 0.126, 0.087, 0.165), (4, 0.139, 0.101, 0.177), (8, 0.139, 0.112, 0.166)]
LEVEL = [(c, 0.139, 0.101, 0.177) for c in (1, 2, 4, 8)]  # bars of one height: no free corner for the legend

Entry = tuple[int, float, float, float]


def _summary(entries: list[Entry]) -> Summary:
    return {"rig": "seed", "pair": {"key": "gpu1-gpu2"}, "run_id": "seed-000", "status": "complete", "kind": "model",
            "uplift": [{"point": f"c{c}", "faster_arm": "p2p_on", "slower_arm": "p2p_off", "estimate": est,
                        "interval": [lo, hi], "level": 0.98, "threshold": 0.05, "outcome": "pass", "passed": True}
                       for c, est, lo, hi in entries]}


@pytest.mark.parametrize("entries", [SEED, LEVEL], ids=["seed", "level"])
def test_the_legend_covers_no_bar_and_every_bar_has_its_interval(entries: list[Entry], tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_p2p.report import plots

    kept = {}

    def keep(fig, path):  # type: ignore[no-untyped-def]  # the figure as _save lays it out, not closed
        fig.tight_layout(rect=(0, 0.03, 1, 1))
        fig.canvas.draw()
        kept["fig"] = fig
        return path

    monkeypatch.setattr(plots, "_save", keep)
    plots._uplift_plot(_summary(entries), tmp_path / "uplift.png", "output-throughput uplift")
    fig = kept["fig"]
    ax = fig.axes[0]
    renderer = fig.canvas.get_renderer()
    legend = ax.get_legend().get_window_extent(renderer)
    bars = [p.get_window_extent(renderer) for p in ax.patches]
    assert len(bars) == 4 and not any(legend.overlaps(b) for b in bars)
    from matplotlib.container import ErrorbarContainer

    (errorbar,) = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    whiskers = errorbar.lines[2][0].get_segments()
    spans = sorted((round(float(s[0][1]), 6), round(float(s[1][1]), 6)) for s in whiskers)
    assert spans == sorted((round(lo * 100, 6), round(hi * 100, 6)) for _c, _e, lo, hi in entries)
