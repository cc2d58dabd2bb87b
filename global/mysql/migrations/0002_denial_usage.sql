-- Denial rows carry the denied cell's own usage, so that receivers deny
-- what the originator denied instead of the whole limit for the rest of the
-- window. Rows written before this migration read as 0: the whole limit.
ALTER TABLE {p}blocklist ADD COLUMN usage_count BIGINT NOT NULL DEFAULT 0 AFTER lim;
