"""Our Poisson/gamma arrival schedule against ``vllm bench serve``'s own, for the same seed, rate, burstiness.

Why: a P2P on/off comparison made with our load generator must offer the load a bench
command with the same ``--seed --request-rate --burstiness`` offers; the old schedule
(Python's RNG, first request at t = 0, no rescaling) sent 6.6-9.8 req/s for 8 req/s at
N = 64 depending on the seed (issue 26).

The reference is bench's real ``get_request``, read at run time from vLLM's source: with
``--vllm-src PATH`` (a vLLM checkout, an installed ``vllm`` package directory, its
site-packages, or ``serve.py`` itself), or else the installed ``vllm`` package found on
``sys.path`` (located, never imported: importing vLLM pulls in torch). The function and
the module-level helpers it calls are cut out of ``vllm/benchmarks/serve.py`` with
``ast``, their annotations dropped (they name vLLM types), and executed with numpy and
the module's own standard-library imports; ``time`` and ``asyncio.sleep`` are replaced by
a fake clock from 0, so its send times are read without waiting and without losing
precision to an epoch-sized clock. Each case seeds numpy's global generator as
``vllm bench serve``'s ``main_async`` does (``np.random.seed(seed)``) right before it.
Nothing of vLLM is stored in this repository.

Without vLLM's source the cases are compared with the recorded schedules in
``benchmarks/results/arrivals_bench_0.24.json`` (CI; ``--record`` rewrites that file from
bench's function). Passes when every offset agrees within 1 us; the output says which
reference it used (file, vLLM version and commit) and the largest difference.

Usage: ``python benchmarks/arrivals_vs_bench.py [--vllm-src PATH] [--record] [--json OUT]``;
exit 0 when identical, 1 when different, 2 without a reference.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import importlib.util
import json
import os
import re
import subprocess
import sys
import types
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

from pytest_p2p.serve.workload import arrival_offsets

FIXTURE = Path(__file__).resolve().parent / "results" / "arrivals_bench_0.24.json"
#: (n, request_rate, burstiness, seed): Poisson and gamma, few and many requests, the issue's N = 64 at 8 req/s
CASES = [(64, 8.0, 1.0, s) for s in range(5)] + [(1, 2.0, 1.0, 0), (500, 50.0, 1.0, 7), (200, 4.0, 0.5, 3),
                                                 (200, 4.0, 3.0, 11), (1000, 1000.0, 1.0, 123),
                                                 (300, 16.0, 0.25, 2026), (64, 0.5, 8.0, 42),
                                                 (16, float("inf"), 1.0, 0)]
TOLERANCE_S = 1e-6
FUNCTION = "get_request"
#: where bench's module sits below the path a user gives (checkout / site-packages, package dir, its benchmarks dir)
_CANDIDATES = ("vllm/benchmarks/serve.py", "benchmarks/serve.py", "serve.py")


class SourceError(Exception):
    """vLLM's source cannot give bench's function: which path, and why."""


@dataclass(frozen=True)
class BenchSource:
    """bench's ``get_request`` as executed from one file, and which vLLM that file belongs to."""

    path: Path
    version: str  # "0.24.0 (commit ee0da84ab)", or what could be learnt
    namespace: dict[str, object]


def find_serve_py(root: Path) -> Path:
    """The file that defines ``get_request`` under ``root`` (the layouts of a checkout and of a wheel)."""
    if root.is_file():
        return root
    for rel in _CANDIDATES:
        if (root / rel).is_file():
            return root / rel
    # a later vLLM may move it: any benchmarks module that defines the function
    for cand in sorted(root.glob("**/benchmarks/*.py")):
        if f"def {FUNCTION}(" in cand.read_text(errors="replace"):
            return cand
    raise SourceError(f"--vllm-src {root}: no vllm/benchmarks/serve.py (nor a benchmarks module defining "
                      f"{FUNCTION}) below it; give a vLLM checkout, its installed package or serve.py")


