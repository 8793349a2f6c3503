"""The seed report's proof sections, from our results directory or from a p2p-bench one.

A rig owner who knows the seed report looks for four things next to the results table:
what was served and with which stack (model, server arguments, NCCL, driver); which
transport each arm really used, with the NCCL lines that show it; the probes (all-reduce
bus bandwidth and latency, the P2P copy on/off, e.g. the seed's 18.08 µs -> 0.42 µs);
and the telemetry (temperatures, utilisation, peak power per card, memory, SM clock and
the PCIe generation/width seen across every sample). :func:`proof_for_run` and
:func:`proof_for_seed` gather them into one :class:`Proof`; :func:`proof_markdown` and
:func:`proof_text` print them. Each section says what is absent instead of leaving it out.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from pytest_p2p.jsontypes import as_dict
from pytest_p2p.report import terminal
from pytest_p2p.results.layout import PROOF
from pytest_p2p.results.read import optional_object, read_object, rep_files, run_meta
from pytest_p2p.seedlayout import SeedRun

MAX_QUOTED = 3
_CLAIM_FOR = {"P2P": "used_p2p", "SHM": "used_shm", "NET": "used_net"}
_SEED_MARKERS = ("via ", "NCCL_P2P_DISABLE set", "Check P2P Type", "NCCL_CUMEM_ENABLE set")


@dataclass
class Transport:
    arm: str
    expected: str | None
    observed: str | None
    lines: list[str] = field(default_factory=list)  # quoted NCCL lines, "file:line: text"


@dataclass
class Proof:
    """Everything the proof sections print; ``None``/empty means "not in the results"."""

    header: dict[str, str] = field(default_factory=dict)
    transports: list[Transport] = field(default_factory=list)
    probe_headers: list[str] = field(default_factory=list)
    probe_rows: list[list[str]] = field(default_factory=list)
    telemetry_rows: list[list[str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    nccl: dict[str, list[tuple[int, float | None, float | None, float | None]]] = field(default_factory=dict)
    arms: list[str] = field(default_factory=list)  # the campaign's arms, whose probe rows the terminal shows

    def to_dict(self) -> dict[str, object]:
        return {"header": dict(self.header),
                "transports": [{"arm": t.arm, "expected": t.expected, "observed": t.observed, "lines": t.lines}
                               for t in self.transports],
                "probes": {"headers": self.probe_headers, "rows": self.probe_rows},
                "telemetry": {"headers": list(TELEMETRY_HEADERS), "rows": self.telemetry_rows},
                "nccl": {arm: [list(r) for r in rows] for arm, rows in self.nccl.items()},
                "notes": list(self.notes)}


TELEMETRY_HEADERS = ("Scenario", "PCIe seen", "Max temp °C", "Avg temp °C", "Max util %", "Avg util %",
                     "Peak W per card", "Avg W per card", "Max mem MiB", "Max SM MHz", "Samples")


def cell_number(text: object) -> float | None:
    """The finite number a CSV/JSON cell starts with (``"312.5 W"`` -> 312.5), else ``None``."""
    try:
        v = float(str(text).strip().split()[0])
    except (ValueError, IndexError):
        return None
    return v if math.isfinite(v) else None


def _col(row: Mapping[str, str], *names: str) -> float | None:
    """A telemetry value by our column name or nvidia-smi's ``.max``/unit-suffixed variants."""
    for name in names:
        for key in (name, f"{name}.max"):
            if key in row and (v := cell_number(row[key])) is not None:
                return v
    return None


