"""The PostgreSQL catalogue checked against store/schema.py's declaration: the DDL
rendered for this engine, what the catalogue must show of it, the diagnosis's fast path
(one round trip for a healthy schema), the detailed diagnosis, the owners' check and the
initialisation of an empty schema."""

from __future__ import annotations

# MD5 from the interpreter's own module, without hashlib's Python layer (libpq maps
# OpenSSL's libcrypto in anyway; docs/performance.md "On PostgreSQL").
try:
    from _md5 import md5
except ImportError:  # an interpreter built without it
    from hashlib import md5

from cafleet import clock
from cafleet.store import diagnosis, libpq, role_text, schema
from cafleet.store.postgres.session import lock_key, rollback_quietly, settings_sql

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    pass


# --- the schema, rendered from store/schema.py's declaration ----------------------------
# An identity column -> BIGINT identity (never reuses an id, like AUTOINCREMENT); INTEGER ->
# BIGINT; INT4 -> INTEGER; REAL (SQLite's 8-byte float) -> DOUBLE PRECISION; TEXT and
# VARCHAR(255) unchanged. fleets and members reference each other, so fleets' foreign key
# is added after members (LATE_FOREIGN_KEYS).

# Rendered when first needed (a new schema's initialisation, an auxiliary object's
# creation; module __getattr__ below): an open of a healthy schema needs only the names.
AUX_TABLE_NAMES = tuple(table.name for table in schema.DECLARED_AUX_TABLES)  # outside the format, optional
AUX_INDEX_NAMES = tuple(index.name for index in schema.DECLARED_AUX_INDEXES)
AUX_NAMES = (*AUX_TABLE_NAMES, *AUX_INDEX_NAMES)
TABLES: dict[str, str]
LATE_FOREIGN_KEYS: tuple[str, ...]
INDEXES: dict[str, str]  # the same statements on both engines
AUX_INDEXES: dict[str, str]
AUX_TABLES: dict[str, str]
_DDL: list[schema.Rendered] = []


def ddl() -> schema.Rendered:
    """This engine's DDL, rendered from the declaration once per process."""
    if not _DDL:
        _DDL.append(schema.render(schema.POSTGRES))
    return _DDL[0]


# What the catalogue must show, as read back by _SHAPE_QUERY (the test suite checks that a
# freshly initialised schema reads back exactly this). An auxiliary table whose columns
# read back otherwise is reported "altered" by `cafleet doctor` (never a reason to refuse
# the schema).
# A column's kind as format_type() reads it back.
CATALOGUE_TYPES: dict[str, str] = {
    "int": "bigint",
    "int4": "integer",
    "text": "text",
    "real": "double precision",
    "varchar255": "character varying(255)",
}


class CatalogueShape:
    """What PostgreSQL's catalogue shows of store/schema.py's declaration, line by line as
    _SHAPE_QUERY renders it, for the required tables: ``columns`` (table -> column
    lines), ``constraints`` (table -> constraint definitions) and ``indexes`` (name ->
    "table (columns)"); the auxiliary tables' lines are :func:`expected_aux_columns`."""

    __slots__ = ("columns", "constraints", "indexes")

    def __init__(self) -> None:
        self.columns = {
            table.name: tuple(_catalogue_column(c) for c in table.columns) for table in schema.DECLARED_TABLES
        }
        self.constraints = {table.name: _catalogue_constraints(table) for table in schema.DECLARED_TABLES}
        self.indexes = {index.name: f"{index.table} ({', '.join(index.columns)})" for index in schema.DECLARED_INDEXES}


def catalogue_shape() -> CatalogueShape:
    return CatalogueShape()


def expected_aux_columns() -> dict[str, tuple[str, ...]]:
    """The auxiliary tables' column lines (``cafleet doctor``'s "altered" check)."""
    return {table.name: tuple(_catalogue_column(c) for c in table.columns) for table in schema.DECLARED_AUX_TABLES}


def _catalogue_column(column: schema.Column) -> str:
    kind = CATALOGUE_TYPES[column.kind]
    text = f"{column.name} {kind}"
    if column.not_null or column.primary:
        text += " NOT NULL"
    if column.identity:
        text += " identity"
    if column.default is not None:
        text += f" DEFAULT {column.default}::{kind}"
    return text


