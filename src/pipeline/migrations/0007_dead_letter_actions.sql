-- What people did with dead letters: a replay (the letter's body appended to the stream
-- again as `new_entry`) or a discard, each with its reason and time. The dead letter itself
-- leaves the dead-letter stream; this row is what remains of it in the inbox.
CREATE TABLE dead_letter_actions(
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  at_ms INTEGER NOT NULL, entry TEXT NOT NULL, action TEXT NOT NULL,
  new_entry TEXT, category TEXT, tenant_id TEXT, source TEXT, event_id TEXT,
  error TEXT, reason TEXT NOT NULL);
CREATE INDEX dead_letter_actions_by_entry ON dead_letter_actions(entry);