def telemetry_row(name: str, files: Iterable[Path]) -> list[str] | None:
    """One row of the telemetry table over every sample of every file of a scenario."""
    temps: list[float] = []
    utils: list[float] = []
    mems: list[float] = []
    sms: list[float] = []
    power: dict[str, list[float]] = {}
    links: set[str] = set()
    n = 0
    for f in files:
        try:
            with f.open(newline="", encoding="utf-8", errors="replace") as fh:
                for row in csv.DictReader(fh):
                    n += 1
                    for target, names in ((temps, ("temperature.gpu",)), (utils, ("utilization.gpu",)),
                                          (mems, ("memory.used",)), (sms, ("clocks.current.sm", "clocks.sm"))):
                        if (v := _col(row, *names)) is not None:
                            target.append(v)
                    if (w := _col(row, "power.draw")) is not None:
                        power.setdefault(row.get("index") or "?", []).append(w)
                    gen, width = _col(row, "pcie.link.gen.current"), _col(row, "pcie.link.width.current")
                    if gen is not None and width is not None:
                        links.add(f"Gen{gen:.0f} x{width:.0f}")
        except (OSError, csv.Error):
            continue
    if not n:
        return None

    def fmt(vals: list[float], fn: str, digits: int = 0) -> str:
        if not vals:
            return "-"
        v = max(vals) if fn == "max" else sum(vals) / len(vals)
        return f"{v:.{digits}f}"

    peak = max((max(v) for v in power.values() if v), default=None)
    avg_card = [sum(v) / len(v) for v in power.values() if v]
    return [name, ", ".join(sorted(links)) or "-", fmt(temps, "max"), fmt(temps, "avg"), fmt(utils, "max"),
            fmt(utils, "avg"), f"{peak:.0f}" if peak is not None else "-",
            f"{sum(avg_card) / len(avg_card):.0f}" if avg_card else "-", fmt(mems, "max"), fmt(sms, "max"), str(n)]


def _quote_claims(proof: Mapping[str, object], observed: str | None, source: str) -> list[str]:
    claims = proof.get("claims")
    if not isinstance(claims, dict) or not observed:
        return []
    claim = claims.get(_CLAIM_FOR.get(observed.split("/")[0].upper(), ""))
    lines = claim.get("lines") if isinstance(claim, dict) else None
    out = []
    for item in lines if isinstance(lines, list) else []:
        if isinstance(item, list) and len(item) == 2:
            out.append(f"{source}:{item[0]}: {str(item[1]).strip()}")
    # one line per direction/rank reads better than seven channels of the same rank
    seen: set[str] = set()
    picked = []
    for line in out:
        key = line.split(" NCCL INFO ", 1)[0].rsplit(" ", 1)[-1]
        if key not in seen:
            seen.add(key)
            picked.append(line)
    return (picked + [x for x in out if x not in picked])[:MAX_QUOTED]


def _versions_header(run_meta: Mapping[str, object]) -> dict[str, str]:
    out: dict[str, str] = {}
    server = run_meta.get("server") if isinstance(run_meta.get("server"), dict) else {}
    assert isinstance(server, dict)
    if server.get("model"):
        out["model"] = str(server["model"])
    args = server.get("args") if isinstance(server.get("args"), dict) else {}
    flags = server.get("flags") if isinstance(server.get("flags"), list) else []
    assert isinstance(args, dict) and isinstance(flags, list)
    parts = [f"{k}={v}" for k, v in args.items()] + [str(f) for f in flags]
    if parts:
        out["server args"] = " · ".join(parts)
    versions = run_meta.get("versions") if isinstance(run_meta.get("versions"), dict) else {}
    assert isinstance(versions, dict)
    for key, label in (("nccl", "NCCL"), ("driver", "driver"), ("cuda_driver", "CUDA (driver API)"),
                       ("vllm", "vLLM"), ("torch", "torch")):
        if versions.get(key) not in (None, ""):
            out[label] = str(versions[key])
    pair = run_meta.get("pair") if isinstance(run_meta.get("pair"), dict) else {}
    assert isinstance(pair, dict)
    gpus = [g for g in pair.get("gpus") or [] if isinstance(g, dict)]
    if gpus:
        out["GPUs"] = ", ".join(f"GPU{g.get('index')} {g.get('name', '')} {g.get('bus_id', '')}".strip() for g in gpus)
    return out


