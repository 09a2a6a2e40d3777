"""The approvals inbox in a real headless browser: Playwright driving Debian's chromium.

The refund desk pauses on its refund and its mail; a person opens the inbox, reads both
asks with their reasons, approves the refund, denies the mail with a reason; after
``loopwise resume`` the shop has exactly one refund and no mail, and the run page says
who decided. Screenshots of the inbox and the run page, at 1280 px and at phone width,
go to a temporary directory (``LOOPWISE_SCREENSHOTS=DIR`` keeps them).

Needs ``playwright`` (the dev extra) and a chromium at ``/usr/bin/chromium`` (Debian's
package; ``LOOPWISE_CHROMIUM`` names another): without them the test skips with one line
saying so, except under ``CI=true``, where ``.ci/run`` installs both and a skip fails.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopwise.errors import missing_extra
from tests.support import ROOT

DESK = f"{ROOT / 'workflows' / 'refund_desk.py'}:refund_desk"
CHROMIUM = os.environ.get("LOOPWISE_CHROMIUM", "/usr/bin/chromium")
HOW = (
    "browser test skipped: install Debian's chromium (apt-get install chromium) and the dev "
    "extra (pip install -e '.[dev]', which brings playwright), or run .ci/run"
)
# The machine's network may be closed: without these chromium waits on connections.
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}

pytestmark = pytest.mark.slow


def _skip_or_fail(why: str) -> None:
    if os.environ.get("CI", "").lower() in {"1", "true", "yes"}:
        pytest.fail(f"CI=true but {why}: .ci/run installs chromium and playwright")
    pytest.skip(f"{HOW} ({why})")


@pytest.fixture
def browser() -> Iterator[Any]:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as e:
        _skip_or_fail(str(missing_extra("dev", e, needed_by="the browser test")))
    if not os.access(CHROMIUM, os.X_OK):
        _skip_or_fail(f"no chromium at {CHROMIUM}")
    # Playwright gives the browser a new, empty profile directory of its own.
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            yield launched
        finally:
            launched.close()


def _loopwise(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loopwise.cli.main", *args],
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _shop(sql: str) -> list[Any]:
    with sqlite3.connect(os.environ["LOOPWISE_SHOP_DB"]) as db:
        return db.execute(sql).fetchall()


def _shots(tmp_path: Path) -> Path:
    where = Path(os.environ.get("LOOPWISE_SCREENSHOTS") or tmp_path / "screenshots")
    where.mkdir(parents=True, exist_ok=True)
    return where


def _screenshot(page: Any, where: Path, name: str) -> None:
    for label, size in (("1280", DESKTOP), ("phone", PHONE)):
        page.set_viewport_size(size)
        page.screenshot(path=str(where / f"{name}-{label}.png"), full_page=True)
        # Nothing may stick out sideways on either width (a table scrolls in its box).
        overflow = page.evaluate("document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"{name} is {overflow}px wider than a {label} screen"
        if size is PHONE:
            # At phone width a table stacks (a card per row), so no column hides in a
            # sideways scroll inside its box.
            hidden = page.evaluate(
                "[...document.querySelectorAll('table')].filter(t => "
                "t.scrollWidth > t.parentElement.clientWidth + 1 || "
                "t.getBoundingClientRect().right > window.innerWidth + 1).length"
            )
            assert hidden == 0, f"{name} at {label}: {hidden} table(s) wider than the screen"
        # A badge broken over lines (d/o/n/e in a squeezed table column) is unreadable.
        tallest = page.evaluate(
            "Math.max(0, ...[...document.querySelectorAll('.state, .effect')]"
            ".map(e => e.getBoundingClientRect().height))"
        )
        assert tallest < 30, f"{name} at {label}: a state or effect badge is {tallest}px tall"
    page.set_viewport_size(DESKTOP)


def test_a_person_decides_the_refund_desk_in_the_browser(browser: Any, tmp_path: Path) -> None:
    complaint = '"Order O-1003 arrived broken and I want my money back."'
    # Playwright's sync API runs an event loop on this thread: the CLI runs beside it.
    paused = _loopwise("run", DESK, "--model", "scripted", "--input", complaint, "--json")
    assert paused.returncode == 1, paused.stderr
    run_id = json.loads(paused.stdout)["run_id"]
    with subprocess.Popen(
        [sys.executable, "-m", "loopwise.cli.main", "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as server:
        try:
            assert server.stdout is not None
            first = server.stdout.readline()
            assert first.startswith("serving http://127.0.0.1:"), first
            _decide_in_browser(browser, first.split()[1], run_id, _shots(tmp_path))
        finally:
            server.terminate()


def _card(page: Any, action: str) -> Any:
    """The inbox's card asking about ``action`` (other cards name it in their plan)."""
    return page.locator("article.approval").filter(has=page.locator("h2", has_text=action))


