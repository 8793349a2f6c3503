"""The Allure report as its users see it: the REAL Allure CLI, opened in headless Chromium.

Two sessions write allure results from different start directories (which used to move
every check's fullName, so history never formed); the first report's ``history/`` is
carried into the second, as a nightly CI job does. The second report must show, in the
browser: the checks, our categories (a failed uplift, a broken server), the environment
(rig, driver) and the first run in the history.

Needs ``allure`` (npm ``allure-commandline`` 2.x, with Java 17, or ``allure`` 3.x) and a
Chromium (Debian ``chromium``); skips saying which is missing. Set ``ALLURE_BIN`` /
``CHROMIUM_BIN`` to point at them; ``P2P_ALLURE_SCREENSHOT_DIR`` keeps the screenshots.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import json
import os
import shutil
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

LOCAL_TESTS = """
import pytest

pytestmark = pytest.mark.p2p

@pytest.fixture
def server():
    raise RuntimeError("vllm server did not start: exit code 1 (CUDA out of memory)")

@pytest.mark.parametrize("pair", [(0, 1)])
def test_uplift(pair):
    assert False, "uplift at c8: +3.0 % is below min_uplift +5.0 %"

def test_served(server):
    pass

@pytest.mark.parametrize("pair", [(0, 1)])
def test_link_ok(pair):
    pass
"""


def _tool(env: str, *names: str) -> str | None:
    if os.environ.get(env):
        return os.environ[env]
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    return None


@pytest.fixture(scope="module")
def tools() -> tuple[str, str]:
    allure = _tool("ALLURE_BIN", "allure")
    chromium = _tool("CHROMIUM_BIN", "chromium", "chromium-browser", "google-chrome")
    missing = [m for m, t in (("allure CLI (npm install -g allure-commandline; needs Java 17)", allure),
                              ("chromium (apt-get install -y chromium)", chromium)) if t is None]
    if missing:
        pytest.skip("real Allure report check needs " + " and ".join(missing))
    assert allure and chromium
    return allure, chromium


@contextlib.contextmanager
def _serve(directory: Path) -> Iterator[str]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base's name
            pass

    handler = functools.partial(Quiet, directory=str(directory))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/index.html"
    finally:
        httpd.shutdown()
        httpd.server_close()


def _chromium(chromium: str, url: str, *extra: str) -> str:
    args = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--no-first-run", "--disable-dev-shm-usage", "--disable-extensions", "--mute-audio",
            "--virtual-time-budget=20000", "--window-size=1400,1100", *extra, url]
    out = subprocess.run(args, capture_output=True, text=True, timeout=120, check=False)
    return out.stdout


DEMO = Path(__file__).resolve().parent.parent / "pytest_p2p" / "demo"


def _session(pytester: pytest.Pytester, start: Path, alluredir: Path) -> None:
    """One session from ``start``; the recorded H200 rig and snapshot by absolute path (even on a GPU box)."""
    start.mkdir(parents=True, exist_ok=True)
    (start / "test_local.py").write_text(LOCAL_TESTS)
    old = Path.cwd()
    os.chdir(start)  # contextlib.chdir is 3.11+; the package supports 3.10
    try:
        result = pytester.runpytest_subprocess(
            "--pyargs", "pytest_p2p.checks.test_evidence", str(start / "test_local.py"),
            "--p2p-rig", str(DEMO / "rig.yaml"), "--p2p-snapshot", str(DEMO / "h200x2-nvlink.snapshot.json"),
            f"--alluredir={alluredir}", "--p2p-results", str(start / "res"), "-p", "no:cacheprovider",
            "--rootdir", str(start))
    finally:
        os.chdir(old)
    assert result.ret == 1, result.stdout.str()  # one failed check, one broken: the run fails


def test_real_allure_report_in_chromium(pytester: pytest.Pytester, tools: tuple[str, str], tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("allure_pytest")
    allure, chromium = tools
    monkeypatch.setenv("PYTEST_P2P_NVML", "off")  # hermetic on a machine with GPUs too
    r1, r2 = tmp_path / "results1", tmp_path / "results2"
    _session(pytester, tmp_path / "a", r1)
    _session(pytester, tmp_path / "b" / "deeper", r2)

    def by_name(d: Path) -> dict[str, dict[str, str]]:
        out = {}
        for f in d.glob("*-result.json"):
            r = json.loads(f.read_text())
            out[r["fullName"] + str(r.get("parameters"))] = {"historyId": r["historyId"], "status": r["status"]}
        return out

    first, second = by_name(r1), by_name(r2)
    assert first and first.keys() == second.keys()  # fullName stable across start directories
    assert all(first[k]["historyId"] == second[k]["historyId"] for k in first)
    statuses = sorted(v["status"] for v in first.values())
    assert "broken" in statuses and "failed" in statuses
    assert (r1 / "environment.properties").is_file() and (r1 / "categories.json").is_file()

    env = {**os.environ, "JAVA_TOOL_OPTIONS": os.environ.get("JAVA_TOOL_OPTIONS", "-Xmx512m")}
    rep1, rep2 = tmp_path / "report1", tmp_path / "report2"
    subprocess.run([allure, "generate", str(r1), "-o", str(rep1), "--clean"], check=True, env=env,
                   capture_output=True, timeout=300)
    shutil.copytree(rep1 / "history", r2 / "history")  # what the nightly workflow carries over
    subprocess.run([allure, "generate", str(r2), "-o", str(rep2), "--clean"], check=True, env=env,
                   capture_output=True, timeout=300)
    trend = json.loads((rep2 / "widgets" / "history-trend.json").read_text())
    assert len(trend) == 2  # this run and the previous one

    shots = Path(os.environ.get("P2P_ALLURE_SCREENSHOT_DIR", tmp_path))
    with _serve(rep2) as url:
        overview = _chromium(chromium, url, "--dump-dom")
        categories = _chromium(chromium, url + "#categories", "--dump-dom")
        _chromium(chromium, url, f"--screenshot={shots / 'allure-overview.png'}")
        _chromium(chromium, url + "#categories", f"--screenshot={shots / 'allure-categories.png'}")
        case = next(p for p in (rep2 / "data" / "test-cases").glob("*.json")
                    if json.loads(p.read_text())["fullName"].endswith("test_local#test_uplift"))
        uid = json.loads(case.read_text())["uid"]
        history_page = _chromium(chromium, f"{url}#testresult/{uid}/history", "--dump-dom")
    assert "demo-h200x2-nvlink" in overview and "580.159.04" in overview  # Environment widget
    assert "Environment" in overview and "There are no environment variables" not in overview
    assert "Uplift threshold not met" in categories
    assert "Infrastructure (server, probe or GPU could not run)" in categories
    assert "uplift (p2p) — gpu0-gpu1" in history_page  # a readable title (the stage of a user module: p2p)
    assert "History" in history_page and history_page.count("failed") >= 2  # this run and the previous one
    assert (shots / "allure-overview.png").stat().st_size > 10_000
