-- Version 1: the inbox as it was before its schema was versioned. An inbox without
-- `schema_migrations` that has the `applications` table is this version.
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
