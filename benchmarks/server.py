"""The benchmark's Chat Completions server, in its own process.

The server runs apart from the measured process so that its work is not billed to
either side of a comparison. :class:`Server` starts this module as a script, which
serves :func:`bench_script.respond` with loopwise's FakeChatServer until stdin closes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


class Server:
    """A running server process; use as a context manager."""

    def __init__(self, latency: float = 0.0) -> None:
        self.latency = latency
        self.proc: subprocess.Popen[str] | None = None
        self.base_url = ""

    def __enter__(self) -> Server:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "server.py"), str(self.latency)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=HERE,
        )
        assert self.proc.stdout is not None
        self.base_url = self.proc.stdout.readline().strip()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # the server stops when its stdin closes
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            finally:
                if self.proc.stdout is not None:  # else a ResourceWarning when collected
                    self.proc.stdout.close()


def _serve(latency: float) -> None:
    # Imported here, in the server's process only: the measured process does not need them.
    import bench_script

    from loopwise.testing import FakeChatServer

    with FakeChatServer(bench_script.respond, latency=latency) as server:
        print(server.base_url, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    _serve(float(sys.argv[1]) if len(sys.argv) > 1 else 0.0)
