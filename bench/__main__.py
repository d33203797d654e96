"""Run the benchmarks: ``python -m bench [NAME ...] [--quick] [--postgres]``.

1. Choose the benchmark database (SQLite ``var/bench.sqlite3``; ``--postgres`` or
   BENCH_DATABASE_URL for PostgreSQL), recreate it and migrate it in a child process.
2. Configure this process like the children (Redis database 14) and flush that Redis.
3. Run each benchmark; write ``bench/results/<name>[-postgres][-quick].json`` and
   ``.md``. Every child process is killed on the way out, whatever the way out is.
"""

from __future__ import annotations

import argparse
import importlib
import shlex
import sys
from types import ModuleType
from typing import Any

from bench import BENCHMARKS
from bench.common import (
    BENCH_REDIS_DB,
    BenchError,
    Children,
    bench_environment,
    choose_database,
    django_setup,
    exit_on_sigterm,
    flush_bench_redis,
    machine_info,
    migrate,
    utcnow,
    write_results,
)

# Benchmarks whose module (and results file) has another name: bench/<module>.py.
MODULE_OF: dict[str, str] = {"realtime_sse": "sse", "class": "classroom"}


def parse(argv: list[str], modules: dict[str, ModuleType]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench", description="Run the benchmarks side by side."
    )
    parser.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help=f"benchmarks to run (default: all of {', '.join(BENCHMARKS)})",
    )
    parser.add_argument("--quick", action="store_true", help="a small, fast run")
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="use PostgreSQL database library_bench (or BENCH_DATABASE_URL)",
    )
    parser.add_argument(
        "--no-write", action="store_true", help="print only; leave bench/results alone"
    )
    for module in modules.values():
        module.add_arguments(parser)
    options = parser.parse_args(argv)
    unknown = sorted(set(options.names) - set(BENCHMARKS))
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}")
    options.names = options.names or list(BENCHMARKS)
    return options


def main(argv: list[str]) -> int:
    modules = {
        name: importlib.import_module(f"bench.{MODULE_OF.get(name, name)}")
        for name in BENCHMARKS
    }
    options = parse(argv, modules)
    database = choose_database(postgres=options.postgres)
    environment = bench_environment(database)
    children = Children(environment)
    with exit_on_sigterm(), children.running():
        try:
            print(f"bench database: {database.vendor} {database.name}", flush=True)
            database.recreate()
            migrate(children)
            django_setup(environment)
            flush_bench_redis()
            for name in options.names:
                print(f"== {name}", flush=True)
                machine = machine_info()
                started = utcnow()
                result: dict[str, Any] = modules[name].run(children, options)
                document = {
                    "benchmark": name,
                    "date": started.isoformat(timespec="seconds"),
                    "duration_s": round((utcnow() - started).total_seconds(), 1),
                    "command": " ".join(["python -m bench", shlex.join(argv)]).strip(),
                    "database": database.vendor,
                    "redis_db": BENCH_REDIS_DB,
                    "quick": options.quick,
                    "machine": machine,
                    "results": {name: result},
                }
                markdown = modules[name].markdown_report(document)
                if options.no_write:
                    print(markdown)  # the report the file would hold
                else:
                    stem = MODULE_OF.get(name, name)
                    stem += "-postgres" if database.vendor != "sqlite" else ""
                    stem += "-quick" if options.quick else ""
                    for path in write_results(stem, document, markdown):
                        print(f"wrote {path}")
        except BenchError as error:
            print(f"bench: {error}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print("bench: interrupted; child processes killed", file=sys.stderr)
            return 130
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
