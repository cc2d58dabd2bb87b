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
CREATE TABLE IF NOT EXISTS {p}version (
    id      INTEGER NOT NULL PRIMARY KEY,
    version INTEGER NOT NULL
);
INSERT INTO {p}version (id, version) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;
