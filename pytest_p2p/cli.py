"""``python -m pytest_p2p`` / ``pytest-p2p``: the command line.

Subcommands are looked up lazily (``name -> "module:function"``) so that ``--help``
imports nothing heavy. Exit codes (documented in docs/index.md):

* 0 — done, and every expectation checked held
* 1 — done, but an expectation failed (doctor with a rig file) or an input held nothing usable
* 2 — usage error or bad input (rig file, snapshot, log), message names what and where
* 3 — no GPU evidence could be read (no driver / NVML)
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from . import __version__
from .errors import ConfigError, EvidenceError, P2PError

if TYPE_CHECKING:
    from .evidence.model import Evidence

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_NO_GPU = 0, 1, 2, 3

SUBCOMMANDS = {
    "doctor": ("pytest_p2p.cli:doctor_main", "a readable table of GPUs, pairs, links, topology, peer access, versions"),
    "snapshot": ("pytest_p2p.cli:snapshot_main", "record this machine's evidence to a JSON snapshot"),
    "gen-config": ("pytest_p2p.cli:gen_config_main", "write a rig file from what this machine (or a snapshot) shows"),
    "transport": ("pytest_p2p.probes.transport_cli:main", "NCCL transport proof from NCCL_DEBUG=INFO logs"),
    "report": ("pytest_p2p.report.report_cli:main", "re-render summary and plots of a results directory"),
    "baseline": ("pytest_p2p.verdict.baseline_cli:main", "list, show, accept, diff and export baselines"),
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_usage())
        return EXIT_OK if args else EXIT_USAGE
    if args[0] == "--version":
        print(f"pytest-p2p {__version__}")
        return EXIT_OK
    name, rest = args[0], args[1:]
    if name not in SUBCOMMANDS:
        print(f"pytest-p2p: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return EXIT_USAGE
    module, func = SUBCOMMANDS[name][0].split(":")
    try:
        return int(getattr(importlib.import_module(module), func)(rest))
    except EvidenceError as exc:
        print(f"pytest-p2p {name}: {exc}", file=sys.stderr)
        print(_replay_hint(name), file=sys.stderr)
        return EXIT_NO_GPU
    except P2PError as exc:
        print(f"pytest-p2p {name}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"pytest-p2p {name}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # ``doctor --json | head``: the reader left; that is not our failure
        _silence_stdout()
        return EXIT_OK


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush does not fail again."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def _check_out(path: str) -> None:
    """Refuse an ``--out`` that cannot be written before any evidence is gathered (NVML asked, links put under
    load): a missing folder or a folder in its place is named at once, not after the measurement it would lose."""
    import os
    from pathlib import Path

    from .options import unwritable

    target = os.path.abspath(path)
    folder = os.path.dirname(target)
    if os.path.isdir(target):
        raise P2PError(f"--out {path}: is a folder; name a file in it")
    if not os.path.isdir(folder):
        what = "is a file, not a folder" if os.path.exists(folder) else "does not exist"
        raise P2PError(f"--out {path}: cannot write: {folder} {what}")
    problem = unwritable(Path(folder))  # the plugin's own check of --p2p-results: root, read-only mounts, /proc
    if problem:
        raise P2PError(f"--out {path}: cannot write: {problem}")


def _write_out(path: str, write: Callable[[str], object]) -> None:
    """Write ``--out`` through ``write``; an unwritable place is a usage error naming it."""
    try:
        write(path)
    except OSError as exc:
        raise P2PError(f"--out {path}: cannot write: {exc.strerror or exc}") from None


def _usage() -> str:
    width = max(map(len, SUBCOMMANDS))
    lines = ["usage: python -m pytest_p2p COMMAND [options]   (COMMAND --help for its options)", "", "commands:"]
    lines += [f"  {n.ljust(width)}  {h}" for n, (_, h) in SUBCOMMANDS.items()]
    lines += ["", "exit codes: 0 ok, 1 an expectation failed, 2 usage/bad input, 3 no GPU evidence (no driver)"]
    return "\n".join(lines)


def _replay_hint(name: str) -> str:
    """No live evidence here: how to replay the bundled recording instead (with its path)."""
    from .evidence.snapshot import bundled_demo

    path = bundled_demo()
    if name == "snapshot":
        return (f"pytest-p2p snapshot: nothing to record without a driver. A recorded machine to look at: "
                f"python -m pytest_p2p doctor --snapshot demo   (the bundled 2x H200 NVLink snapshot, {path})")
    return (f"pytest-p2p {name}: to replay the bundled 2x H200 NVLink recording instead: "
            f"python -m pytest_p2p {name} --snapshot demo   ({path}); any snapshot file works the same way")


def _evidence(snapshot: str | None, load: bool) -> Evidence:
    if snapshot:
        from .evidence.snapshot import load_snapshot, snapshot_path

        return load_snapshot(snapshot_path(snapshot), origin="--snapshot")
    from .evidence.live import gather_live

    return gather_live(load=load)


def doctor_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="pytest-p2p doctor", description=SUBCOMMANDS["doctor"][1])
    p.add_argument("--snapshot", metavar="FILE", help="read a recorded snapshot instead of live NVML "
                                                     "('demo': the bundled 2x H200 recording)")
    p.add_argument("--rig", metavar="FILE", help="also judge the rig file's expectations (exit 1 if one fails)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--no-load", action="store_true", help="do not put load on the GPUs (links read idle)")
    a = p.parse_args(argv)
    from .evidence.doctor import CheckResult, doctor_table, judge_all
    from .plugin.rig import auto_rig, campaign_use, load_rig, resolve

    # the rig file first: a mistake in it is named before NVML is asked or the links are put under load, and a
    # machine without a driver does not hide it behind "no NVIDIA driver" (exit 3 for what is a usage error)
    rig = load_rig(a.rig, origin="--rig") if a.rig else auto_rig()
    if a.rig:
        campaign_use(rig)  # what pytest refuses at configure time, doctor refuses too (same function)
    ev = _evidence(a.snapshot, load=not a.no_load)
    results: list[CheckResult] | None = None
    resolved = resolve(rig, ev)
    if a.rig:
        results = judge_all(ev, resolved)
    if a.json:
        out: dict[str, object] = {"evidence": ev.to_dict()}
        if results is not None:
            out["checks"] = [r.to_dict() for r in results]
        print(json.dumps(out, indent=2))
    else:
        print(doctor_table(ev, results, resolved))
    return EXIT_FAILED if results and any(r.failed for r in results) else EXIT_OK


def snapshot_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="pytest-p2p snapshot", description=SUBCOMMANDS["snapshot"][1])
    p.add_argument("--out", metavar="FILE", required=True, help="where to write the snapshot JSON")
    p.add_argument("--no-load", action="store_true", help="do not put load on the GPUs (links read idle)")
    a = p.parse_args(argv)
    from .evidence.live import gather_live
    from .evidence.snapshot import save_snapshot

    _check_out(a.out)
    ev = gather_live(load=not a.no_load)
    _write_out(a.out, lambda path: save_snapshot(ev, path))
    print(f"snapshot of {len(ev.gpus)} GPU(s) and {len(ev.pairs)} pair(s) on {ev.host} written to {a.out}")
    return EXIT_OK


def gen_config_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="pytest-p2p gen-config", description=SUBCOMMANDS["gen-config"][1])
    p.add_argument("--snapshot", metavar="FILE", help="start from a recorded snapshot instead of live NVML "
                                                     "('demo': the bundled 2x H200 recording)")
    p.add_argument("--out", metavar="FILE", help="write here (default: print)")
    p.add_argument("--name", default="my-rig", help="the rig's name")
    p.add_argument("--no-load", action="store_true", help="do not put load on the GPUs (links read idle)")
    a = p.parse_args(argv)
    if not a.name.strip():
        p.error("--name: expected a non-empty rig name")  # else it would read as a gen-config bug below
    import yaml

    from .plugin.rig import parse_rig, rig_to_yaml_dict
    from .util import atomic_write_text

    if a.out:
        _check_out(a.out)
    ev = _evidence(a.snapshot, load=not a.no_load)
    data = rig_to_yaml_dict(ev, a.name)
    text = f"# rig file generated by pytest-p2p {__version__}: edit, then commit it beside your tests\n"
    text += yaml.safe_dump(data, sort_keys=False)
    try:
        parse_rig(yaml.safe_load(text), source=a.out or "<gen-config>")
    except ConfigError as exc:  # a bug in gen-config, not in the user's input
        raise P2PError(f"internal: generated rig file does not validate: {exc}") from None
    if a.out:
        _write_out(a.out, lambda path: atomic_write_text(path, text))
        print(f"rig file written to {a.out}")
    else:
        print(text, end="")
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
