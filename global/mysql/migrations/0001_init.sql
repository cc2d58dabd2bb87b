-- Counter rows: one per (cell, region), a G-Counter entry. id_hash is
-- SHA-256 of the length-prefixed (workspace, namespace, identifier); the
-- identity columns are kept so that a row reads back as its cell.
-- changed_at (database clock, UTC) moves only when count grows.
CREATE TABLE IF NOT EXISTS {p}counters (
    id_hash     BINARY(32)      NOT NULL,
    duration_ms BIGINT          NOT NULL,
    seq         BIGINT          NOT NULL,
    region      VARBINARY(255)  NOT NULL,
    workspace   VARBINARY(1024) NOT NULL,
    namespace   VARBINARY(1024) NOT NULL,
    identifier  VARBINARY(1024) NOT NULL,
    count       BIGINT          NOT NULL,
    expires_at  BIGINT          NOT NULL,
    changed_at  DATETIME(6)     NOT NULL,
    PRIMARY KEY (id_hash, duration_ms, seq, region),
    KEY {p}counters_changed_at (changed_at),
    KEY {p}counters_expires_at (expires_at)
) ENGINE=InnoDB;

-- Denial rows: one per cell; the first insert wins.
CREATE TABLE IF NOT EXISTS {p}blocklist (
    id_hash     BINARY(32)      NOT NULL,
    duration_ms BIGINT          NOT NULL,
    seq         BIGINT          NOT NULL,
    workspace   VARBINARY(1024) NOT NULL,
    namespace   VARBINARY(1024) NOT NULL,
    identifier  VARBINARY(1024) NOT NULL,
    lim         BIGINT          NOT NULL,
    region      VARBINARY(255)  NOT NULL,
    expires_at  BIGINT          NOT NULL,
    created_at  DATETIME(6)     NOT NULL,
    PRIMARY KEY (id_hash, duration_ms, seq),
    KEY {p}blocklist_created_at (created_at),
    KEY {p}blocklist_expires_at (expires_at)
) ENGINE=InnoDB;

-- Regions: when each region last announced itself (limiter clock, Unix ms).
CREATE TABLE IF NOT EXISTS {p}regions (
    region    VARBINARY(255) NOT NULL,
    last_seen BIGINT         NOT NULL,
    PRIMARY KEY (region)
) ENGINE=InnoDB;
