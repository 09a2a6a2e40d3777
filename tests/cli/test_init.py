"""`loopwise init`: a starter project for the user who installed loopwise (issue 18).

The slow test is the whole first hour of such a user: it builds a wheel of this checkout,
installs it into a fresh virtual environment outside the checkout, and from an empty
folder runs `loopwise init` for each kind, then `pytest`, `check`, `run` and `eval` on
what it wrote; `decide` names the init command and the demo says what it needs.
"""

from __future__ import annotations

import json
import shlex
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from loopwise.cli.main import main
from loopwise.evidence.scaffold import EXAMPLES, TEMPLATES, init_project
from tests.support import ROOT
from tests.support.wheel import Installed


def test_init_writes_each_kind_beside_the_others_and_never_over_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for kind, template in TEMPLATES.items():
        assert main(["init", kind, str(tmp_path)]) == 0
        out = capsys.readouterr().out
        assert template.target.split(":")[0] in out and f"$ cd {tmp_path}" in out
        assert all(f"$ {command}" in out for command in template.commands())
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted(
        [
            *("triage.py", "triage_cases.jsonl", "test_triage.py"),
            *("orders_agent.py", "orders_cases.jsonl", "test_orders_agent.py"),
            *("refunds.py", "refunds_cases.jsonl", "test_refunds.py"),
            *("tickets.py", "triage_workflow.py", "triage_agent.py", "tickets.jsonl"),
            "test_compare.py",
        ]
    )
    for template in TEMPLATES.values():
        cases = (tmp_path / template.dataset).read_text().splitlines()
        assert len(cases) == (49 if template.kind == "compare" else 10) and all(
            {"input", "expected"} <= json.loads(c).keys() for c in cases
        )
    mine = tmp_path / "triage.py"
    mine.write_text("# my own work\n")
    assert main(["init", "workflow", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "already has test_triage.py, triage.py, triage_cases.jsonl; nothing written" in err
    assert err.count("\n") == 1 and mine.read_text() == "# my own work\n"
    assert main(["init", "workflow", str(tmp_path), "--force"]) == 0
    assert "triage = (" in mine.read_text()
    assert main(["init", "pipeline"]) == 2
    assert "invalid choice: 'pipeline'" in capsys.readouterr().err


def _checkout_examples() -> dict[str, bytes]:
    """The checkout's canonical examples as git tracks them: relative path → bytes."""
    listed = subprocess.run(
        ["git", "ls-files", *EXAMPLES.folders],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if listed.returncode or not listed.stdout.strip():
        pytest.skip("not a git checkout: the examples' tracked files are unknown")
    return {name: (ROOT / name).read_bytes() for name in listed.stdout.split()}


def _written(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for folder in EXAMPLES.folders
        for p in (root / folder).rglob("*")
        if p.is_file()
    }


def test_init_examples_writes_the_checkouts_examples_and_never_over_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", "examples", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "wrote the canonical examples" in out and f"$ cd {tmp_path}" in out
    assert all(f"$ {command}" in out for command in EXAMPLES.commands())
    assert _written(tmp_path) == _checkout_examples()
    mine = tmp_path / "workflows" / "ticket_triage.py"
    mine.write_text("# my own work\n")
    assert main(["init", "examples", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "already has workflows/_triage_rules.py" in err and "nothing written" in err
    assert err.count("\n") == 1 and mine.read_text() == "# my own work\n"
    assert main(["init", "examples", str(tmp_path), "--force"]) == 0
    assert _written(tmp_path) == _checkout_examples()
    monkeypatch.chdir(tmp_path)
    for command in EXAMPLES.commands():
        capsys.readouterr()
        assert main([*shlex.split(command)[1:], "--json"]) in (0, 1), capsys.readouterr().err
        doc = json.loads(capsys.readouterr().out)
        wanted = "awaiting_approval" if "refund_desk" in command else "completed"
        assert doc.get("status", "completed") == wanted, command


def test_each_template_runs_offline_and_its_eval_is_sensible(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    rates = {}
    for kind, template in TEMPLATES.items():
        init_project(kind)
        spec = template.target
        assert all(main(["check", target]) == 0 for target in template.targets)
        argv = ["run", spec, "--model", "scripted", "--input-text", template.example, "--json"]
        capsys.readouterr()
        assert main(argv) == 0, capsys.readouterr().err
        assert json.loads(capsys.readouterr().out)["status"] == "completed"
        argv = ["eval", *template.targets, "--dataset", template.dataset, "--model", "scripted"]
        assert main([*argv, *template.eval_flags, "--json"]) == 0
        out, err = capsys.readouterr()
        assert "schema filler" not in err  # each template brings its offline model
        doc = json.loads(out)
        for measured in doc["targets"]:
            rates[measured["target"]] = measured["correct_rate"]
        if kind == "compare":  # one task twice: the first eval recommends, citing the numbers
            assert doc["recommendation"]["choice"] == "triage_workflow.py:triage"
            assert "→ the workflow" in doc["recommendation"]["text"]
    # Sensible, not perfect: each offline model is right on most cases, wrong on some.
    assert len(rates) == 5 and all(0.5 <= rate < 1 for rate in rates.values()), rates


def test_each_starters_offline_model_is_under_25_lines_thanks_to_the_testing_kit() -> None:
    for kind in TEMPLATES:
        for source in (ROOT / "src" / "loopwise" / "templates" / kind).glob("*.py"):
            text = source.read_text()
            if "offline_model" not in text or source.name.startswith("test_"):
                continue
            head, marker, model = text.partition("\n# The offline model")
            assert marker and "offline_model" not in head.split('"""', 2)[-1], source
            lines = [line for line in model.splitlines()[1:] if line.strip()]
            assert len(lines) < 25, f"{source.name}: {len(lines)} lines"


def test_decide_names_the_init_command_and_no_checkout_path_outside_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    for known, cost, kind in [("yes", "cheap", "workflow"), ("no", "expensive", "hybrid")]:
        assert main(["decide", "--steps-known", known, "--wrong-step-cost", cost, "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["init"] == f"loopwise init {kind}"
        compare = TEMPLATES["compare"]
        assert doc["next_steps"] == [
            *(doc["init"], *TEMPLATES[kind].commands()),
            *("loopwise init compare compare", "cd compare", compare.commands()[-1]),
        ]
        assert not any("workflows/" in step for step in doc["next_steps"])
        # start_from names what the wheel ships: the target `init` wrote, here.
        assert doc["start_from"] == TEMPLATES[kind].target
        init_project(kind, tmp_path / kind)
        assert (tmp_path / kind / doc["start_from"].split(":")[0]).is_file()


def test_the_demo_outside_a_checkout_says_what_it_needs_and_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from loopwise.cli import demo

    assert demo.main(["--root", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert "passed" not in out and "loopwise init" in err and "workflows/ticket_triage.py" in err
    assert not (tmp_path / ".loopwise").exists()  # nothing ran, nothing was emptied


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    return done


@pytest.mark.slow
def test_a_user_who_installed_the_wheel_starts_a_project_of_each_kind(
    tmp_path: Path, installed_wheel: Installed
) -> None:
    venv, env = installed_wheel.venv, installed_wheel.env
    project = tmp_path / "project"
    project.mkdir()

    def ok(*argv: str) -> str:
        done = _run(list(argv), project, env)
        assert done.returncode == 0, f"{argv}: {done.stdout}\n{done.stderr}"
        return done.stdout

    where = ok("python", "-c", "import loopwise; print(loopwise.__file__)")
    assert Path(where).is_relative_to(venv) and not Path(where).is_relative_to(ROOT)
    assert "loopwise init hybrid" in ok(
        "loopwise", "decide", "--steps-known", "no", "--wrong-step-cost", "expensive"
    )
    for kind in TEMPLATES:
        ok("loopwise", "init", kind)
    assert "5 passed" in ok("python", "-m", "pytest", "-q", "-p", "no:cacheprovider")
    for template in TEMPLATES.values():
        ok("loopwise", "check", template.target)
        ran = ok(
            "loopwise",
            "run",
            template.target,
            "--model",
            "scripted",
            "--input-text",
            template.example,
            "--json",
        )
        assert json.loads(ran)["status"] == "completed"
        ok(
            "loopwise",
            "eval",
            template.target,
            "--dataset",
            template.dataset,
            "--model",
            "scripted",
            *template.eval_flags,
        )
    # The hybrid's eval kept its paused cases in its own store: nothing waits here.
    assert json.loads(ok("loopwise", "pending", "--json")) == []
    # The hybrid's large refund waits for a person; approved, it resumes in a new process,
    # which makes its ledger with refunds.py's make_deps() (deps are never stored).
    large = "Order O-3004 never came. Refund me."
    refund_desk = TEMPLATES["hybrid"].target
    paused = _run(
        ["loopwise", "run", refund_desk, "--model", "scripted", "--input-text", large, "--json"],
        project,
        env,
    )
    assert json.loads(paused.stdout)["status"] == "awaiting_approval", paused.stderr
    run_id = json.loads(paused.stdout)["run_id"]
    ok("loopwise", "approve", run_id, "--by", "test")
    assert json.loads(ok("loopwise", "resume", run_id, "--json"))["status"] == "completed"
    with closing(sqlite3.connect(project / "refunds.db")) as ledger:
        paid = ledger.execute("SELECT amount_cents FROM effects WHERE order_id = 'O-3004'")
        assert paid.fetchall() == [(12900,), (0,)]  # the refund and its note, once each
    demo = _run(["python", "-m", "loopwise.cli.demo"], project, env)
    assert demo.returncode != 0 and "demo passed" not in demo.stdout
    assert "loopwise init" in demo.stdout + demo.stderr


@pytest.mark.slow
def test_a_user_who_installed_the_wheel_gets_the_guides_examples(
    tmp_path: Path, installed_wheel: Installed
) -> None:
    """The wheel ships the checkout's own workflows/ and agents/ (pyproject's hatch
    sources): `loopwise init examples` writes them, byte for byte, and the demo passes
    on them there (what `make demo` does in a checkout, as the README says)."""
    env = installed_wheel.env
    done = _run(["loopwise", "init", "examples"], tmp_path, env)
    assert done.returncode == 0, done.stderr
    assert _written(tmp_path) == _checkout_examples()
    demo = _run(["python", "-m", "loopwise.cli.demo"], tmp_path, env)
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:]
    assert "demo passed (offline, scripted model)" in demo.stdout
    assert "$ loopwise run workflows/refund_desk.py:refund_desk" in demo.stdout


def _walk_block() -> list[str]:
    """The README's first-hour block, one command per line, comments dropped."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- walk", 1)[1].split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def _serve_once(argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    """Start the inbox as printed, read its page once, stop it; the page."""
    import urllib.request

    with subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    ) as server:
        try:
            assert server.stdout is not None
            first = server.stdout.readline()
            assert first.startswith("serving http://127.0.0.1:"), first
            with urllib.request.urlopen(first.split()[1], timeout=30) as page:
                return str(page.read().decode())
        finally:
            server.terminate()
            server.wait(timeout=30)


@pytest.mark.slow
def test_the_readmes_first_hour_runs_as_printed_from_the_wheel(
    tmp_path: Path, installed_wheel: Installed
) -> None:
    env = installed_wheel.env
    walk = _walk_block()
    assert walk[0] == "mkdir desk && cd desk" and walk[1] == "loopwise init compare"
    desk = tmp_path / "desk"
    desk.mkdir()
    run_id = ""
    seen: dict[str, str] = {}
    for line in walk[1:]:
        argv = shlex.split(line.replace("RUN_ID", run_id))
        if argv[:2] == ["loopwise", "serve"]:
            seen["serve"] = _serve_once(argv, desk, env)
            continue
        done = _run(argv, desk, env)
        paused = argv[:2] == ["loopwise", "run"]
        assert done.returncode == (1 if paused else 0), f"{line}: {done.stdout}\n{done.stderr}"
        seen[argv[1] if argv[0] == "loopwise" else argv[0]] = done.stdout
        if argv[:2] == ["loopwise", "pending"]:
            listed = _run(["loopwise", "pending", "--json"], desk, env).stdout
            run_id = json.loads(listed)[0]["run_id"]
    assert "2 passed" in seen["pytest"]
    assert "Recommendation:" in seen["eval"] and "→ the workflow" in seen["eval"]
    assert seen["decide"].startswith("architecture: hybrid")
    assert "issue_refund" in seen["pending"] and run_id
    assert "completed" in seen["resume"].splitlines()[0]
    assert "loopwise" in seen["serve"] and "<script" not in seen["serve"]


@pytest.mark.parametrize("where", ["/proc/nope", "/dev/null/x"])
def test_init_into_a_folder_it_cannot_make_says_so_in_one_line(
    where: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init", "agent", where]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f"cannot create the folder {where}" in err


@pytest.mark.slow  # mypy in a subprocess over the ten example files
def test_the_examples_init_writes_type_check_under_mypy_strict(tmp_path: Path) -> None:
    # The guides send users to these files to copy from: what they write must pass the
    # checker a careful team runs (issue 46 review 2). Before: a plan policy summing
    # `args_dict()["amount_cents"]` (a JSONObject then), a route table keyed by a Literal
    # read with a plain str, and an import of another module's private name all failed.
    assert main(["init", "examples", str(tmp_path)]) == 0
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "workflows", "agents"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=False,
    )
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert not errors, "\n".join(errors)
