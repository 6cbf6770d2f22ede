-- Contract v2: stream entries kept without a fact identity (quarantined, quarantine
-- expired, late mismatch, after termination), one row per entry; and the counters of the
-- two new verdicts start at zero (absent rows read as zero).
CREATE TABLE IF NOT EXISTS parked(
  entry TEXT PRIMARY KEY, state TEXT NOT NULL, tenant_id TEXT NOT NULL,
  source TEXT NOT NULL, event_id TEXT NOT NULL, application_id TEXT NOT NULL,
  canonical TEXT NOT NULL, since INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS parked_by_application ON parked(tenant_id, application_id, state);
