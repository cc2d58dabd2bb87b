CREATE TABLE IF NOT EXISTS {p}namespaces (
    id         VARCHAR(64)    NOT NULL,
    workspace  VARBINARY(255) NOT NULL,
    name       VARBINARY(512) NOT NULL,
    created_at BIGINT         NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY {p}namespaces_workspace_name (workspace, name)
) ENGINE=InnoDB;
CREATE TABLE IF NOT EXISTS {p}overrides (
    id           VARCHAR(64)    NOT NULL,
    workspace    VARBINARY(255) NOT NULL,
    namespace_id VARCHAR(64)    NOT NULL,
    identifier   VARBINARY(512) NOT NULL,
    lim          BIGINT         NOT NULL,
    duration_ms  BIGINT         NOT NULL,
    created_at   BIGINT         NOT NULL,
    updated_at   BIGINT         NOT NULL,
    PRIMARY KEY (id),
    UNIQUE KEY {p}overrides_namespace_identifier (namespace_id, identifier)
) ENGINE=InnoDB;
CREATE TABLE IF NOT EXISTS {p}version (
    id      INT    NOT NULL,
    version BIGINT NOT NULL,
    PRIMARY KEY (id)
) ENGINE=InnoDB;
INSERT IGNORE INTO {p}version (id, version) VALUES (1, 0);
