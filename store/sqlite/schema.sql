CREATE TABLE IF NOT EXISTS {p}namespaces (
    id         TEXT    NOT NULL PRIMARY KEY,
    workspace  TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    created_at INTEGER NOT NULL,
    UNIQUE (workspace, name)
);
CREATE TABLE IF NOT EXISTS {p}overrides (
    id           TEXT    NOT NULL PRIMARY KEY,
    workspace    TEXT    NOT NULL,
    namespace_id TEXT    NOT NULL,
    identifier   TEXT    NOT NULL,
    lim          INTEGER NOT NULL,
    duration_ms  INTEGER NOT NULL,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL,
    UNIQUE (namespace_id, identifier)
);
