"""The files Allure reads beside the results: environment, categories, executor; markdown as HTML.

Allure users expect three files in ``--alluredir`` that allure-pytest never writes:

* ``environment.properties`` — the Environment widget (driver, CUDA, NCCL, vLLM, GPUs,
  topology, rig, host): without it the report says "There are no environment variables".
* ``categories.json`` — the Categories tab. Ours separate a performance regression, an
  uplift threshold not met, an inconclusive decision, an evidence mismatch, and the
  infrastructure (server or probe could not run: *broken*), so a dead server is never
  filed with the product defects.
* ``executor.json`` — the Executors widget and the link back to the CI run; from the
  GitHub Actions variables (``GITHUB_RUN_ID``...), else nothing is claimed.

Written only by the process that owns the session (the xdist controller, never a worker)
and never overwriting categories a user put there.
"""

from __future__ import annotations

import html
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path

from pytest_p2p.util import atomic_write_text

CATEGORIES: tuple[dict[str, object], ...] = (
    {"name": "Performance regression (vs baseline)", "matchedStatuses": ["failed"],
     "messageRegex": r"(?s).*(regress|worse than (the )?baseline|slower than (the )?baseline).*"},
    {"name": "Uplift threshold not met", "matchedStatuses": ["failed"],
     "messageRegex": r"(?s).*(uplift|min_uplift|FAIL <).*"},
    {"name": "Inconclusive (more pairs needed)", "matchedStatuses": ["failed", "skipped", "broken"],
     "messageRegex": r"(?s).*(inconclusive|pairs_needed|more pairs|too few reps).*"},
    {"name": "Evidence mismatch (topology, link, transport)", "matchedStatuses": ["failed"],
     "messageRegex": r"(?s).*(expected|expect_transport|downtrained|topology|NVLink|PCIe|transport|peer).*"},
    {"name": "Infrastructure (server, probe or GPU could not run)", "matchedStatuses": ["broken"]},
    {"name": "Test defects", "matchedStatuses": ["broken"], "messageRegex": r"(?s).*(Error|Exception).*"},
)


def _prop_value(value: str) -> str:
    """Java .properties escaping: one line, backslashes and separators escaped."""
    text = " ".join(str(value).split())
    return text.replace("\\", "\\\\").replace("=", "\\=").replace(":", "\\:")


def properties_text(env: Mapping[str, str]) -> str:
    return "".join(f"{k.replace(' ', '_')}={_prop_value(v)}\n" for k, v in env.items() if v not in (None, ""))


def executor_from_env(environ: Mapping[str, str]) -> dict[str, object] | None:
    """Allure's executor.json from GitHub Actions variables; None outside GitHub Actions."""
    if environ.get("GITHUB_ACTIONS") != "true" or not environ.get("GITHUB_RUN_ID"):
        return None
    server = environ.get("GITHUB_SERVER_URL", "https://github.com").rstrip("/")
    repo = environ.get("GITHUB_REPOSITORY", "")
    run_id = environ["GITHUB_RUN_ID"]
    number = environ.get("GITHUB_RUN_NUMBER", run_id)
    build_url = f"{server}/{repo}/actions/runs/{run_id}"
    out: dict[str, object] = {
        "name": "GitHub Actions", "type": "github", "url": f"{server}/{repo}",
        "buildOrder": int(number) if number.isdigit() else number,
        "buildName": f"{environ.get('GITHUB_WORKFLOW', 'workflow')} #{number}",
        "buildUrl": build_url,
    }
    if environ.get("P2P_ALLURE_REPORT_URL"):
        out["reportUrl"] = environ["P2P_ALLURE_REPORT_URL"]
    if environ.get("RUNNER_NAME"):
        out["name"] = f"GitHub Actions ({environ['RUNNER_NAME']})"
    return out


def write_allure_meta(alluredir: Path, env: Mapping[str, str],
                      environ: Mapping[str, str] | None = None) -> list[Path]:
    """Write environment.properties, categories.json (unless present) and executor.json (in CI)."""
    environ = os.environ if environ is None else environ
    alluredir.mkdir(parents=True, exist_ok=True)
    written = [atomic_write_text(alluredir / "environment.properties", properties_text(env))]
    categories = alluredir / "categories.json"
    if not categories.exists():
        written.append(atomic_write_text(categories, json.dumps(list(CATEGORIES), indent=2) + "\n"))
    executor = executor_from_env(environ)
    if executor is not None:
        written.append(atomic_write_text(alluredir / "executor.json", json.dumps(executor, indent=2) + "\n"))
    return written


_TABLE_SEP = re.compile(r"^\|?\s*:?-{3,}")


def _inline(text: str) -> str:
    out = html.escape(text)
    out = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", out)
    out = re.sub(r"`(.+?)`", r"<code>\1</code>", out)
    out = re.sub(r"_(no [^_]+)_", r"<i>\1</i>", out)
    return out


def markdown_to_html(md: str, title: str = "p2p summary") -> str:
    """Our summary.md as a standalone HTML page (headings, tables, lists, code, quotes).

    Allure shows text/markdown as raw text; HTML it renders. This covers exactly what
    summary_files.md_text and the proof sections write, nothing more.
    """
    lines = md.splitlines()
    body: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            block = []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                block.append(html.escape(lines[i]))
                i += 1
            body.append("<pre>" + "\n".join(block) + "</pre>")
        elif line.startswith("|") and i + 1 < len(lines) and _TABLE_SEP.match(lines[i + 1]):
            head = [c.strip() for c in line.strip().strip("|").split("|")]
            body.append("<table><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head) + "</tr>")
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                cells = [c.strip() for c in lines[i].strip().strip("|").split("|")]
                body.append("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in cells) + "</tr>")
                i += 1
            body.append("</table>")
            continue
        elif m := re.match(r"^(#{1,4}) (.*)$", line):
            n = len(m.group(1))
            body.append(f"<h{n}>{_inline(m.group(2))}</h{n}>")
        elif line.startswith("- "):
            items = []
            while i < len(lines) and lines[i].startswith("- "):
                items.append(f"<li>{_inline(lines[i][2:])}</li>")
                i += 1
            body.append("<ul>" + "".join(items) + "</ul>")
            continue
        elif line.startswith("> "):
            body.append(f"<blockquote>{_inline(line[2:])}</blockquote>")
        elif m := re.match(r"^!\[(.*?)\]\((.*?)\)$", line):
            body.append(f"<p>[plot {html.escape(m.group(1))}: attached separately]</p>")
        elif line.strip():
            body.append(f"<p>{_inline(line)}</p>")
        i += 1
    style = ("body{font-family:sans-serif;font-size:13px}table{border-collapse:collapse;margin:6px 0}"
             "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}th{background:#f3f3f3}"
             "td:first-child,td:nth-child(2){text-align:left}pre{background:#f6f6f6;padding:6px;overflow-x:auto}"
             "blockquote{color:#a00;font-weight:bold}")
    return (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body>{''.join(body)}</body></html>\n")
