-- The chain from a request to its verdict: each verdict row names the identity and the
-- application of its entry, the consumer that decided it, that delivery's count (Redis's,
-- this delivery included) and the time of its latest processing, so `pipeline explain` can
-- follow an event from its receipt through the stream to the inbox without parsing bodies.
ALTER TABLE verdicts ADD COLUMN tenant_id TEXT;
ALTER TABLE verdicts ADD COLUMN application_id TEXT;
ALTER TABLE verdicts ADD COLUMN source TEXT;
ALTER TABLE verdicts ADD COLUMN event_id TEXT;
ALTER TABLE verdicts ADD COLUMN consumer TEXT;
ALTER TABLE verdicts ADD COLUMN deliveries INTEGER;
ALTER TABLE verdicts ADD COLUMN last_ms INTEGER;
-- Older verdicts: the identity where the inbox still holds a row filed under the entry (a
-- fact or a parked entry); a duplicate's identity was never stored and stays NULL.
UPDATE verdicts SET (tenant_id, application_id, source, event_id) = (
  SELECT f.tenant_id, f.application_id, f.source, f.event_id FROM facts f
  WHERE f.entry = verdicts.entry LIMIT 1)
  WHERE EXISTS (SELECT 1 FROM facts f WHERE f.entry = verdicts.entry);
UPDATE verdicts SET (tenant_id, application_id, source, event_id) = (
  SELECT p.tenant_id, p.application_id, p.source, p.event_id FROM parked p
  WHERE p.entry = verdicts.entry)
  WHERE tenant_id IS NULL AND EXISTS (SELECT 1 FROM parked p WHERE p.entry = verdicts.entry);
UPDATE verdicts SET last_ms = committed_ms;
CREATE INDEX verdicts_by_event ON verdicts(tenant_id, source, event_id);
CREATE INDEX verdicts_by_application ON verdicts(tenant_id, application_id);
