"""The stored history (issue 29): change points and trends, baseline health, safe acceptance, both stores."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest
from store_pg import pg_fixture, store_target_fixture  # noqa: F401 - fixtures
from synthetic_runs import write_run

from pytest_p2p.plugin.verdict import BaselineSession
from pytest_p2p.stats.changepoint import MAX_RUNS, MIN_RUNS_SCAN, STEP, TAIL, TAIL_P, TREND, contrasts, scan, tail_p
from pytest_p2p.verdict.baseline_cli import main as baseline_main
from pytest_p2p.verdict.campaign_judge import compare_campaign
from pytest_p2p.verdict.compare import REGRESSION
from pytest_p2p.verdict.config import BaselineConfig
from pytest_p2p.verdict.history import AUTO_NOTE, HISTORY_ALPHA, Night, health, judge_series
from pytest_p2p.verdict.store import Store


def _noise(n: int, seed: int, sd: float = 0.011) -> list[float]:
    r = random.Random(seed)
    return [r.gauss(0.0, sd) for _ in range(n)]


def _nights(ys: list[float], accepted: set[int] = frozenset(), person: set[int] = frozenset()) -> list[Night]:
    return [Night(f"r{i:02d}", f"2026-01-{i + 1:02d}", math.exp(y), y, i in accepted | person, i in person, {})
            for i, y in enumerate(ys)]


# -- the scan ------------------------------------------------------------------------------
def test_scan_finds_a_step_where_it_is() -> None:
    ys = _noise(26, 1)
    ys[20:] = [y + math.log1p(-0.08) for y in ys[20:]]
    got = scan(ys)
    assert got is not None and got.kind == STEP and got.at == 20 and got.p_value < HISTORY_ALPHA
    assert -0.10 < got.size < -0.06


def test_scan_reports_a_creep_as_a_trend_with_its_slope() -> None:
    ys = _noise(20, 2) + [y - 0.003 * (i + 1) for i, y in enumerate(_noise(15, 3))]
    got = scan(ys)
    assert got is not None and got.kind == TREND and got.p_value < HISTORY_ALPHA
    assert got.slope is not None and got.slope_ci is not None
    assert got.slope_ci[0] < -0.003 < got.slope_ci[1] and 16 <= got.at <= 22


def test_scan_of_an_unchanged_history_is_not_significant_and_an_improvement_is_not_adverse() -> None:
    got = scan(_noise(30, 4))
    assert got is not None and got.p_value > 0.01
    up = _noise(25, 5)
    up[15:] = [y + 0.08 for y in up[15:]]
    adverse = scan(up)
    assert adverse is not None and adverse.p_value > 0.01
    better = scan(up, adverse=False)
    assert better is not None and better.at == 15 and better.p_value < HISTORY_ALPHA


def test_scan_needs_enough_runs_and_keeps_indices_of_long_histories() -> None:
    assert scan(_noise(MIN_RUNS_SCAN - 1, 6)) is None
    ys = _noise(MAX_RUNS + 10, 7)
    ys[45:] = [y - 0.1 for y in ys[45:]]
    got = scan(ys)
    assert got is not None and got.at == 45 and got.runs == MAX_RUNS


def test_table_covers_every_length_and_is_ordered() -> None:
    for n in range(MIN_RUNS_SCAN, MAX_RUNS + 1):
        row = TAIL[n]
        assert len(row) == len(TAIL_P) and list(row) == sorted(row, reverse=True)
        ps = [tail_p(n, w)[0] for w in (row[-1] + 1e-6, (row[3] + row[4]) / 2, row[0] - 1e-6)]
        assert ps == sorted(ps, reverse=True)


def test_table_tail_matches_a_fresh_simulation_of_the_null() -> None:
    """The tabulated 5 % point, checked against 3000 independent normal histories (pure Python)."""
    n, r = 12, random.Random(29)
    cons = contrasts(n)
    w5 = TAIL[n][TAIL_P.index(0.05)]
    hits = 0
    for _ in range(3000):
        y = [r.gauss(0, 1) for _ in range(n)]
        m = sum(y) / n
        yc = [v - m for v in y]
        root = math.sqrt(sum(v * v for v in yc))
        w = max(-sum(a * b for a, b in zip(c.u, yc, strict=True)) / root for c in cons)
        hits += w >= w5
    assert 0.035 < hits / 3000 < 0.065


# -- health and acknowledgement -------------------------------------------------------------
def test_health_flags_one_regressed_accepted_run_and_a_baseline_that_is_a_step_down() -> None:
    ys = _noise(30, 8)
    assert health(_nights(ys, accepted=set(range(20, 30))), depth=10).ok
    one = list(ys)
    one[24] += math.log1p(-0.08)
    h = health(_nights(one, accepted=set(range(20, 30))), depth=10)
    assert not h.ok and "r24" in h.problems[0]
    block = ys[:20] + [y + math.log1p(-0.08) for y in ys[20:]]
    h = health(_nights(block, accepted=set(range(20, 30))), depth=10)
    assert not h.ok and h.step is not None and -0.1 < h.step < -0.06 and "step" in h.problems[-1]


def test_a_change_is_acknowledged_only_by_a_person_accepting_a_run_after_it() -> None:
    ys = _noise(26, 9)
    ys[20:] = [y - 0.08 for y in ys[20:]]
    auto = judge_series("p2p_on", "c8", "output_throughput", True, _nights(ys, accepted={21, 22}))
    assert auto.failing and "night 21" in auto.failure_text()
    before = judge_series("p2p_on", "c8", "output_throughput", True, _nights(ys, person={5}))
    assert before.failing
    after = judge_series("p2p_on", "c8", "output_throughput", True, _nights(ys, person={22}))
    assert after.check is not None and not after.failing


# -- a store of real results directories, on SQLite and PostgreSQL -----------------------------
def _fill(root: Path, target: str, n: int, *, drop_from: int | None = None, accept: bool = True) -> list[Path]:
    dirs = []
    with Store(target) as st:
        for i in range(n):
            scale = {"output_throughput": 0.92} if drop_from is not None and i >= drop_from else None
            d = write_run(root, f"2026{i // 28 + 1:02d}{i % 28 + 1:02d}-030000_rig_p", seed=i, cv=0.01, reps=4,
                          started_at=f"2026-{i // 28 + 1:02d}-{i % 28 + 1:02d}T03:00:00Z", scale=scale)
            st.save_run_dir(d, accept="accepted" if accept and (drop_from is None or i < drop_from) else None)
            dirs.append(d)
    return dirs


def test_a_step_in_the_stored_history_fails_the_check_naming_the_night(tmp_path: Path, store_target: str) -> None:
    _fill(tmp_path, store_target, 24, drop_from=20)
    cur = write_run(tmp_path, "20260301-030000_rig_p", seed=99, cv=0.01, reps=4,
                    started_at="2026-03-01T03:00:00Z", scale={"output_throughput": 0.92})
    with Store(store_target, create=False) as st:
        camp = compare_campaign(st, cur, BaselineConfig())
    sc = camp.scenarios[("p2p_on", "c8")]
    assert sc.verdict == REGRESSION
    assert sc.history_failures and "step" in sc.history_failures[0] and "night 21" in sc.history_failures[0]
    assert "night 21" in sc.message


def test_nights_on_other_gpus_in_the_same_slots_neither_hide_a_step_nor_make_one(
        tmp_path: Path, store_target: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A runner handed 5060 Tis and H200s on alternate nights at the same bus ids (cloud VMs: the same virtual
    slots, 2026-11-27). The 5060 Tis lose 8 % from their 7th night on: their own series shows the step, where
    the H200 nights (50 % faster) between them would have hidden it; and the H200s' series shows none."""
    h200 = ("NVIDIA H200", "NVIDIA H200")
    with Store(store_target) as st:
        for i in range(24):
            kw: dict[str, object] = ({"gpu_names": h200, "scale": {"output_throughput": 1.5}} if i % 2 else
                                     {"scale": {"output_throughput": 0.92}} if i >= 12 else {})
            d = write_run(tmp_path, f"202601{i + 1:02d}-030000_rig_p", seed=i, cv=0.01, reps=4,
                          started_at=f"2026-01-{i + 1:02d}T03:00:00Z", **kw)  # type: ignore[arg-type]
            # a person accepts the first night on each model (the first on new GPUs waits for one)
            st.save_run_dir(d, accept="accepted" if i in (0, 1) else None)
    cur = write_run(tmp_path, "20260201-030000_rig_p", seed=99, cv=0.01, reps=4, started_at="2026-02-01T03:00:00Z",
                    scale={"output_throughput": 0.92})
    with Store(store_target, create=False) as st:
        camp = compare_campaign(st, cur, BaselineConfig())
    sc = camp.scenarios[("p2p_on", "c8")]
    assert sc.baseline_runs == ["20260101-030000_rig_p"], sc.baseline_runs
    assert [len(rep.nights) for rep in sc.history.values()] == [13]  # the twelve 5060 Ti nights and tonight
    assert sc.history_failures and "step" in sc.history_failures[0], sc.history_failures
    # the CLI's series are those of each pair's newest run: the H200 nights alone, unchanged
    assert baseline_main(["--db", store_target, "history", "--metric", "output_throughput"]) == 0
    out = capsys.readouterr().out
    assert "(12 runs, baseline 'accepted')" in out and "FAILS" not in out


