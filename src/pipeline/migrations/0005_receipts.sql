-- Receipts: one row per request ingress answered, the refused ones (400, 413, 408, 503)
-- as well as the accepted. Never a body or a secret: the body's SHA-256 stands for it.
CREATE TABLE receipts(
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  at_ms INTEGER NOT NULL, source TEXT, key_id TEXT,
  status INTEGER NOT NULL, reason TEXT NOT NULL, detail TEXT, body_sha256 TEXT,
  tenant_id TEXT, application_id TEXT, event_id TEXT, entry TEXT);
CREATE INDEX receipts_by_event ON receipts(tenant_id, source, event_id);
CREATE INDEX receipts_by_application ON receipts(tenant_id, application_id);
