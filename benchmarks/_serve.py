"""Serves :func:`bench_script.respond` with loopwise's FakeChatServer until stdin closes.

Run by :mod:`server` in its own process, so the server's work is billed to neither
side of a comparison.
"""

from __future__ import annotations

import sys

import bench_script

from loopwise.testing import FakeChatServer

if __name__ == "__main__":
    latency = float(sys.argv[1]) if len(sys.argv) > 1 else 0.0
    with FakeChatServer(bench_script.respond, latency=latency) as server:
        print(server.base_url, flush=True)
        sys.stdin.read()
