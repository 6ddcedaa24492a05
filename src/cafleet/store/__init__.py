"""The SQLite file: connection and pragmas, the baseline schema and its ledger, and the
format diagnosis that runs before any write."""
