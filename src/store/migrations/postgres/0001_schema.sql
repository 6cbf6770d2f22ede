-- The card receiver's durable state (PostgreSQL). Texts are canonical JSON or names; versions
-- are the u64 bits in a signed 64-bit integer (the receiver compares them, never SQL).
CREATE TABLE cards (
    card_id TEXT PRIMARY KEY,
    version BIGINT NOT NULL,
    state TEXT NOT NULL,
    paused BIGINT NOT NULL
);
CREATE TABLE counters (
    card_id TEXT PRIMARY KEY,
    event_replacements BIGINT NOT NULL,
    authority_replacements BIGINT NOT NULL
);
CREATE TABLE records (
    event_id TEXT NOT NULL,
    idx BIGINT NOT NULL,
    content_hash TEXT NOT NULL,
    content TEXT NOT NULL,
    object_id TEXT,
    decision TEXT NOT NULL,
    standing TEXT NOT NULL,
    recorded_at BIGINT,
    PRIMARY KEY (event_id, idx),
    UNIQUE (event_id, content_hash)
);
CREATE INDEX records_first_card ON records (object_id) WHERE idx = 0;
CREATE TABLE anonymous (
    delivery BIGINT PRIMARY KEY,
    content TEXT NOT NULL,
    object_id TEXT,
    decision TEXT NOT NULL,
    standing TEXT NOT NULL,
    recorded_at BIGINT
);
CREATE TABLE holds (
    seq BIGSERIAL PRIMARY KEY,
    card_id TEXT,
    event_id TEXT,
    idx BIGINT,
    delivery BIGINT
);
CREATE INDEX holds_card ON holds (card_id, seq);
CREATE UNIQUE INDEX holds_record ON holds (event_id, idx);
CREATE UNIQUE INDEX holds_delivery ON holds (delivery);
CREATE TABLE audit (
    seq BIGSERIAL PRIMARY KEY,
    entry TEXT NOT NULL,
    subject TEXT NOT NULL,
    delivery BIGINT,
    event_id TEXT,
    content_hash TEXT,
    card_id TEXT,
    decision TEXT,
    previous TEXT,
    version BIGINT,
    state TEXT
);
