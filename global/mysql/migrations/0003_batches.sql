-- Counts are stored packed: a batch row carries many cells' counts of one
-- region (payload, see batch.go), appended by a publish and never updated;
-- a cell's entry of a region is the highest count of that region's rows.
-- level is 0 for a publish's rows and L+1 for the rows Cleanup merges from
-- rows of level L (compaction). expires_at is the latest expiry of the
-- row's cells; changed_at (database clock, UTC) is when it was written.
-- The per-entry counters table of earlier releases stays, for their nodes
-- during a rolling upgrade; Cleanup drains its expired rows, and a later
-- release drops it.
CREATE TABLE IF NOT EXISTS {p}batches (
    id          BIGINT UNSIGNED NOT NULL AUTO_INCREMENT,
    region      VARBINARY(255)  NOT NULL,
    level       TINYINT UNSIGNED NOT NULL,
    cells       INT             NOT NULL,
    payload     MEDIUMBLOB      NOT NULL,
    expires_at  BIGINT          NOT NULL,
    changed_at  DATETIME(6)     NOT NULL,
    PRIMARY KEY (id),
    KEY {p}batches_changed_at (changed_at),
    KEY {p}batches_expires_at (expires_at)
) ENGINE=InnoDB;

-- Pulls count the regions seen lately: an index on last_seen reads those
-- alone, not every region that ever announced itself.
CREATE INDEX {p}regions_last_seen ON {p}regions (last_seen);
