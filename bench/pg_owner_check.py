"""Benchmark: what the ownership test adds to the PostgreSQL store's one-round-trip open.

    python bench/pg_owner_check.py [--runs N]

Starts a private PostgreSQL cluster (tests/support/postgres.py), initialises a schema, then
sends the fast path's round trip (``postgres._fast_query``: the settings and the digest
query, two statements in one libpq pipeline, as ``postgres.fast_accept`` sends them) on a
new connection each time, as every command does, interleaved: as built without a trusted
owner, as built with one (``owned_clause(schema, True)``: the owner goes as the query's
parameter, given twice), and with the ownership test replaced by ``true``. A new backend's
catalogue caches are cold, which is what a command meets. Prints the medians of the round
trip alone and their ratios.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "src"))
sys.path.insert(0, os.path.join(HERE, ".."))

from cafleet.store import postgres, schema
from cafleet.store.engines import open_store


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=60)
    args = parser.parse_args()
    from tests.support.postgres import Cluster, missing_reason

    reason = missing_reason()
    if reason:
        raise SystemExit(reason)
    cluster = Cluster()
    try:
        cluster.start()
        url = cluster.fresh_database()
        open_store(url).close()
        settings, built = postgres._fast_query(postgres.DEFAULT_SCHEMA, 5.0, "")
        clause = postgres.owned_clause(postgres.DEFAULT_SCHEMA, False)
        assert built.count(clause) == 1
        _, trusted = postgres._fast_query(postgres.DEFAULT_SCHEMA, 5.0, "postgres")
        assert trusted.count(postgres.owned_clause(postgres.DEFAULT_SCHEMA, True)) == 1
        queries = {
            "with the ownership test": (built, ()),
            "with a trusted owner": (trusted, ("postgres", "postgres")),
            "without it": (built.replace(clause, "true"), ()),
        }
        expected = (schema.HEAD_VERSION, postgres.baseline_digest(), True)
        samples: dict[str, list[float]] = {name: [] for name in queries}
        for i in range(args.runs):
            order = list(queries)[i % len(queries) :] + list(queries)[: i % len(queries)]  # rotate who goes first
            for name in order:
                query, params = queries[name]
                conn = postgres.connect(url, 5.0, postgres.DEFAULT_SCHEMA, settings=False)
                started = time.perf_counter()
                row = conn.pipeline([(settings, ()), (query, params)]).fetchone()
                samples[name].append(time.perf_counter() - started)
                conn.close()
                assert row is not None and row[:3] == expected, row  # the digest accepted, the owner test true
        ms = {name: statistics.median(values) * 1000 for name, values in samples.items()}
        print(f"the fast path's round trip on a new backend, {args.runs} runs each, interleaved (medians):")
        for name, value in ms.items():
            print(f"  {name:<24} {value:6.2f} ms")
        print(f"  with / without: {ms['with the ownership test'] / ms['without it']:.3f}x")
        print(f"  trusted owner / without: {ms['with a trusted owner'] / ms['without it']:.3f}x")
    finally:
        cluster.stop()


if __name__ == "__main__":
    main()
