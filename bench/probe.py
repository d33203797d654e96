"""A page probe in a process of its own: ``python -m bench.probe BASE PATH EVERY_S``.

Fetches ``BASE + PATH`` every ``EVERY_S`` seconds until its standard input closes,
then prints one line per answer: the latency in ms and the ``X-Page-Cache`` header
("-" when absent), or ``failed``. A probe that shares a process with the benchmark's
other threads measures, besides the server, its own waits for the GIL (up to the
5 ms switch interval each time a busy thread holds it): on its own it measures
what a visitor would.
"""

from __future__ import annotations

import sys
import threading
import time


def probe(base: str, path: str, every_s: float, stop: threading.Event) -> list[str]:
    import httpx

    lines = []
    with httpx.Client(base_url=base, timeout=30.0) as client:
        due = time.monotonic()
        while not stop.is_set():
            began = time.perf_counter()
            try:
                answer = client.get(path)
            except httpx.HTTPError:
                answer = None
            if answer is not None and answer.status_code == 200:
                took_ms = (time.perf_counter() - began) * 1000
                lines.append(f"{took_ms:.3f} {answer.headers.get('x-page-cache', '-')}")
            else:
                lines.append("failed")
            due += every_s
            stop.wait(max(0.0, due - time.monotonic()))
    return lines


def main(argv: list[str]) -> int:
    base, path, every = argv
    stop = threading.Event()

    def until_stdin_closes() -> None:
        sys.stdin.read()
        stop.set()

    threading.Thread(target=until_stdin_closes, daemon=True).start()
    sys.stdout.write("\n".join(probe(base, path, float(every), stop)) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