def installed_vllm() -> Path | None:
    """The installed ``vllm`` package's directory, found without importing it (vLLM imports torch)."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def vllm_version(serve_py: Path) -> str:
    """The version and commit of the vLLM that holds ``serve_py``: the wheel's ``_version.py``, else git."""
    pkg = serve_py.resolve().parent.parent  # .../vllm/benchmarks/serve.py -> .../vllm
    parts = []
    vfile = pkg / "_version.py"
    if vfile.is_file():
        text = vfile.read_text()
        version = re.search(r"^__version__\s*=\s*version\s*=\s*['\"]([^'\"]+)", text, re.M) \
            or re.search(r"^__version__\s*=\s*['\"]([^'\"]+)", text, re.M)
        commit = re.search(r"commit_id\s*=\s*['\"]g?([0-9a-f]+)", text)
        if version:
            parts.append(version.group(1))
        if commit:
            parts.append(f"(commit {commit.group(1)})")
    if not parts:
        try:
            out = subprocess.run(["git", "-C", str(pkg), "describe", "--tags", "--always", "--long"],
                                 capture_output=True, text=True, timeout=10, check=False)
            if out.returncode == 0 and out.stdout.strip():
                parts.append(f"git {out.stdout.strip()}")
        except OSError:
            pass
    return " ".join(parts) or "unknown version"


