"""Every shell block of the docs runs as printed, for a user who installed the wheel.

A page is read top to bottom in one terminal: its ``sh`` blocks run in order, in one bash,
in an empty folder, with only this checkout's wheel installed in a fresh venv
(tests/support/wheel.py, built once per session): no checkout, no ``workflows/`` or
``agents/`` but what the page writes itself (``loopwise init examples``, ``loopwise init
hybrid``, ...), offline (no ``LOOPWISE_*``, ``OPENAI_*`` or ``OTEL_*`` in the environment).
``RUN_ID`` stands for the run a reader would copy: the newest run with a pending approval,
else the newest run. A command may end 0 or 1 (a run that paused or did not complete, a
``check`` with errors); exit 2 or more (a usage or configuration mistake: a missing
``--model``, a file that does not exist) or a traceback fails the page.

A block that cannot run here says so in the line above it, with the reason::

    <!-- not run: needs a PostgreSQL server and workers on other machines -->

(the README's first-hour block is marked ``<!-- walk: ... -->``: tests/cli/test_init.py runs it
from the same wheel). Every ``loopwise`` command of every block, run or not, must parse.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from loopwise.cli.main import build_parser
from loopwise.cli.options import UsageError
from tests.support import ROOT
from tests.support.wheel import Installed

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(
    r"(?:<!-- (not run|walk): ?(.*?) -->\n)?```(?:sh|bash|shell|console)\n(.*?)```", re.S
)

PRELUDE = r"""
set -u -o errtrace
# A loopwise command may end 1 (a run that paused or did not complete); anything else that
# fails (exit 2 or more from loopwise, any failure of another command) stops the page.
_failed() {
  case "$2" in
    loopwise\ *|'return "$rc"') [ "$1" -eq 1 ] && return 0;;
  esac
  echo "docs: exit $1 from: $2" >&2
  exit 97
}
trap '_failed $? "$BASH_COMMAND"' ERR
loopwise() {
  local rc=0
  command loopwise "$@" || rc=$?
  if [ "$rc" -ge 2 ]; then echo "docs: exit $rc from: loopwise $*" >&2; exit 97; fi
  return "$rc"
}
_run_id() {
  python - <<'PY'
import json, subprocess
def ask(*argv):
    done = subprocess.run(["loopwise", *argv, "--json"], capture_output=True, text=True)
    return json.loads(done.stdout or "null")
pending = ask("pending")
print(pending[0]["run_id"] if pending else ask("runs", "list")["runs"][0]["run_id"])
PY
}
"""


def blocks(page: Path) -> list[tuple[str, str, str]]:
    """``(mark, reason, code)`` of each shell block: mark is '', 'not run' or 'walk'."""
    return [(m[0] or "", m[1] or "", m[2]) for m in BLOCK.findall(page.read_text())]


def _id(page: Path) -> str:
    return str(page.relative_to(ROOT))


def test_every_block_that_does_not_run_says_why() -> None:
    marked = 0
    for page in PAGES:
        for mark, reason, code in blocks(page):
            if mark:
                marked += 1
                assert len(reason.split()) >= 3, f"{_id(page)}: say why this does not run:\n{code}"
    assert marked  # the parser sees the markers
    # A marker that is not right above a block would silently run it: none may float.
    for page in PAGES:
        text = page.read_text()
        for found in re.finditer(r"<!-- (not run|walk):.*?-->\n(.*)", text):
            assert found[2].startswith("```"), f"{_id(page)}: {found[0]!r} is not above a block"


def _commands(code: str) -> list[list[str]]:
    """The ``loopwise`` commands of a block as argv (after ``loopwise``): continuations
    joined, comments, ``&``, pipes, redirections and here-strings cut off."""
    found = []
    for raw in code.replace("\\\n", " ").splitlines():
        line = re.split(r"\s+#", raw.strip())[0].rstrip("& ")
        command = re.split(r"\s(?:<<<|\||>|2>|&&|;)\s", line)[0]
        if command.startswith("loopwise "):
            found.append(shlex.split(command.replace("RUN_ID", "3f9c0a1b2d4e"))[1:])
    return found


def test_every_command_of_the_docs_parses_and_each_run_names_its_model() -> None:
    """Blocks that cannot run here too: a flag renamed or a missing ``--model`` (a run with
    neither it nor ``LOOPWISE_MODEL`` is exit 2) is caught on every page."""
    seen = 0
    for page in PAGES:
        for _, _, code in blocks(page):
            for argv in _commands(code):
                seen += 1
                try:
                    build_parser().parse_args(argv)
                except (UsageError, SystemExit) as e:
                    pytest.fail(f"{_id(page)}: loopwise {shlex.join(argv)}: {e}")
                if argv[0] in ("run", "eval") and "LOOPWISE_MODEL=" not in code:
                    assert "--model" in argv, f"{_id(page)}: no --model: {shlex.join(argv)}"
    assert seen > 50


RUNNABLE = [p for p in PAGES if any(not mark for mark, _, _ in blocks(p))]


@pytest.mark.slow
@pytest.mark.parametrize("page", RUNNABLE, ids=[_id(p) for p in RUNNABLE])
def test_the_pages_shell_blocks_run_as_printed(
    page: Path, tmp_path: Path, installed_wheel: Installed
) -> None:
    script = PRELUDE + "\n".join(
        code.replace("RUN_ID", '"$(_run_id)"') for mark, _, code in blocks(page) if not mark
    )
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        env=installed_wheel.env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    said = f"{_id(page)}\n--- stdout\n{done.stdout[-3000:]}\n--- stderr\n{done.stderr[-3000:]}"
    assert done.returncode in (0, 1), said
    assert "Traceback" not in done.stderr + done.stdout, said