def _decide_in_browser(browser: Any, url: str, run_id: str, shots: Path) -> None:
    page = browser.new_page(viewport=DESKTOP)
    page.goto(url)
    refund, mail = _card(page, "issue_refund"), _card(page, "email_customer")
    assert page.locator("article.approval").count() == 2
    assert "a person approves every refund" in refund.inner_text()
    assert "the customer asks for their money back" in refund.inner_text()
    assert "a person approves every customer mail" in mail.inner_text()
    assert "tell the order's customer about the refund" in mail.inner_text()
    assert "priya@raman-design.example" in mail.inner_text()
    _screenshot(page, shots, "inbox")

    decide = refund.locator("form.decide")
    decide.get_by_label("Your name").fill("Ada Lovelace")
    decide.get_by_role("button", name="Approve").click()
    page.wait_for_url(re.compile(r"/\?decided="))
    assert "execute.s1 of run" in page.locator(".notice").inner_text()
    page.goto(f"{url}/runs/{run_id}")  # the paused run's line follows the decision
    waiting = page.locator("p.detail").inner_text()
    assert waiting == "1 call(s) await approval: email_customer (execute.s2)", waiting
    _screenshot(page, shots, "run-paused")
    page.goto(url)
    decide = _card(page, "email_customer").locator("form.decide")
    decide.get_by_label("Your name").fill("Ada Lovelace")
    decide.get_by_label("Reason").fill("no mail until the refund shows up")
    decide.get_by_role("button", name="Deny").click()
    page.wait_for_url(re.compile(r"/\?decided="))
    assert page.locator("article.approval").count() == 0

    resumed = _loopwise("resume", run_id)  # a denied action ends the hybrid's run denied
    assert resumed.returncode == 1 and f"run {run_id}: denied" in resumed.stdout
    assert len(_shop("SELECT * FROM refunds WHERE order_id = 'O-1003'")) == 1
    assert _shop("SELECT * FROM emails") == []

    page.goto(f"{url}/runs/{run_id}")
    approvals = page.locator("table.approvals").inner_text()
    assert "Ada Lovelace" in approvals and "no mail until the refund shows up" in approvals
    assert page.locator("figure.drawing svg").count() == 1
    drawn = page.locator("figure.drawing").inner_text()
    assert "s1: issue_refund" in drawn and "done" in drawn and "denied" in drawn
    _screenshot(page, shots, "run")


REFUND = {"order_id": "O-1003", "amount_cents": 4000, "reason": "a partial refund"}


def _edited_desk() -> str:
    """A refund desk run whose refund ann edited from 18900 to 4000 cents, finished (the
    mail and the note, asked again after the edit, approved as they were)."""
    complaint = '"Order O-1003 arrived broken and I want my money back."'
    paused = _loopwise("run", DESK, "--model", "scripted", "--input", complaint, "--json")
    run_id = str(json.loads(paused.stdout)["run_id"])
    decisions = [
        ("execute.s1", "--args", json.dumps(REFUND)),
        ("execute.s2",),
        ("resume",),
        ("execute.s2.recheck",),
        ("execute.s3.recheck",),
        ("resume",),
    ]
    for what in decisions:
        if what == ("resume",):
            done = _loopwise("resume", run_id)
        else:
            done = _loopwise("approve", run_id, "--approval", what[0], "--by", "ann", *what[1:])
        assert done.returncode in (0, 1), done.stderr
    return run_id