def _catalogue_constraints(table: schema.Table) -> tuple[str, ...]:
    constraints = [f"PRIMARY KEY ({', '.join(table.primary_key)})"]
    for column in table.columns:
        if column.references is not None:
            parent, key, on_delete = column.references
            constraints.append(f"FOREIGN KEY ({column.name}) REFERENCES {parent}({key}) ON DELETE {on_delete}")
    return tuple(constraints)


_SHAPE = catalogue_shape()
EXPECTED_COLUMNS: dict[str, tuple[str, ...]] = _SHAPE.columns
EXPECTED_CONSTRAINTS: dict[str, tuple[str, ...]] = _SHAPE.constraints
EXPECTED_AUX_COLUMNS: dict[str, tuple[str, ...]]  # expected_aux_columns(), when first asked for
EXPECTED_INDEXES: dict[str, str] = _SHAPE.indexes


def __getattr__(name: str) -> object:
    rendered = ddl()
    values = {
        "TABLES": rendered.tables,
        "LATE_FOREIGN_KEYS": rendered.late_foreign_keys,
        "INDEXES": rendered.indexes,
        "AUX_INDEXES": rendered.aux_indexes,
        "AUX_TABLES": rendered.aux_tables,
    }
    if name == "EXPECTED_AUX_COLUMNS":
        return expected_aux_columns()
    if name in values:
        return values[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# One round trip: every relation of the schema, every column, every constraint and every
# index definition, as (kind, table, text).
_SHAPE_QUERY = """
SELECT 'relation', c.relname, c.relkind::text FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = ?
UNION ALL
SELECT 'column', c.relname, a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
  || CASE WHEN a.attnotnull THEN ' NOT NULL' ELSE '' END
  || CASE WHEN a.attidentity <> '' THEN ' identity' ELSE '' END
  || COALESCE(' DEFAULT ' || pg_get_expr(d.adbin, d.adrelid), '')
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
  JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
  LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
  WHERE n.nspname = ? AND c.relkind = 'r'
UNION ALL
SELECT 'constraint', c.relname, pg_get_constraintdef(k.oid) FROM pg_constraint k
  JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
  WHERE n.nspname = ?
UNION ALL
SELECT 'index', i.relname, t.relname || ' ('
  || array_to_string(ARRAY(SELECT pg_get_indexdef(x.indexrelid, k, true) FROM generate_series(1, x.indnkeyatts) k), ', ')
  || ')'
  || CASE WHEN x.indisunique THEN ' unique' ELSE '' END
  || COALESCE(' WHERE ' || pg_get_expr(x.indpred, x.indrelid), '')
  FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid
  JOIN pg_namespace n ON n.oid = t.relnamespace WHERE n.nspname = ?
UNION ALL
SELECT 'owner', '', pg_get_userbyid(n.nspowner)::text FROM pg_namespace n WHERE n.nspname = ?
UNION ALL
SELECT 'owner', c.relname, pg_get_userbyid(c.relowner)::text FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = ?
UNION ALL
SELECT 'user', '', current_user::text
"""


# --- the diagnosis's fast path ---------------------------------------------------------------
# A healthy schema is accepted after one round trip: the settings, then one query over
# pg_catalog reading the ledger's version and an MD5 digest of the required shape, each line
# rendered exactly as _SHAPE_QUERY renders it (so what the digest accepts, the detailed check
# accepts too). The digest of the baseline is computed here from EXPECTED_*. Anything else
# (an empty schema, another one, a newer ledger, a damaged or merely different shape, a
# server without md5()) falls back to the detailed diagnosis, which names what is wrong.
# Auxiliary objects are left out of the digest, as the detailed check leaves them out.
#
# A new backend starts with its catalogue caches cold, so what the query names costs more
# than what it reads (docs/performance.md): the required objects are looked up by regclass
# casts of qualified names, not by joining pg_namespace and pg_class (planning those joins
# cost more than the rest of the open), and lines are built with concat(), one function, not
# with || and COALESCE, whose operators each have to be resolved. A missing object makes
# the cast fail, which is a fallback too. Table names render unqualified because the
# settings put the schema alone on search_path; a different search_path renders them
# qualified, so the digest differs and the detailed path (which sets it again) runs.

_FAST_LINES = """
SELECT concat('column ', a.attrelid::regclass, ' ', a.attname, ' ', format_type(a.atttypid, a.atttypmod),
  CASE WHEN a.attnotnull THEN ' NOT NULL' END, CASE WHEN a.attidentity <> '' THEN ' identity' END,
  CASE WHEN d.adbin IS NOT NULL THEN ' DEFAULT ' END, pg_get_expr(d.adbin, d.adrelid)) AS line
  FROM pg_attribute a LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
  WHERE a.attrelid = ANY('{TABLES}'::regclass[]) AND a.attnum > 0 AND NOT a.attisdropped
UNION ALL
SELECT concat('constraint ', k.conrelid::regclass, ' ', pg_get_constraintdef(k.oid)) FROM pg_constraint k
  WHERE k.conrelid = ANY('{TABLES}'::regclass[]) AND k.contype <> 'n'
UNION ALL
SELECT concat('index ', x.indexrelid::regclass, ' ', x.indrelid::regclass, ' (', concat_ws(', ', {KEY_COLUMNS}), ')',
  CASE WHEN x.indisunique THEN ' unique' END, CASE WHEN x.indpred IS NOT NULL THEN ' WHERE ' END,
  pg_get_expr(x.indpred, x.indrelid))
  FROM pg_index x WHERE x.indexrelid = ANY('{INDEXES}'::regclass[])
"""
_fast_queries: dict[tuple[str, float, bool], tuple[str, str]] = {}
_baseline: list[str] = []


def _fast_query(schema_name: str, busy_timeout: float, trusted_owner: str = "") -> tuple[str, str]:
    """The settings and the digest query, two statements sent in one round trip; the
    digest query takes the trusted owner, when there is one, as its parameters."""
    key = (schema_name, busy_timeout, bool(trusted_owner))
    query = _fast_queries.get(key)
    if query is None:
        query = _fast_queries[key] = _build_fast_query(schema_name, busy_timeout, bool(trusted_owner))
    return query


def _build_fast_query(schema_name: str, busy_timeout: float, trusted: bool = False) -> tuple[str, str]:
    def names(objects) -> str:  # a regclass[] literal; a checked schema name needs no quotes in it
        return "{" + ",".join(f"{schema_name}.{name}" for name in objects) + "}"

    # An index's key columns one by one (no set-returning subquery to plan), up to one more
    # than any required index has, so that a longer index renders differently.
    width = 1 + max(definition.count(",") + 1 for definition in EXPECTED_INDEXES.values())
    columns = ", ".join(f"NULLIF(pg_get_indexdef(x.indexrelid, {k}, true), '')" for k in range(1, width + 1))
    lines = (
        _FAST_LINES.replace("{TABLES}", names(EXPECTED_COLUMNS))
        .replace("{INDEXES}", names(EXPECTED_INDEXES))
        .replace("{KEY_COLUMNS}", columns)
    )
    # Which auxiliary objects exist: to_regclass() is a cache lookup, with no scan to plan.
    auxiliary = "".join(f", to_regclass('{schema_name}.{name}') IS NOT NULL" for name in AUX_NAMES)
    return settings_sql(schema_name, busy_timeout), (
        f'SELECT (SELECT max(version) FROM "{schema_name}".{schema.LEDGER_TABLE}), '
        + f"md5(string_agg(line, E'\\n' ORDER BY line COLLATE \"C\")), {owned_clause(schema_name, trusted)}"
        + f"{auxiliary} FROM ({lines}) lines"
    )


def owned_clause(schema_name: str, trusted: bool) -> str:
    """The fast query's ownership test: true when the schema and every table cafleet uses
    that exists belong to the connecting role or, when ``trusted``, the trusted owner (the
    query's parameter, given twice), looked up by oid as the digest's objects are.
    False or an error means "diagnose in detail", which names the owner and refuses
    (bench/pg_owner_check.py measures what it adds)."""
    owners = "current_user" + (", ?::text" if trusted else "")
    tables = "{" + ",".join(f"{schema_name}.{name}" for name in EXPECTED_COLUMNS) + "}"
    aux_oids = ", ".join(f"to_regclass('{schema_name}.{name}')" for name in AUX_TABLE_NAMES)
    return (
        f"(SELECT pg_get_userbyid(nspowner) IN ({owners}) FROM pg_namespace WHERE oid = '{schema_name}'::regnamespace)"
        f" AND NOT EXISTS (SELECT FROM pg_class WHERE (oid = ANY('{tables}'::regclass[]) OR oid IN ({aux_oids}))"
        f" AND pg_get_userbyid(relowner) NOT IN ({owners}))"
    )


def baseline_digest() -> str:
    """The MD5 digest the fast path expects: EXPECTED_* as the catalogue renders them,
    sorted and joined by newlines (computed once per process)."""
    if not _baseline:
        lines = [f"column {table} {column}" for table, columns in EXPECTED_COLUMNS.items() for column in columns]
        lines += [f"constraint {table} {c}" for table, constraints in EXPECTED_CONSTRAINTS.items() for c in constraints]
        lines += [f"index {name} {definition}" for name, definition in EXPECTED_INDEXES.items()]
        _baseline.append(md5("\n".join(sorted(lines)).encode(), usedforsecurity=False).hexdigest())
    return _baseline[0]


def fast_accept(conn, schema_name: str, busy_timeout: float, trusted_owner: str = "") -> set[str] | None:
    """When one round trip shows the ledger at the head version, exactly the baseline's
    shape and every object owned by the connecting role or ``trusted_owner`` (the settings
    are then in effect): the tables present, required and auxiliary, and the auxiliary
    indexes present (PgStore.present). None means "diagnose in detail"."""
    try:
        settings, digest = _fast_query(schema_name, busy_timeout, trusted_owner)
        row = conn.pipeline([(settings, ()), (digest, (trusted_owner,) * 2 if trusted_owner else ())]).fetchone()
    except libpq.Error:
        if conn.broken or conn.closed:
            raise
        return None  # a missing ledger or object, no md5(): the detailed diagnosis says what
    if row is None or row[:3] != (schema.HEAD_VERSION, baseline_digest(), True):
        return None
    return {*EXPECTED_COLUMNS, *(name for name, present in zip(AUX_NAMES, row[3:]) if present)}


def read_shape(conn, schema_name: str) -> dict[str, dict[str, set[str]]]:
    found: dict[str, dict[str, set[str]]] = {
        "relation": {},
        "column": {},
        "constraint": {},
        "index": {},
        "owner": {},  # "" -> the schema's owner; a relation's name -> its owner
        "user": {},  # "" -> the connecting role
    }
    for kind, table, text in conn.execute(_SHAPE_QUERY, (schema_name,) * _SHAPE_QUERY.count("?")).fetchall():
        found[kind].setdefault(table, set()).add(text)
    return found


def diagnose(conn, where: str, schema_name: str, found: dict | None = None, trusted_owner: str = "") -> str:
    """ "empty" (initialise it) or "cafleet" (use it); refuses anything else with one line,
    having only read. ``found``: the schema's shape as :func:`read_shape` read it. A schema
    or a table of cafleet's owned by a role other than the connecting one and
    ``trusted_owner`` is refused first, even an empty schema: its owner can read and change
    everything in it."""
    if found is None:
        found = read_shape(conn, schema_name)
    place = f"schema {schema_name} of database {where}"
    check_owners(found, place, trusted_owner)
    if not found["relation"]:
        return "empty"
    if schema.LEDGER_TABLE not in found["column"]:
        raise diagnosis.Refused(
            f"{place} holds something else (no cafleet ledger {schema.LEDGER_TABLE}); it was left unchanged. "
            "Choose another schema with CAFLEET_PG_SCHEMA or another database."
        )
    try:
        version = conn.execute(f'SELECT max(version) FROM "{schema_name}".{schema.LEDGER_TABLE}').fetchone()[0]
    except libpq.Error as exc:
        raise diagnosis.Refused(f"{place} has an unreadable schema ledger ({exc}); it was left unchanged.") from None
    diagnosis.check_version(version, place, located=True)
    problem = first_shape_problem(found)
    if problem:
        raise diagnosis.incompatible(place, problem)
    return "cafleet"


def check_owners(found: dict[str, dict[str, set[str]]], place: str, trusted_owner: str) -> None:
    """Refuse (one line) when the schema, or one of cafleet's tables (required or auxiliary)
    that exists, belongs to a role other than the connecting one and ``trusted_owner``."""
    user = next(iter(found["user"].get("", {""})))
    allowed = {user, trusted_owner} - {""}
    objects = [("", place)] + [
        (table, f"table {table} in {place}")
        for table in (*EXPECTED_COLUMNS, *AUX_TABLE_NAMES)
        if table in found["owner"]
    ]
    for name, what in objects:
        owner = next(iter(found["owner"].get(name, ())), None)
        if owner is None or owner in allowed:
            continue
        trusted = f" nor by the trusted owner {role_text(trusted_owner)}" if trusted_owner else ""
        refused = diagnosis.Refused(
            f"{what} is owned by role {role_text(owner)}, not by {role_text(user)} that connects{trusted}: "
            "its owner can read and change every message, so cafleet left it unchanged; use a schema of your own "
            f"(CAFLEET_PG_SCHEMA) or, if you trust that role, set CAFLEET_PG_TRUSTED_OWNER={role_text(owner)}."
        )
        refused.fix = (  # type: ignore[attr-defined]
            f"set CAFLEET_PG_SCHEMA to a schema of your own, or CAFLEET_PG_TRUSTED_OWNER={role_text(owner)} "
            "if that role may read every message; nothing was changed"
        )
        raise refused


def first_shape_problem(found: dict[str, dict[str, set[str]]]) -> str | None:
    """The first required object missing or altered (:func:`diagnosis.first_problem`)."""
    return diagnosis.first_problem(PgCatalogue(found))


class PgCatalogue:
    """A schema's catalogue as :func:`diagnosis.first_problem` reads it: the lines
    :func:`read_shape` read, compared with :data:`EXPECTED_COLUMNS` and the rest of the
    declaration's catalogue shape."""

    def __init__(self, found: dict[str, dict[str, set[str]]]) -> None:
        self.found = found

    def columns(self, table: str) -> dict[str, str] | None:
        lines = self.found["column"].get(table)
        return None if lines is None else {line.split(" ", 1)[0]: line for line in lines}

    def expected_columns(self, table: str) -> dict[str, str]:
        return {line.split(" ", 1)[0]: line for line in EXPECTED_COLUMNS[table]}

    def describe(self, line: str) -> str:
        return line

    def blocks_inserts(self, line: str) -> bool:
        return " NOT NULL" in line and " DEFAULT " not in line and "identity" not in line

    def keys_problem(self, table: str) -> str | None:
        for constraint in EXPECTED_CONSTRAINTS[table]:
            if constraint not in self.found["constraint"].get(table, ()):
                return f"constraint {constraint} on {table} is missing or altered"
        return None

    def has_index(self, index: schema.Index) -> bool:
        return EXPECTED_INDEXES[index.name] in self.found["index"].get(index.name, ())


def initialise(conn, where: str, schema_name: str, trusted_owner: str) -> None:
    """Create the schema, the seed's tables and indexes and the ledger row in one
    transaction (cafleet's auxiliary objects come later, each where it is first needed:
    :meth:`PgStore.create_auxiliary`). Concurrent
    first opens queue on an advisory lock; the one that finds the schema filled meanwhile
    does nothing. A schema that did not exist is created without IF NOT EXISTS, so one that
    another role created meanwhile fails the transaction instead of being filled."""
    conn.pipeline([("BEGIN", ()), ("SELECT pg_advisory_xact_lock(?)", (lock_key("initialise", schema_name),))])
    try:
        _fill(conn, where, schema_name, trusted_owner)
        conn.execute("COMMIT")
    finally:
        rollback_quietly(conn)


def _fill(conn, where: str, schema_name: str, trusted_owner: str) -> None:
    """The initialising transaction's work, under its lock."""
    found = read_shape(conn, schema_name)
    if found["relation"]:
        return  # another process initialised it while this one waited (the caller diagnoses it)
    check_owners(found, f"schema {schema_name} of database {where}", trusted_owner)
    create = "CREATE SCHEMA IF NOT EXISTS {}" if "" in found["owner"] else "CREATE SCHEMA {}"
    conn.execute(create.format(libpq.quote_ident(schema_name)))
    rendered = ddl()
    for statement in (*rendered.tables.values(), *rendered.late_foreign_keys, *rendered.indexes.values()):
        conn.execute(statement)
    conn.execute(
        f"INSERT INTO {schema.LEDGER_TABLE} (version, name, applied_on, checksum) VALUES (?, ?, ?, ?)",
        (schema.HEAD_VERSION, "baseline", clock.now(), schema.baseline_checksum()),
    )
