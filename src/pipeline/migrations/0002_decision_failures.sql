-- Version 2: the entries whose decision failed while the inbox worked (undecidable), one
-- row per stream entry: its identity, how often deciding it failed, the last error. Written
-- in the batch transaction that went on without the entry.
CREATE TABLE decision_failures(
  entry TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL, source TEXT NOT NULL, event_id TEXT NOT NULL,
  failures INTEGER NOT NULL, error TEXT NOT NULL,
  first_ms INTEGER NOT NULL, last_ms INTEGER NOT NULL);
