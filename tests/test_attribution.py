from __future__ import annotations

from synthetic_runs import baseline_runs, write_run

from pytest_p2p.verdict.attribution import explain, fingerprint_changes
from pytest_p2p.verdict.campaign_judge import compare_scenario
from pytest_p2p.verdict.compare import REGRESSION
from pytest_p2p.verdict.config import BaselineConfig
from pytest_p2p.verdict.fingerprint import build_fingerprint
from pytest_p2p.verdict.store import Store


def test_cable_downtrain_is_flagged_with_the_link_first(tmp_path):
    st = Store(tmp_path / "h.db")
    for d in baseline_runs(tmp_path / "base"):
        st.accept(st.save_run_dir(d), "accepted")
    cur = write_run(tmp_path / "cur", "now", started_at="2026-06-25T10:00:00Z", seed=1, gen=(4, 3),
                    nccl="2.28.9", scale={"output_throughput": 0.89})
    r = compare_scenario(st, cur, "p2p_on", "c8", BaselineConfig())
    assert r.verdict == REGRESSION
    msg = r.message
    assert msg.startswith("output_throughput c8 p2p_on ")
    assert "GPU 2 (0000:0A:00.0) link under load Gen4 x4 -> Gen3 x4 since baseline 2026-06-19" in msg
    assert "driver 595.71.05 unchanged" in msg
    assert msg.index("link under load") < msg.index("driver 595.71.05 unchanged")
    st.close()


def test_ranking_puts_links_before_versions_before_kernel(tmp_path):
    a = build_fingerprint(write_run(tmp_path, "a"))
    b_dir = write_run(tmp_path, "b", gen=(3, 4), driver="600.1", throttled={"p2p_on-c8": [1, 3]})
    (b_dir / "env" / "kernel_cmdline.txt").write_text("BOOT_IMAGE=/vmlinuz iommu=on\n")
    b = build_fingerprint(b_dir)
    changes = fingerprint_changes(a, b, arm="p2p_on", scenario="p2p_on-c8")
    ranks = [c.rank for c in changes]
    assert ranks == sorted(ranks)
    texts = [c.text for c in changes]
    assert texts[0].startswith("GPU 1 (0000:09:00.0) link under load Gen4 x4 -> Gen3 x4")
    assert any(t.startswith("driver 595.71.05 -> 600.1") for t in texts)
    assert "throttling during the run: reps [1, 3]" in texts
    assert any(t.startswith("kernel command line") for t in texts)
    assert texts.index("throttling during the run: reps [1, 3]") > 1


def test_other_arms_are_left_out_and_env_changes_named(tmp_path):
    a = build_fingerprint(write_run(tmp_path, "a"))
    arms = {"p2p_on": {"env": {"NCCL_P2P_DISABLE": "0", "NCCL_P2P_LEVEL": "LOC"}, "expect_transport": "P2P/CUMEM",
                       "custom_all_reduce": True},
            "p2p_off": {"env": {"NCCL_P2P_DISABLE": "1", "X": "1"}, "expect_transport": "SHM",
                        "custom_all_reduce": False}}
    b = build_fingerprint(write_run(tmp_path, "b", arms=arms, transport={"p2p_on": "SHM"}))
    texts = [c.text for c in fingerprint_changes(a, b, arm="p2p_on")]
    assert "arm p2p_on NCCL transport P2P/CUMEM -> SHM" in texts
    assert "arm p2p_on env.NCCL_P2P_LEVEL unset -> LOC" in texts
    assert not any("p2p_off" in t for t in texts)


def test_no_change_says_so(tmp_path):
    a = build_fingerprint(write_run(tmp_path, "a"))
    text = explain("x dropped", a, a)
    assert "no fingerprint change" in text and "driver 595.71.05 unchanged" in text


def test_a_replaced_gpu_is_named_by_its_slot_model_and_uuid(tmp_path):
    a = build_fingerprint(write_run(tmp_path, "a"))
    b = build_fingerprint(write_run(tmp_path, "b", uuids=("GPU-aaaaaaaa-0000-0000-0000-000000000001",
                                                          "GPU-bbbbbbbb-0000-0000-0000-000000000009")))
    c = build_fingerprint(write_run(tmp_path, "c", gpu_names=("NVIDIA GeForce RTX 5060 Ti", "NVIDIA GeForce RTX 5070")))
    texts = [ch.text for ch in fingerprint_changes(a, b)]
    assert ("GPU 0000:0A:00.0 NVIDIA GeForce RTX 5060 Ti GPU-aaaaaaaa -> NVIDIA GeForce RTX 5060 Ti GPU-bbbbbbbb "
            "(a GPU replaced)") in texts, texts
    assert not any("0000:09:00.0" in t for t in texts if t.startswith("GPU 0000"))  # the other slot is unchanged
    assert any(t.startswith("GPU 0000:0A:00.0 NVIDIA GeForce RTX 5060 Ti GPU-aaaaaaaa -> NVIDIA GeForce RTX 5070 "
                            "GPU-aaaaaaaa") and t.endswith("(other GPU model)") for t in
               (ch.text for ch in fingerprint_changes(a, c))), [ch.text for ch in fingerprint_changes(a, c)]


def test_a_rig_file_is_a_cause_when_what_it_says_changed_not_its_comments(tmp_path):
    """A run names its rig file by what it says (``rig_digest``) and by its bytes (``rig_file_digest``); runs saved
    before had only the bytes' digest, in ``rig_digest``. A comment edit is no cause; a changed setting is, and a
    baseline saved before is read against tonight's file as it was."""
    from pytest_p2p.results.write import RunDir

    def run(name, **digests):
        path = write_run(tmp_path, name)
        RunDir(path).write_run_meta(digests)
        return build_fingerprint(path)

    old = run("saved-before", rig_digest="bytes1")
    same_file = run("same-file", rig_digest="says1", rig_file_digest="bytes1")
    comment_moved = run("comment", rig_digest="says1", rig_file_digest="bytes2")
    setting_changed = run("setting", rig_digest="says2", rig_file_digest="bytes3")

    def causes(base, cur):
        return [c.text for c in fingerprint_changes(base, cur)]

    assert causes(old, same_file) == [] and causes(same_file, comment_moved) == []
    assert causes(old, comment_moved) == ["rig file bytes1 -> says1"]  # the file as it was then is not known
    assert causes(comment_moved, setting_changed) == ["rig file says1 -> says2"]