def test_baseline_history_cli_lists_runs_and_the_change(tmp_path: Path, store_target: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    _fill(tmp_path, store_target, 24, drop_from=20)
    rc = baseline_main(["--db", store_target, "history", "--metric", "output_throughput"])
    out = capsys.readouterr().out
    assert rc == 1 and "step" in out and "FAILS the check" in out and " 24  " in out


def _session(pytestconfig: pytest.Config, target: str) -> BaselineSession:
    sess = BaselineSession(pytestconfig, None, "accepted", "regression", _config=BaselineConfig(db=target))
    sess._db_path = None
    return sess


def test_safe_acceptance_bootstraps_passes_and_refuses(tmp_path: Path, pytestconfig: pytest.Config) -> None:
    target = str(tmp_path / "h.db")
    sess = _session(pytestconfig, target)
    first = write_run(tmp_path, "20260101-030000_rig_p", seed=0, cv=0.01, reps=4, started_at="2026-01-01T03:00:00Z")
    with Store(target) as st:
        ok, why = sess.acceptance(st, first)
    assert ok and "bootstrap" in why
    _fill(tmp_path / "h", target, 12)
    same = write_run(tmp_path, "20260401-030000_rig_p", seed=50, cv=0.01, reps=4, started_at="2026-04-01T03:00:00Z")
    bad = write_run(tmp_path, "20260402-030000_rig_p", seed=51, cv=0.01, reps=4, started_at="2026-04-02T03:00:00Z",
                    scale={"output_throughput": 0.92})
    with Store(target) as st:
        assert sess.acceptance(st, same)[0]
        ok, why = sess.acceptance(st, bad)
    assert not ok and "regression" in why


def test_save_runs_never_accepts_a_regressed_run_and_notes_auto_acceptances(tmp_path: Path,
                                                                            pytestconfig: pytest.Config) -> None:
    target = str(tmp_path / "h.db")
    _fill(tmp_path / "h", target, 12)
    sess = _session(pytestconfig, target)
    good = write_run(tmp_path, "20260401-030000_rig_p", seed=50, cv=0.01, reps=4, started_at="2026-04-01T03:00:00Z")
    bad = write_run(tmp_path, "20260402-030000_rig_p", seed=51, cv=0.01, reps=4, started_at="2026-04-02T03:00:00Z",
                    scale={"output_throughput": 0.92})
    sess.run_dirs = {str(good): good, str(bad): bad}
    assert len(sess.save_runs()) == 2
    sess.close()
    with Store(target) as st:
        notes = st.acceptances("accepted", [good.name, bad.name])
    assert set(notes) == {good.name} and (notes[good.name] or "").startswith(AUTO_NOTE)
    assert len(sess.save_notes) == 1 and bad.name in sess.save_notes[0] and "baseline accept" in sess.save_notes[0]


def test_history_plot_marks_the_step_for_each_point_of_the_run(tmp_path: Path, store_target: str) -> None:
    """``plots/history_<metric>_<point>.png`` from the store (SQLite or PostgreSQL alike), the step marked."""
    pytest.importorskip("matplotlib")
    from pytest_p2p.report.trend import history, marks, write_history_plots

    dirs = _fill(tmp_path, store_target, 24, drop_from=20)
    written = write_history_plots(dirs[-1], store_target)
    assert written and all(p.read_bytes().startswith(b"\x89PNG") for p in written)
    assert {p.name for p in written} >= {"history_output_throughput_c8.png"}
    got = marks(history(store_target, "demo-rig", "gpu1-gpu2", "c8", "output_throughput"), "output_throughput")
    assert any("step" in label for _, _, label in got), got  # the drop from night 21 is what the plot marks


def _cloud_nights(root: Path, target: str, n: int, creep_from: int, creep: float) -> list[Path]:
    """``n`` nights on fresh machines: both arms move together by 2.5 % from night to night, each arm by 0.4 % of
    its own; from night ``creep_from`` on, P2P on alone loses ``creep`` a night (an interconnect slowly degrading).
    The first 8 nights are accepted by a person, later ones by the nightly recipe (``auto:``)."""
    rng = random.Random(2026)
    dirs = []
    with Store(target) as st:
        for i in range(n):
            machine = math.exp(rng.gauss(0.0, 0.025))
            drift = math.exp(math.log1p(-creep) * max(0, i + 1 - creep_from))
            arm_scale = {"p2p_on": drift * math.exp(rng.gauss(0.0, 0.004)), "p2p_off": math.exp(rng.gauss(0.0, 0.004))}
            d = write_run(root, f"2026{i // 28 + 1:02d}{i % 28 + 1:02d}-030000_rig_p", seed=i, cv=0.01, reps=16,
                          started_at=f"2026-{i // 28 + 1:02d}-{i % 28 + 1:02d}T03:00:00Z",
                          scale={"output_throughput": machine}, arm_scale=arm_scale)
            rid = st.save_run_dir(d, accept="accepted" if i < 8 else None)
            if i >= 8:
                st.accept(rid, "accepted", f"{AUTO_NOTE} passed against 8 baseline run(s)")
            dirs.append(d)
    return dirs


def test_a_creep_of_the_uplift_alone_fails_its_history_where_the_arms_move_together(
        tmp_path: Path, store_target: str, pytestconfig: pytest.Config, capsys: pytest.CaptureFixture[str]) -> None:
    """A cloud runner's nights spread 2.5 % in both arms at once (the 7B chain on 2x H200: 2.2-2.5 %, the on/off
    ratio 0.7 %). P2P on losing 0.5 % a night from night 12 on is lost in the absolute series, whose scan does not
    flag it; the uplift's series (``ratio_nights``) is as quiet as the ratio and does. The uplift check then fails,
    naming the trend, the recipe refuses to accept the night, and ``baseline history`` shows the uplift's series."""
    _cloud_nights(tmp_path / "h", store_target, 23, creep_from=12, creep=0.005)
    rng = random.Random(99)
    cur = write_run(tmp_path, "20260301-030000_rig_p", seed=99, cv=0.01, reps=16, started_at="2026-03-01T03:00:00Z",
                    scale={"output_throughput": math.exp(rng.gauss(0.0, 0.025))},
                    arm_scale={"p2p_on": math.exp(13 * math.log1p(-0.005))})
    with Store(store_target, create=False) as st:
        camp = compare_campaign(st, cur, BaselineConfig())
    on = camp.scenarios[("p2p_on", "c8")]
    assert not on.history_failures, on.history_failures  # the absolute series: within its nights' spread
    up = camp.uplifts["c8"]["output_throughput"]
    assert up.verdict == REGRESSION, up.reason
    assert camp.uplift_history_failures and "uplift(output_throughput) c8 p2p_on/p2p_off" in \
        camp.uplift_history_failures[0], camp.uplift_history_failures
    assert "trend" in camp.uplift_history_failures[0] or "step" in camp.uplift_history_failures[0]
    verdict, text = camp.uplift_verdict("c8")
    assert verdict == REGRESSION and "its history:" in text
    if not store_target.startswith("postgresql"):
        sess = _session(pytestconfig, store_target)
        with Store(store_target) as st:
            ok, why = sess.acceptance(st, cur)
        assert not ok and "adverse change" in why and "uplift(output_throughput)" in why, why
    assert baseline_main(["--db", store_target, "history", "--metric", "output_throughput"]) == 1
    out = capsys.readouterr().out
    assert "uplift(output_throughput) c8 p2p_on/p2p_off (23 runs" in out and "FAILS the check" in out


def test_the_uplift_series_pairs_the_arms_by_run_and_keeps_tonight_last() -> None:
    from pytest_p2p.verdict.history import ratio_nights

    on = _nights([0.10, 0.12, 0.11], accepted={0})
    off = _nights([0.0, 0.02, 0.05])
    off = [off[0], off[2]]  # the second run has no P2P off value
    tonight = Night("tonight", "2026-03-01", 1.0, 0.2, False, False, {}, current=True)
    got = ratio_nights([*on, tonight], [*off, Night("tonight", "2026-03-01", 1.0, 0.05, False, False, {}, True)])
    assert [n.run_id for n in got] == [on[0].run_id, on[2].run_id, "tonight"]
    assert [round(n.good, 6) for n in got] == [0.1, 0.06, 0.15]
    assert got[0].accepted and got[-1].current and round(got[-1].value, 6) == round(math.exp(0.15), 6)
