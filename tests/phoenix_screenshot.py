"""The README's picture of a run in Phoenix, taken headless: Phoenix on loopback, the Phoenix test's small
agent sent to it over OTLP, and Debian's Chromium driven by Playwright on the trace view.

    .venv-phoenix/bin/pip install playwright && apt-get install -y chromium
    .venv-phoenix/bin/python tests/phoenix_screenshot.py docs/phoenix-run.png

Run with Phoenix's environment (it has Playwright); the agent runs with agenteval's (.venv).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
AGENTEVAL_PYTHON = os.environ.get("AGENTEVAL_PYTHON", str(ROOT / ".venv" / "bin" / "python"))
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str):
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)


def wait_for(url: str, seconds: float = 240) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            get(url)
            return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"{url} did not answer in {seconds:g} s")


def main(output: str) -> None:
    sys.path.insert(0, str(ROOT / "tests"))
    from model_servers import ModelServer
    from phoenix_agent import MODEL, REPLIES
    from playwright.sync_api import sync_playwright

    work = Path(tempfile.mkdtemp(prefix="phoenix-shot-"))
    http, grpc = free_port(), free_port()
    env = {
        **os.environ,
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(http),
        "PHOENIX_GRPC_PORT": str(grpc),
        "PHOENIX_WORKING_DIR": str(work),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    base = f"http://127.0.0.1:{http}"
    log = open(work / "phoenix.log", "w")
    phoenix = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "phoenix_launcher.py")], cwd=work, env=env, stdout=log, stderr=log
    )
    try:
        with ModelServer().script(*REPLIES) as models:
            wait_for(f"{base}/v1/projects")
            run_env = {
                **os.environ,
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{base}/v1/traces",
                "OTEL_RESOURCE_ATTRIBUTES": "openinference.project.name=agenteval",
            }
            urls = [models.openai_url, models.anthropic_url]
            subprocess.run(
                [AGENTEVAL_PYTHON, str(ROOT / "tests" / "phoenix_agent.py"), *urls, str(work / "store")],
                env=run_env,
                check=True,
            )
            for _ in range(240):
                spans = get(f"{base}/v1/projects/agenteval/spans?limit=100")["data"] if _project(base) else []
                if len(spans) >= 8:
                    break
                time.sleep(0.5)
            root = next(s for s in spans if s["parent_id"] is None)
            project = _project(base)
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_FLAGS)
                page = browser.new_page(viewport={"width": 1600, "height": 1000})
                page.goto(f"{base}/projects/{project}/traces/{root['context']['trace_id']}", wait_until="networkidle")
                page.get_by_text("execute_tool add").first.wait_for(timeout=60_000)
                page.get_by_text(f"chat {MODEL}", exact=True).nth(1).click()  # the call that answers after the tool
                page.wait_for_timeout(2000)  # the span's panel renders after the click
                page.screenshot(path=output)
                browser.close()
    finally:
        phoenix.terminate()
        phoenix.wait(timeout=60)
        log.close()


def _project(base: str) -> str | None:
    projects = get(f"{base}/v1/projects")["data"]
    return next((p["id"] for p in projects if p["name"] == "agenteval"), None)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(ROOT / "docs" / "phoenix-run.png"))