def test_an_edited_step_reads_as_it_ran_in_the_browser(browser: Any, tmp_path: Path) -> None:
    run_id = _edited_desk()
    with subprocess.Popen(
        [sys.executable, "-m", "loopwise.cli.main", "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as server:
        try:
            assert server.stdout is not None
            url = server.stdout.readline().split()[1]
            page = browser.new_page(viewport=DESKTOP)
            page.goto(f"{url}/runs/{run_id}")
            refund = page.locator("table.plan tr").filter(has_text="issue_refund")
            ran = refund.locator(".ran > div").first.inner_text()
            proposed = refund.locator(".proposed").inner_text()
            assert "ran with (edited by ann)" in ran and "4000" in ran and "18900" not in ran
            assert "the planner proposed" in proposed and "18900" in proposed
            approvals = page.locator("table.approvals").inner_text()
            assert "amount_cents: 18900 → 4000" in approvals
            _screenshot(page, _shots(tmp_path), "run-edited")
        finally:
            server.terminate()


def test_the_inbox_mounted_in_a_fastapi_app_decides_in_the_browser(
    browser: Any, tmp_path: Path
) -> None:
    # The team's app (tests/serve/test_mounted.py): its own sign-in, the inbox under
    # /approvals, served by uvicorn on 127.0.0.1 from a thread of this process.
    import uvicorn

    from tests.serve.test_mounted import mounted_app

    complaint = '"Order O-1003 arrived broken and I want my money back."'
    paused = _loopwise("run", DESK, "--model", "scripted", "--input", complaint, "--json")
    assert paused.returncode == 1, paused.stderr
    run_id = json.loads(paused.stdout)["run_id"]
    config = uvicorn.Config(mounted_app(None), host="127.0.0.1", port=0, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        while not server.started:
            assert thread.is_alive(), "uvicorn did not start"
            time.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]
        url = f"http://127.0.0.1:{port}"
        page = browser.new_page(viewport=DESKTOP)
        assert page.goto(f"{url}/approvals/").status == 403  # no one signed in
        page.goto(f"{url}/login?user=Ada%20Lovelace")
        assert page.url == f"{url}/approvals/"
        refund = _card(page, "issue_refund")
        assert page.locator("article.approval").count() == 2
        assert "deciding as Ada Lovelace" in refund.inner_text()
        assert page.locator("link[rel=stylesheet]").get_attribute("href") == (
            "/approvals/static/inbox.css"
        )
        background = page.evaluate(
            "getComputedStyle(document.querySelector('header')).backgroundColor"
        )
        assert background == "rgb(17, 24, 39)"  # the stylesheet loaded under the prefix
        refund.locator("form.decide").get_by_role("button", name="Approve").click()
        page.wait_for_url(re.compile(r"/approvals/\?decided="))
        notice = page.locator(".notice").inner_text()
        assert f"execute.s1 of run {run_id}: approved by Ada Lovelace" in notice
        assert page.locator("article.approval").count() == 1
        _screenshot(page, _shots(tmp_path), "mounted-inbox")
        page.get_by_role("link", name=run_id).click()
        page.wait_for_url(f"{url}/approvals/runs/{run_id}")
        assert "Ada Lovelace" in page.locator("table.approvals").inner_text()
        _screenshot(page, _shots(tmp_path), "mounted-run")
    finally:
        server.should_exit = True
        thread.join(timeout=30)


NARROW_DESK = '''\
import json

import loopwise
from loopwise.architectures.hybrid import ActionCatalog, Hybrid
from loopwise.testing import ScriptedModel, reply
from loopwise.tools.gates import human

AFTER = ("notify_customer_by_email_now", "open_warehouse_return_ticket", "log")
PLAN = {"steps": [
    {"id": "s1", "action": "pay", "args": {"order_id": "O-1", "amount": 40.0},
     "depends_on": [], "reason": "broken"},
    *({"id": f"s{i}", "action": a, "args": {"order_id": "O-1"}, "depends_on": ["s1"],
       "reason": "so"} for i, a in enumerate(AFTER, start=2)),
]}


@loopwise.tool(effect="irreversible", gate=human())
def pay(order_id: str, amount: float) -> str:
    """Pay money back for an order."""
    return "paid"


@loopwise.tool(effect="write")
def notify_customer_by_email_now(order_id: str) -> str:
    """Tell the customer."""
    return "told"


@loopwise.tool(effect="write")
def open_warehouse_return_ticket(order_id: str) -> str:
    """Ask the warehouse for the parcel."""
    return "opened"


@loopwise.tool(effect="write")
def log(order_id: str) -> str:
    """Log it."""
    return "logged"


ACTIONS = ActionCatalog()
for action in (pay, notify_customer_by_email_now, open_warehouse_return_ticket, log):
    ACTIONS.add(action)
desk = Hybrid("desk", actions=ACTIONS)


def offline_model():
    return ScriptedModel(lambda request: reply(json.dumps(PLAN)))
'''

# Each stacked cell's label (its ::before) ends inside its own cell, and no cell of a row
# runs into the next: [[label, overflow px], ...] of those that do.
_LABELS_OUTSIDE = """[...document.querySelectorAll('table.stack tr')].flatMap(tr => {
  const cells = [...tr.querySelectorAll('td')];
  return cells.flatMap((td, i) => {
    const box = td.getBoundingClientRect(), style = getComputedStyle(td);
    const label = parseFloat(getComputedStyle(td, '::before').height) || 0;
    const bottom = box.top + parseFloat(style.paddingTop) + label;
    const next = cells[i + 1] ? cells[i + 1].getBoundingClientRect().top : Infinity;
    const over = Math.max(bottom - box.bottom, box.bottom - next);
    return over > 0.5 ? [[td.dataset.label, over]] : [];
  });
})"""

# Each plan node: its whole name (the title), the lines drawn, the widest line's width
# and the node's width, in the drawing's own units, and the drawing's scale on screen.
_NODES = """[...document.querySelectorAll('figure.drawing g.node')].map(g => ({
  title: g.querySelector('title').textContent,
  lines: [...g.querySelectorAll('text[font-weight]')].map(t => t.textContent),
  widest: Math.max(...[...g.querySelectorAll('text')].map(t => t.getBBox().width)),
  box: g.querySelector('rect').getBBox().width,
  scale: g.ownerSVGElement.getBoundingClientRect().width
    / g.ownerSVGElement.viewBox.baseVal.width,
}))"""


def test_the_run_page_reads_at_phone_width(browser: Any, tmp_path: Path) -> None:
    # At 390 px the planner's reason's two-line label ran into the arguments' label (a
    # one-line reason), and the drawing cut long step names and shrank them to ~7 px.
    module = tmp_path / "narrow_desk.py"
    module.write_text(NARROW_DESK)
    paused = _loopwise("run", f"{module}:desk", "--model", "scripted", "--input", '"x"', "--json")
    assert paused.returncode == 1, paused.stderr
    run_id = json.loads(paused.stdout)["run_id"]
    with subprocess.Popen(
        [sys.executable, "-m", "loopwise.cli.main", "serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as server:
        try:
            assert server.stdout is not None
            url = server.stdout.readline().split()[1]
            page = browser.new_page(viewport=PHONE)
            page.goto(f"{url}/runs/{run_id}")
            assert page.locator('table.plan td[data-label="planner\'s reason"]').count() == 4
            assert page.evaluate(_LABELS_OUTSIDE) == []
            nodes = page.evaluate(_NODES)
            assert len(nodes) == 4
            for node in nodes:
                name = node["title"].rsplit(" (", 1)[0]
                assert "".join(node["lines"]).replace(" ", "") == name.replace(" ", ""), node
                assert node["widest"] <= node["box"] and node["scale"] >= 1, node
            _screenshot(page, _shots(tmp_path), "run-phone-width")
        finally:
            server.terminate()