class _DropAnnotations(ast.NodeTransformer):
    """Annotations of arguments and returns are evaluated at ``def`` time and name vLLM's types: drop them."""

    def _strip(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST:
        a = node.args
        for arg in [*a.posonlyargs, *a.args, *a.kwonlyargs, a.vararg, a.kwarg]:
            if arg is not None:
                arg.annotation = None
        node.returns = None
        node.decorator_list = []
        self.generic_visit(node)
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        return self._strip(node)

    def visit_AsyncFunctionDef(self, node: ast.AsyncFunctionDef) -> ast.AST:
        return self._strip(node)


def _stdlib_or_numpy(module: str) -> bool:
    root = module.split(".")[0]
    return root == "numpy" or root in sys.stdlib_module_names


def load_bench_function(serve_py: Path) -> BenchSource:
    """``get_request`` and the top-level functions it calls, cut from ``serve_py`` and executed on their own.

    Only the module's standard-library and numpy imports are run (the rest would import
    vLLM, aiohttp, torch); a name the function needs that is then missing fails loudly
    when it runs, which is the honest outcome for a vLLM that changed its function.
    """
    try:
        tree = ast.parse(serve_py.read_text(), filename=str(serve_py))
    except (OSError, SyntaxError) as exc:
        raise SourceError(f"{serve_py}: cannot be read as Python ({exc})") from None
    defs = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    if FUNCTION not in defs:
        raise SourceError(f"{serve_py}: defines no top-level {FUNCTION}()")
    wanted, todo = [], [FUNCTION]
    while todo:  # the function and, transitively, the module's own functions it names
        name = todo.pop()
        if name in wanted:
            continue
        wanted.append(name)
        todo += [n.id for n in ast.walk(defs[name]) if isinstance(n, ast.Name) and n.id in defs]
    namespace: dict[str, object] = {"__name__": "vllm_bench_serve_extract"}
    for node in tree.body:
        if isinstance(node, ast.Import):
            keep = [a for a in node.names if _stdlib_or_numpy(a.name)]
            stmt: ast.stmt | None = ast.Import(names=keep) if keep else None
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and _stdlib_or_numpy(node.module) and node.module != "__future__":
            stmt = node
        else:
            continue
        if stmt is not None:
            exec(compile(ast.fix_missing_locations(ast.Module(body=[stmt], type_ignores=[])),  # noqa: S102
                         str(serve_py), "exec"), namespace)
    body = [_DropAnnotations().visit(defs[name]) for name in reversed(wanted)]
    module = ast.fix_missing_locations(ast.Module(body=body, type_ignores=[]))
    exec(compile(module, str(serve_py), "exec"), namespace)  # noqa: S102 - bench's own code, on purpose
    return BenchSource(path=serve_py, version=vllm_version(serve_py), namespace=namespace)


def bench_schedule(src: BenchSource, n: int, rate: float, burstiness: float, seed: int) -> list[float]:
    """bench's send offsets for one case: the fake-clock times at which ``get_request`` yields each request."""
    np = src.namespace.get("np")
    if not isinstance(np, types.ModuleType):
        raise SourceError(f"{src.path}: {FUNCTION} no longer draws from numpy imported as np")
    clock = [0.0]

    async def fake_sleep(seconds: float) -> None:
        clock[0] += seconds

    real_asyncio = src.namespace.get("asyncio")
    src.namespace["time"] = types.SimpleNamespace(time=lambda: clock[0], perf_counter=lambda: clock[0],
                                                  monotonic=lambda: clock[0])
    src.namespace["asyncio"] = types.SimpleNamespace(sleep=fake_sleep)
    func = src.namespace[FUNCTION]
    assert callable(func)
    gen_factory: Callable[..., AsyncIterator[object]] = func
    sent: list[float] = []

    async def record() -> None:
        async for _ in gen_factory(list(range(n)), rate, burstiness):  # it only counts and yields them
            sent.append(clock[0])

    np.random.seed(seed)  # what vllm bench serve's main_async does before the run
    try:
        asyncio.run(record())
    finally:
        src.namespace["asyncio"] = real_asyncio
    return sent


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--vllm-src", type=Path, default=None,
                   help="a vLLM checkout, its installed package directory, or vllm/benchmarks/serve.py "
                        "(default: the installed vllm package, else the recorded fixture)")
    p.add_argument("--record", action="store_true", help="write the fixture from bench's function")
    p.add_argument("--json", type=Path, default=Path(os.environ["OUT"]) / "arrivals_vs_bench.json"
                   if os.environ.get("OUT") else None)
    args = p.parse_args(argv)
    src: BenchSource | None = None
    try:
        root = args.vllm_src if args.vllm_src is not None else installed_vllm()
        if root is not None:
            src = load_bench_function(find_serve_py(root))
    except SourceError as exc:
        print(f"error: {exc}")
        return 2
    if args.vllm_src is None and src is None:
        print("no --vllm-src and no installed vllm: comparing with the recorded fixture")
    fixture = json.loads(FIXTURE.read_text()) if FIXTURE.exists() else {}
    rows, worst, reference = [], 0.0, set()
    recorded: dict[str, list[float]] = {}
    for n, rate, burst, seed in CASES:
        key = f"{n}/{rate:g}/{burst:g}/{seed}"
        if src is not None:
            ref: list[float] | None = bench_schedule(src, n, rate, burst, seed)
            source = f"{FUNCTION} of {src.path} (vLLM {src.version})"
        else:
            ref, source = fixture.get("cases", {}).get(key), f"recorded fixture {FIXTURE.name} ({fixture.get('vllm')})"
        if ref is None:
            print(f"{key}: no reference (no vLLM source, no fixture entry)")
            return 2
        recorded[key] = ref
        ours = arrival_offsets(n, rate, burst, seed)
        diff = max((abs(a - b) for a, b in zip(ours, ref, strict=True)), default=0.0) if len(ours) == len(ref) \
            else float("inf")
        worst = max(worst, diff)
        reference.add(source)
        rows.append({"case": key, "n": n, "rate": rate, "burstiness": burst, "seed": seed, "max_abs_diff_s": diff,
                     "achieved_rate": n / ref[-1] if ref[-1] else float("inf"), "reference": source})
        print(f"{key:>22}: max |ours - bench| = {diff:.3g} s, bench's last send at {ref[-1]:.6f} s")
    if args.record:
        if src is None:
            print("--record needs vLLM's source (--vllm-src or an installed vllm)")
            return 2
        FIXTURE.write_text(json.dumps({"vllm": f"{src.version}, {FUNCTION} of vllm/benchmarks/serve.py",
                                       "cases": recorded}, indent=1) + "\n")
        print(f"recorded {FIXTURE}")
    ok = worst <= TOLERANCE_S
    print(f"\n{'IDENTICAL' if ok else 'DIFFERENT'}: largest difference {worst:.3g} s over {len(CASES)} cases "
          f"(tolerance {TOLERANCE_S:g} s); reference: {', '.join(sorted(reference))}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"identical": ok, "worst_s": worst, "reference": sorted(reference),
                                         "rows": rows}, indent=1))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
