-- Contract v2's operator steps in the inbox.
-- Terminations: final, with the operator's reason and time (Unix seconds).
ALTER TABLE applications ADD COLUMN terminated_reason TEXT;
ALTER TABLE applications ADD COLUMN terminated_at INTEGER;
-- Conflicts by identity: which applications each identity's conflict stops (the
-- application of its first content and of every variant).
CREATE TABLE conflicts(
  tenant_id TEXT NOT NULL, source TEXT NOT NULL, event_id TEXT NOT NULL,
  application_id TEXT NOT NULL,
  PRIMARY KEY (tenant_id, source, event_id, application_id));
CREATE INDEX conflicts_by_application ON conflicts(tenant_id, application_id);
-- Every change of a conflict's state, never rewritten: a resolution (`kept` = first or
-- variant, with the person's reason) or a reopening by a new variant (`kept` NULL). The
-- last row of an identity is its state; an identity with no row is open.
CREATE TABLE resolutions(
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  tenant_id TEXT NOT NULL, source TEXT NOT NULL, event_id TEXT NOT NULL,
  kept TEXT, reason TEXT NOT NULL, at_ms INTEGER NOT NULL);
CREATE INDEX resolutions_by_identity ON resolutions(tenant_id, source, event_id, seq);
-- The conflicts an inbox already had: every variant's identity, with the applications of
-- the variant and of the first content. None of them was ever resolved.
INSERT OR IGNORE INTO conflicts
  SELECT json_extract(canonical, '$.tenant_id'), source, event_id,
         json_extract(canonical, '$.application_id')
  FROM evidence;
INSERT OR IGNORE INTO conflicts
  SELECT f.tenant_id, f.source, f.event_id, f.application_id
  FROM facts f JOIN conflicts c
    ON c.tenant_id = f.tenant_id AND c.source = f.source AND c.event_id = f.event_id;
-- Applications with an open conflict, as a view over the two tables above (it was a table
-- of its own, which could not say which identity kept an application out of READY).
DROP TABLE open_conflicts;
CREATE VIEW open_conflicts AS
  SELECT DISTINCT c.tenant_id, c.application_id FROM conflicts c
  WHERE NOT EXISTS (
    SELECT 1 FROM resolutions r
    WHERE r.tenant_id = c.tenant_id AND r.source = c.source AND r.event_id = c.event_id
      AND r.kept IS NOT NULL
      AND r.seq = (SELECT max(seq) FROM resolutions l
                   WHERE l.tenant_id = c.tenant_id AND l.source = c.source
                     AND l.event_id = c.event_id));
-- READY history: one row per change of an application's mark, with the stream entry (or
-- the operator step) that caused it.
CREATE TABLE ready_history(
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  tenant_id TEXT NOT NULL, application_id TEXT NOT NULL, ready INTEGER NOT NULL,
  cause TEXT NOT NULL, at_ms INTEGER NOT NULL);
CREATE INDEX ready_history_by_application ON ready_history(tenant_id, application_id, seq);
-- A late mismatch's kind, kept with its parked entry.
ALTER TABLE parked ADD COLUMN mismatch TEXT;
-- The event id a withdrawal names, so that loading an application finds the withdrawals of
-- its facts (which may name it from another application's envelope).
ALTER TABLE facts ADD COLUMN withdraws TEXT;
UPDATE facts SET withdraws = json_extract(canonical, '$.data.withdraws')
  WHERE json_type(canonical, '$.data.withdraws') = 'text';
CREATE INDEX facts_by_withdrawn ON facts(tenant_id, source, withdraws);
-- A late mismatch's kind for the entries an older inbox parked.
UPDATE parked SET mismatch = (
  SELECT l.mismatch FROM late_mismatches l
  WHERE l.tenant_id = parked.tenant_id AND l.source = parked.source
    AND l.event_id = parked.event_id AND l.application_id = parked.application_id
  LIMIT 1)
  WHERE state = 'late_mismatch';
