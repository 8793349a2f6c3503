"""The declarative rig schema reads every rig as the hand-written validators did (recorded on main before it).

The oracle (tests/config_oracle.py, tests/data/config_oracle/) holds what the old validators made of the
bundled rigs, of every rig the test suite parsed, and of random ``campaign:`` sections. Valid input must give
the same config objects, field for field and type for type. Invalid input must give the same error; where a
section holds several bad keys the schema reads its keys in field order, so the error may name another of
them -- then it must be exactly the error that key alone gave on main (same file, field path and value).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from config_oracle import DATA, POOL, ROOT, SOURCE, decode, encode, expand, normal, outcome, rooted
from hypothesis import given, settings
from hypothesis import strategies as st
from rig_reference import current, generated

from pytest_p2p.campaign.config import CampaignConfig, parse_campaign
from pytest_p2p.errors import ConfigError
from pytest_p2p.plugin.rig import content_digest, load_rig, parse_rig
from pytest_p2p.schema import rig_keys
from pytest_p2p.validate import yaml_document

BUNDLED: dict[str, Any] = json.loads((DATA / "bundled_rigs.json").read_text())
SUITE: dict[str, Any] = json.loads((DATA / "suite_rigs.json").read_text())
CAMPAIGN: dict[str, Any] = json.loads((DATA / "campaign_sections.json").read_text())
#: what main made of each pool value alone (``{key: value}``), keyed by the encoded pair
ALONE: dict[str, Any] = {json.dumps(c["input"], sort_keys=True): expand(c["outcome"], CAMPAIGN["base"])
                         for c in CAMPAIGN["cases"] if len(c["input"]["__map__"]) == 1}
#: errors that come from rules across keys (raised after every key is read, in the old code and the new)
CROSS_FIELD = ("is below reps", "is below starts", "needs reps >= 2", "has no known direction", "min_uplift",
               "start_mode parallel needs residency", "launch(es), at least 3 are needed",
               "needs residency resident or auto, got residency")


def _alone(key: str, value: object) -> Any:
    return ALONE[json.dumps(encode({key: value}), sort_keys=True)]


def _error_of_one_key(section: dict[str, object], message: str) -> bool:
    """``message`` is the error one key of ``section`` gave on main when it stood alone."""
    return any(_alone(k, v) == {"error": message} for k, v in section.items())


def test_every_pool_value_alone_was_recorded() -> None:
    missing = [(k, v) for k, vals in POOL.items() for v in vals
               if json.dumps(encode({k: v}), sort_keys=True) not in ALONE]
    assert not missing and set(POOL) == set(rig_keys(CampaignConfig)), missing


def _as_recorded(got: Any, data: object) -> Any:
    """The oracle names a rig by its file's bytes (``digest``). A rig is now named by what it says
    (``content_digest``: a comment edit is no new rig file), and the bytes' digest moved to ``file_digest``:
    check the one, then put the other back where the oracle has it."""
    ok = got.get("ok") if isinstance(got, dict) else None
    if isinstance(ok, dict) and ok.get("__type__") == "Rig":
        assert ok["digest"] == content_digest({} if data is None else data)  # an empty file is an empty rig
        ok["digest"] = ok.pop("file_digest")
    return got


@pytest.mark.parametrize("path", sorted(BUNDLED))
def test_bundled_rigs_give_the_recorded_config(path: str) -> None:
    data = yaml_document((ROOT / path).read_text(encoding="utf-8"), path)
    assert _as_recorded(rooted(outcome(load_rig, ROOT / path)), data) == BUNDLED[path]


def test_a_comment_or_the_order_of_keys_is_no_new_rig_file(tmp_path: Any) -> None:
    """The committed 7B rig's comment quoting a night moved its digest, and with it the rig's identity: the next
    night's baseline comparison would have named "rig file" as a cause, and the chain of nights lending their start
    spread started over. What the file says is the identity now; its bytes' digest stays, for runs saved before."""
    text = (ROOT / "fixtures" / "rigs" / "nvlink-pair-vllm-7b.yaml").read_text(encoding="utf-8")
    edited = tmp_path / "edited.yaml"
    edited.write_text("# a note on tonight's run\n" + text.replace("rig: nvlink-pair-vllm-7b\n", "") +
                      "rig: nvlink-pair-vllm-7b\n", encoding="utf-8")
    a, b = load_rig(ROOT / "fixtures" / "rigs" / "nvlink-pair-vllm-7b.yaml"), load_rig(edited)
    assert a.digest == b.digest and a.file_digest != b.file_digest
    changed = tmp_path / "changed.yaml"
    changed.write_text(text.replace("window_s: 6.5 ", "window_s: 7 "), encoding="utf-8")
    assert load_rig(changed).digest != a.digest  # what it says changed: another rig file


def test_rigs_the_suite_parses_give_the_recorded_config_or_error() -> None:
    differ = []
    for case in SUITE["cases"]:
        data, source, name = case["input"]
        want = expand(case["outcome"], SUITE["base"])
        got = _as_recorded(outcome(parse_rig, data, source, None, name), data)
        if got != want:
            differ.append((data, want, got))
    assert not differ, differ[:3]
    assert sum("error" not in c["outcome"] for c in SUITE["cases"]) >= 50  # valid rigs, not only errors


def test_campaign_sections_give_the_recorded_config_or_error() -> None:
    reordered = 0
    for case in CAMPAIGN["cases"]:
        section = decode(case["input"])
        assert isinstance(section, dict)
        want = expand(case["outcome"], CAMPAIGN["base"])
        got = outcome(parse_campaign, section, SOURCE, "campaign")
        if got == want:
            continue
        assert "error" in want and "error" in got, (section, want, got)
        assert _error_of_one_key(section, got["error"]), (section, want, got)
        reordered += 1
    assert reordered < len(CAMPAIGN["cases"]) // 10  # most sections with several bad keys name the same one


sections = st.sets(st.sampled_from(sorted(POOL)), max_size=12).flatmap(
    lambda keys: st.fixed_dictionaries({k: st.sampled_from(POOL[k]) for k in sorted(keys)}))


@settings(max_examples=300, deadline=None, derandomize=True)
@given(sections)
def test_random_campaign_sections_read_each_key_as_it_reads_alone(section: dict[str, object]) -> None:
    """Any mix of keys: a config whose every key holds what that key alone gave on main, or the error of one
    bad key alone, or -- every key being fine alone -- an error of a rule across keys."""
    try:
        cfg = parse_campaign(section, SOURCE, "campaign")
    except ConfigError as exc:
        message = str(exc)
        assert message.startswith(f"{SOURCE}: campaign"), message
        bad_alone = [k for k, v in section.items() if "error" in _alone(k, v)
                     and not any(rule in _alone(k, v)["error"] for rule in CROSS_FIELD)]
        if bad_alone:
            assert _error_of_one_key(section, message), (section, message)
        else:
            assert any(rule in message for rule in CROSS_FIELD), (section, message)
        return
    got = normal(cfg)
    assert isinstance(got, dict)
    assert got["explicit"] == normal(frozenset(section))
    fields = rig_keys(CampaignConfig)
    for k, v in section.items():
        alone = _alone(k, v)
        if "ok" in alone:
            attr = fields[k].name
            assert got[attr] == alone["ok"][attr], (k, v)
        else:  # fine here, refused alone only by a rule across keys (max_reps below the default reps)
            assert any(rule in alone["error"] for rule in CROSS_FIELD), (k, v, alone)


def test_the_key_reference_in_the_docs_is_generated_from_the_schema() -> None:
    assert current() == generated(), "docs/rig-file.md's key reference is stale: run python tests/rig_reference.py"