def _probe_rows(results_root: Path, pair_key: str) -> tuple[list[str], list[list[str]], list[str]]:
    headers = ["Probe", "Arm / mode", "Latency (µs)", "Bandwidth (GB/s)", "Detail"]
    rows: list[list[str]] = []
    notes: list[str] = []
    base = results_root / "probes" / pair_key
    for f in sorted(base.glob("*/allreduce.json")):
        data = optional_object(f) or {}
        raw = data.get("rows")
        table = [r for r in raw if isinstance(r, dict)] if isinstance(raw, list) else []
        if not table:
            continue
        small = min(table, key=lambda r: cell_number(r.get("bytes")) or 0.0)
        big = max(table, key=lambda r: cell_number(r.get("bytes")) or 0.0)
        lat, bw = cell_number(small.get("time_us")), cell_number(big.get("busbw_gbs"))
        rows.append(["all-reduce", f.parent.name, f"{lat:.2f}" if lat is not None else "-",
                     f"{bw:.1f}" if bw is not None else "-",
                     f"latency at {small.get('size', small.get('bytes'))}, "
                     f"busbw at {big.get('size', big.get('bytes'))}"])
    copy = optional_object(base / "p2pcopy.json")
    modes = copy.get("modes") if copy else None
    if isinstance(modes, dict):
        for mode, label in (("host_staged", "P2P off (host-staged)"), ("peer", "P2P on (peer)")):
            m = modes.get(mode)
            if not isinstance(m, dict):
                continue
            lat_d = m.get("latency_us") if isinstance(m.get("latency_us"), dict) else {}
            bw_d = m.get("unidir_gbs") if isinstance(m.get("unidir_gbs"), dict) else {}
            assert isinstance(lat_d, dict) and isinstance(bw_d, dict)
            lats = [v for v in map(cell_number, lat_d.values()) if v is not None]
            bws = [v for v in map(cell_number, bw_d.values()) if v is not None]
            rows.append(["P2P copy", label, f"{max(lats):.2f}" if lats else "-", f"{min(bws):.1f}" if bws else "-",
                         "slower direction"])
    if not rows:
        notes.append(f"no probe results under {base} (run the probe checks in the same --p2p-results root)")
    elif (base / "REPLAYED_FROM").is_file():
        try:
            origin = (base / "REPLAYED_FROM").read_text().strip()
        except OSError:
            origin = "a recording"
        notes.append(f"probe rows are a replay of {origin} (recorded results, not measured in this session)")
    return headers, rows, notes


