"""This checkout as a user gets it: a wheel built from it, installed in a fresh virtual
environment outside it, offline.

The environment borrows the test environment's packages (openai, pydantic, pytest, mcp,
pip) as a plain path: no network; ``.pth`` files there (this checkout's editable install)
stay off, so ``import loopwise`` finds the wheel only. ``pytest`` gets the small launcher
``pip install 'loopwise[test]'`` would write. tests/conftest.py's ``installed_wheel``
fixture builds it once per session.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from tests.support import ROOT


@dataclass(frozen=True)
class Installed:
    """A venv with the wheel installed."""

    venv: Path
    """The virtual environment."""
    env: dict[str, str]
    """An environment that finds the venv's ``loopwise``, ``python`` and ``pytest`` first,
    with no ``LOOPWISE_*``, ``OPENAI_*``, ``OTEL_*``, ``PYTHON*`` or ``VIRTUAL_ENV``."""


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        argv,
        cwd=cwd,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, f"{argv}: {done.stdout}\n{done.stderr}"
    return done


def install_wheel(where: Path) -> Installed:
    """Build this checkout's wheel and install it in a new venv, both under ``where``."""
    dist = where / "dist"
    pip = [sys.executable, "-m", "pip"]
    wheel_args = ["wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w"]
    _run([*pip, *wheel_args, str(dist), str(ROOT)], where)
    (wheel,) = dist.glob("loopwise-*.whl")
    venv = where / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], where)
    python = venv / "bin" / "python"
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(_run([str(python), "-c", purelib], where).stdout.strip())
    (site / "borrowed.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    _run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", "-q", str(wheel)], where)
    launcher = venv / "bin" / "pytest"
    launcher.write_text(f"#!{python}\nimport sys, pytest\nsys.exit(pytest.main())\n")
    launcher.chmod(0o755)
    unset = ("LOOPWISE_", "OPENAI_", "OTEL_", "PYTHON", "VIRTUAL_ENV")
    env = {k: v for k, v in os.environ.items() if not k.startswith(unset)}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return Installed(venv=venv, env=env)
