-- A version-1 inbox (the schema before versioned migrations, no schema_migrations
-- table) holding one application, its payment fact, a verdict and the counters; the
-- migration test opens it with today's arrival.
CREATE TABLE IF NOT EXISTS applications(
  tenant_id TEXT NOT NULL, application_id TEXT NOT NULL,
  business_key TEXT NOT NULL, material_version INTEGER NOT NULL,
  PRIMARY KEY (tenant_id, application_id));
CREATE TABLE IF NOT EXISTS facts(
  source TEXT NOT NULL, event_id TEXT NOT NULL,
  tenant_id TEXT NOT NULL, application_id TEXT NOT NULL,
  canonical TEXT NOT NULL, entry TEXT NOT NULL,
  PRIMARY KEY (tenant_id, source, event_id));
CREATE INDEX IF NOT EXISTS facts_by_application ON facts(tenant_id, application_id);
CREATE TABLE IF NOT EXISTS evidence(
  canonical TEXT PRIMARY KEY, source TEXT NOT NULL, event_id TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS late_mismatches(
  source TEXT NOT NULL, event_id TEXT NOT NULL, tenant_id TEXT NOT NULL,
  application_id TEXT NOT NULL, material_version INTEGER NOT NULL, mismatch TEXT NOT NULL,
  PRIMARY KEY (source, event_id, tenant_id, application_id, material_version, mismatch));
CREATE TABLE IF NOT EXISTS open_conflicts(
  tenant_id TEXT NOT NULL, application_id TEXT NOT NULL,
  PRIMARY KEY (tenant_id, application_id));
CREATE TABLE IF NOT EXISTS ready(
  tenant_id TEXT NOT NULL, application_id TEXT NOT NULL,
  PRIMARY KEY (tenant_id, application_id));
CREATE TABLE IF NOT EXISTS counters(name TEXT PRIMARY KEY, value INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS verdicts(
  entry TEXT PRIMARY KEY, verdict TEXT NOT NULL, processings INTEGER NOT NULL,
  received_ms INTEGER, committed_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS meta(name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT INTO applications VALUES ('t-1', 'app-1', 'APP-1', 1);
INSERT INTO facts VALUES ('finance', 'PAY-1', 't-1', 'app-1',
  '{"application_id":"app-1","business_key":"APP-1","event_id":"PAY-1","event_type":"PAYMENT_CONFIRMED","material_version":1,"schema_version":"1","sent_at":"2024-05-01T10:00:00Z","source":"finance","tenant_id":"t-1"}',
  '1714557600000-0');
INSERT INTO counters VALUES ('accepted', 1);
INSERT INTO verdicts VALUES ('1714557600000-0', 'accepted', 1, 1714557600000, 1714557600100);
INSERT INTO meta VALUES ('applications', 1);