def nccl_rows(results_root: Path, pair_key: str) -> dict[str, list[tuple[int, float | None, float | None,
                                                                          float | None]]]:
    """Per arm, the all-reduce probe's rows as nccl-tests prints them: (bytes, time us, algbw, busbw)."""
    out: dict[str, list[tuple[int, float | None, float | None, float | None]]] = {}
    for f in sorted((results_root / "probes" / pair_key).glob("*/allreduce.json")):
        raw = (optional_object(f) or {}).get("rows")
        rows = []
        for r in raw if isinstance(raw, list) else []:
            size = cell_number(r.get("bytes")) if isinstance(r, dict) else None
            if isinstance(r, dict) and size is not None:
                rows.append((int(size), cell_number(r.get("time_us")), cell_number(r.get("algbw_gbs")),
                             cell_number(r.get("busbw_gbs"))))
        if rows:
            out[f.parent.name] = sorted(rows)
    return out


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def nccl_table(per_arm: Mapping[str, list[tuple[int, float | None, float | None, float | None]]], arm: str
               ) -> tuple[list[str], list[list[str]]]:
    """One arm's all-reduce rows with nccl-tests' columns (float, sum; the probe sends 4-byte floats)."""
    headers = ["size (B)", "count", "type", "redop", "time (us)", "algbw (GB/s)", "busbw (GB/s)"]
    rows = [[str(size), str(size // 4), "float", "sum", _num(t, 2), _num(alg, 2), _num(bus, 2)]
            for size, t, alg, bus in per_arm.get(arm, [])]
    return headers, rows


def nccl_side_by_side(per_arm: Mapping[str, list[tuple[int, float | None, float | None, float | None]]],
                      arms: list[str]) -> tuple[list[str], list[list[str]]]:
    """Two arms per size in one table (the terminal's: every size a power of 8 and the largest, within 100 columns)."""
    headers = ["size (B)", "count", "type"] + [h for a in arms for h in (f"{a} us", f"{a} busbw")]
    sizes = sorted({r[0] for a in arms for r in per_arm.get(a, [])})
    shown = [b for b in sizes if b == sizes[-1] or (b & (b - 1) == 0 and (b.bit_length() - 1) % 3 == 2)]
    by = {a: {r[0]: r for r in per_arm.get(a, [])} for a in arms}
    rows = []
    for size in shown:
        row = [str(size), str(size // 4), "float"]
        for a in arms:
            r = by[a].get(size)
            row += [_num(r[1], 2), _num(r[3], 2)] if r else ["-", "-"]
        rows.append(row)
    return headers, rows


def proof_for_run(run_dir: Path, summary: Mapping[str, object]) -> Proof:
    """The proof sections of one of our run directories (its files, its results root's probes)."""
    proof = Proof()
    meta = run_meta(run_dir)
    proof.header = _versions_header(meta)
    arms = summary.get("arms") if isinstance(summary.get("arms"), dict) else {}
    assert isinstance(arms, dict)
    scen = run_dir / "scenarios"
    for arm in arms:
        expected = (arms.get(arm) or {}).get("expect_transport") if isinstance(arms.get(arm), dict) else None
        t = Transport(arm=str(arm), expected=str(expected) if expected else None, observed=None)
        for f in sorted(scen.glob(f"{arm}-*/{PROOF}"), key=lambda p: terminal.point_sort_key(
                p.parent.name.rsplit("-", 1)[-1])):
            data = optional_object(f) or {}
            observed = data.get("transport")
            if isinstance(observed, str) and observed and t.observed is None:
                t.observed = observed
                log_name = Path(str(data.get("source") or "server log")).name
                t.lines = _quote_claims(data, observed, f"{f.parent.name}/{log_name}")
        proof.transports.append(t)
    pair = meta.get("pair")
    pair_key = str(as_dict(pair).get("key", "")) if isinstance(pair, dict) else ""
    proof.probe_headers, proof.probe_rows, notes = _probe_rows(run_dir.parent, pair_key)
    proof.nccl = nccl_rows(run_dir.parent, pair_key)
    proof.arms = [str(a) for a in arms]
    proof.notes += notes
    for d in sorted(scen.iterdir()) if scen.is_dir() else []:
        row = telemetry_row(d.name, sorted(d.glob("telemetry_run*.csv")))
        if row:
            proof.telemetry_rows.append(row)
    if not proof.telemetry_rows:
        proof.notes.append("no telemetry samples (telemetry_run<k>.csv) in this run")
    # a point noisier than the in-run screens were proven at: said where the verdict is read, not only in run.json
    decisions = meta.get("decisions")
    if isinstance(decisions, Mapping):
        from pytest_p2p.campaign.adaptive import noisy_window_notes, precision_notes

        proof.notes += noisy_window_notes(decisions) + precision_notes(decisions)
    return proof


def _seed_log_lines(log: Path) -> list[str]:
    """Up to two ``via`` channel lines (the transport itself) and one setting line, in log order."""
    via: list[tuple[int, str]] = []
    setting: list[tuple[int, str]] = []
    try:
        with log.open(encoding="utf-8", errors="replace") as fh:
            for i, line in enumerate(fh, 1):
                if " NCCL INFO " not in line:
                    continue
                if " via " in line and len(via) < 2:
                    via.append((i, line.strip()[:300]))
                elif any(m in line for m in _SEED_MARKERS[1:]) and not setting:
                    setting.append((i, line.strip()[:300]))
                if len(via) >= 2 and setting:
                    break
    except OSError:
        return []
    return [f"logs/{log.name}:{i}: {text}" for i, text in sorted(setting + via)][:MAX_QUOTED]


_VIA = re.compile(r" via (P2P/\w+|SHM|NET|COLLNET)")


def _named_by_log(observed: str | None, lines: list[str]) -> str | None:
    """``P2P`` named as the seed's own proof line names it (``P2P/CUMEM``, ``P2P/IPC``), when one is quoted."""
    if observed is None:
        return None
    named = {m.group(1) for line in lines if (m := _VIA.search(line))}
    out: set[str] = set()
    for o in observed.split(", "):
        out.update(sorted(n for n in named if n.startswith(o)) or [o])
    return ", ".join(sorted(out))


def proof_for_seed(run: SeedRun) -> Proof:
    """The proof sections of a p2p-bench directory (transport_proof.json, logs/, env/p2p_evidence.json)."""
    proof = Proof()
    first = run.scenarios[0] if run.scenarios else None
    model = next((str(r.get("tokenizer_id")) for s in run.scenarios for r in _run_texts(s.path)
                  if r.get("tokenizer_id")), None)
    if model:
        proof.header["model"] = model
    if first and first.server and isinstance(first.server.get("args"), dict):
        args = first.server["args"]
        assert isinstance(args, dict)
        flags = first.server.get("flags") if isinstance(first.server.get("flags"), list) else []
        assert isinstance(flags, list)
        proof.header["server args"] = " · ".join([f"{k}={v}" for k, v in args.items()] + [str(f) for f in flags])
    nccl = next((str(s.transport["nccl_version"]) for s in run.scenarios
                 if s.transport and s.transport.get("nccl_version")), None)
    if nccl:
        proof.header["NCCL"] = nccl
    versions = (run.evidence or {}).get("versions")
    if isinstance(versions, dict):
        if versions.get("driver_version"):
            proof.header["driver"] = str(versions["driver_version"])
        nvcc = str(versions.get("nvcc") or "")
        if "release" in nvcc:
            proof.header["CUDA"] = nvcc.split("release", 1)[1].split(",")[0].strip()
    for arm in run.arms:
        scen = [s for s in run.scenarios if s.arm == arm]
        used = {("P2P" if s.transport.get("nccl_used_p2p") else "SHM" if s.transport.get("nccl_used_shm") else "?")
                for s in scen if s.transport}
        t = Transport(arm=arm, expected=None, observed=", ".join(sorted(used)) or None)
        for s in scen:
            log = s.path.parent.parent / "logs" / f"{s.name}.log"  # its own run's logs/ (a joined set)
            if log.is_file():
                t.lines = _seed_log_lines(log)
                break
        t.observed = _named_by_log(t.observed, t.lines)
        proof.transports.append(t)
    proof.probe_headers = ["Probe", "Path", "P2P off", "P2P on", "Source"]
    text = (run.evidence or {}).get("cuda_samples_p2p")
    if isinstance(text, str):
        proof.probe_rows, notes = _cuda_samples_rows(text)
        proof.notes += notes
    else:
        proof.notes.append("no cuda-samples p2pBandwidthLatencyTest output in env/p2p_evidence.json")
    for s in run.scenarios:
        row = telemetry_row(s.name, s.telemetry.values())
        if row:
            proof.telemetry_rows.append(row)
    return proof


def _run_texts(d: Path) -> list[dict[str, object]]:
    return [r for f in rep_files(d).values() if (r := read_object(f))]


def _cuda_samples_rows(text: str) -> tuple[list[list[str]], list[str]]:
    from pytest_p2p.errors import P2PError
    from pytest_p2p.probes.p2pmatrix import parse_p2p_bandwidth_latency

    try:
        res = parse_p2p_bandwidth_latency(text, "env/p2p_evidence.json cuda_samples_p2p", strict=False)
    except P2PError as exc:
        return [], [str(exc)]
    rows: list[list[str]] = []
    pairs = sorted(k for k, ok in res.can_access.items() if ok)
    for src, dst in pairs:
        for label, off_key, on_key, unit in (
                ("latency (µs)", "latency_gpu_disabled", "latency_gpu_enabled", "µs"),
                ("unidirectional bandwidth (GB/s)", "unidirectional_bw_disabled", "unidirectional_bw_enabled", "GB/s")):
            off = _matrix_value(res.matrices, res.labels, off_key, src, dst)
            on = _matrix_value(res.matrices, res.labels, on_key, src, dst)
            if off is None and on is None:
                continue
            rows.append([label, f"GPU{src} -> GPU{dst}", f"{off:.2f} {unit}" if off is not None else "-",
                         f"{on:.2f} {unit}" if on is not None else "-", "p2pBandwidthLatencyTest"])
    return rows, ([] if rows else ["p2pBandwidthLatencyTest output holds no matrix for a peer-capable pair"])


def _matrix_value(matrices: Mapping[str, list[list[float | None]]], labels: Mapping[str, list[int]], key: str,
                  src: int, dst: int) -> float | None:
    if key not in matrices or src not in labels[key] or dst not in labels[key]:
        return None
    return matrices[key][labels[key].index(src)][labels[key].index(dst)]


def proof_markdown(proof: Proof) -> list[str]:
    lines = ["## Setup", ""]
    lines += [f"- **{k}**: {v}" for k, v in proof.header.items()] or ["- not recorded"]
    lines += ["", "## Proof that the transport is what each arm claims", ""]
    for t in proof.transports:
        lines.append(f"**{t.arm}** — expected {t.expected or '-'}, observed **{t.observed or 'no proof'}**")
        lines += ["", "```", *t.lines, "```", ""] if t.lines else ["", "_no NCCL line quoted (no proof or log)_", ""]
    lines += ["## Probes", ""]
    lines += [terminal.markdown_table(proof.probe_headers, proof.probe_rows), ""] if proof.probe_rows else \
        ["_no probe results_", ""]
    for arm in proof.nccl:
        lines += [f"### all-reduce per size, {arm} (nccl-tests' columns)", ""]
        lines += [terminal.markdown_table(*nccl_table(proof.nccl, arm)), ""]
    lines += ["## Telemetry (every sample of every rep)", ""]
    lines += [terminal.markdown_table(list(TELEMETRY_HEADERS), proof.telemetry_rows), ""] if proof.telemetry_rows \
        else ["_no telemetry_", ""]
    lines += [f"- note: {n}" for n in proof.notes]
    return lines


def proof_text(proof: Proof, *, compact: bool = False) -> list[str]:
    """The same sections for the terminal: aligned tables, quoted lines indented.

    ``compact`` (the session's terminal summary): the setup on one line, one quoted NCCL line per
    arm and the telemetry as one line, so the summary stays short; summary.md has them in full.
    """
    if compact:
        out = _wrapped("setup: ", [f"{k} {v}" for k, v in proof.header.items()]) if proof.header else []
    else:
        out = [f"{k}: {v}" for k, v in proof.header.items()]
    for t in proof.transports:
        out.append(f"transport {t.arm}: expected {t.expected or '-'}, observed {t.observed or 'no proof'}")
        out += [_clip(f"    {line}") if compact else f"    {line}" for line in (t.lines[:1] if compact else t.lines)]
    if proof.probe_rows:
        out += terminal.text_table(proof.probe_headers, proof.probe_rows).splitlines()
    shown = [a for a in proof.arms if a in proof.nccl][:2] or list(proof.nccl)[:2]
    if shown:
        out.append(f"all-reduce per size ({', '.join(shown)}; every arm and size in summary.md):")
        out += terminal.text_table(*nccl_side_by_side(proof.nccl, shown)).splitlines()
    if proof.telemetry_rows and compact:
        out.append(telemetry_line(proof.telemetry_rows))
    elif proof.telemetry_rows:
        out += terminal.text_table(list(TELEMETRY_HEADERS), proof.telemetry_rows).splitlines()
    out += [f"note: {n}" for n in proof.notes]
    return out


WIDTH = 100  # the terminal summary's width (issue 26: it was 150 columns)


_NCCL_PREFIX = re.compile(r"\S+:\d+:\d+ \[\d+\] NCCL INFO ")  # host:pid:tid [rank] NCCL INFO


def _clip(line: str) -> str:
    """A quoted line within WIDTH: NCCL's host/pid prefix goes first (the ``via`` at the end is the proof)."""
    if len(line) > WIDTH:
        line = _NCCL_PREFIX.sub("", line, count=1)
    return line if len(line) <= WIDTH else line[:WIDTH - 1] + "…"


def _wrapped(first: str, parts: list[str]) -> list[str]:
    """``parts`` joined with `` · `` into lines of at most WIDTH columns (a part never split)."""
    lines = [first]
    for part in parts:
        sep = "" if lines[-1] in (first, "  ") else " · "
        if len(lines[-1]) + len(sep) + len(part) > WIDTH and lines[-1] not in (first, "  "):
            lines.append("  ")
            sep = ""
        lines[-1] += sep + part
    return lines


def telemetry_line(rows: list[list[str]]) -> str:
    """The telemetry table in one line: the PCIe links seen and the hottest, busiest, hungriest sample."""
    def peak(col: int) -> str:
        vals = [v for r in rows if (v := cell_number(r[col])) is not None]
        return f"{max(vals):g}" if vals else "-"

    links = sorted({link for r in rows for link in r[1].split(", ") if link and link != "-"})
    samples = sum(int(v) for r in rows if (v := cell_number(r[10])) is not None)
    return (f"telemetry: PCIe {', '.join(links) or '-'} · max {peak(2)} °C · max util {peak(4)} % · "
            f"peak {peak(6)} W per card · {samples} samples (table in summary.md)")
