#!/usr/bin/env python3
"""A card.snapshot webhook receiver, written from docs/protocol.md alone.

This is an independent second implementation of the contract in docs/protocol.md
(sections 2-7), serving the HTTP interface the conform shim describes. It was written
without reading the project's Rust receiver, its tests or any other receiver.

    python3 receiver.py --port 8080 --data /tmp/rx

Storage: SQLite in {data_dir}/receiver.db, WAL, synchronous=FULL. Every decision (and every
reconciliation, and every expiry) runs in one BEGIN IMMEDIATE transaction, and the answer
is written only after COMMIT. A fresh data dir is initialised from {data_dir}/initial.json;
an existing database is recovered as it is and initial.json is ignored.

Inputs without an event_id are identified by their delivery number (section 3). The HTTP
body carries no delivery number, so this receiver reads it from an optional request header
`Arrival-Delivery: N` (or a `?delivery=N` query). Without one, it numbers arrivals itself
(every POST /webhook that commits counts one) and recognises a repeat of an id-less input
by its content instead. Logging goes to stderr only.

Pull mode (`--authority URL`): a reconcile request names only the card,
`{"object_id": "card-7", "authority": URL}`, and the receiver fetches the snapshot itself
with `GET URL/cards/card-7` (the body's URL, else the flag's) before it reconciles. A
snapshot that cannot be fetched gets no answer but a 503: nothing was reconciled.

Reconciling on its own (`--authority URL --reconcile-on-pause`): after a delivery it
answers `held`, and before that answer goes out, the receiver fetches the snapshot of every
paused card from the authority and reconciles each in a transaction of its own.
"""
import argparse
import json
import math
import os
import sqlite3
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer

MAX_VERSION = 2 ** 64 - 1
HELD_DECISIONS = {
    "held_malformed", "held_unsupported_type", "held_unknown_object", "held_paused",
    "held_missing_version", "held_invalid_version",
    "conflict_same_version", "conflict_changed_payload",
}
UNEVALUABLE_HOLDS = {
    "held_missing_version", "held_invalid_version", "held_unsupported_type", "held_malformed",
}


def log(*parts):
    print("receiver:", *parts, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- semantic equality (section 2)

def _no_constant(name):
    raise ValueError("not JSON: " + name)


def _finite_float(text):
    value = float(text)
    if math.isinf(value) or math.isnan(value):
        raise ValueError("number out of range: " + text)
    return value


def parse_json(raw):
    """Parse strict JSON (no NaN/Infinity); None means 'not JSON'. Returns (ok, value)."""
    try:
        text = raw.decode("utf-8")
        return True, json.loads(text, parse_constant=_no_constant, parse_float=_finite_float)
    except (UnicodeDecodeError, ValueError, RecursionError):
        return False, None


def _normalise(value):
    # -0.0 equals 0.0; everything else keeps its parsed type, so 12 (int) and 12.0 (float)
    # stay different once written out (json.dumps writes "12" and "12.0").
    if isinstance(value, float):
        return 0.0 if value == 0.0 else value
    if isinstance(value, dict):
        return {k: _normalise(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    return value


def canonical(value):
    """A text that is equal for two parsed JSON values exactly when they are semantically
    equal: keys sorted, no whitespace, ints and floats written distinctly."""
    return json.dumps(_normalise(value), sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def is_valid_version(v):
    return type(v) is int and 0 <= v <= MAX_VERSION


def ack_of(decision):
    if decision == "applied":
        return "applied"
    if decision in ("stale", "equal"):
        return "ignored"
    return "held"


# ---------------------------------------------------------------- storage

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS cards (
    object_id TEXT PRIMARY KEY,
    version TEXT NOT NULL,          -- text: versions go up to 2^64-1, past SQLite's integers
    state TEXT NOT NULL,            -- canonical JSON
    paused INTEGER NOT NULL DEFAULT 0
);
-- One row per identity record (first record seq=0, variants seq>=1) and one per input
-- without an event_id (held under its delivery number, no identity record as such).
CREATE TABLE IF NOT EXISTS records (
    rid INTEGER PRIMARY KEY AUTOINCREMENT,   -- arrival order
    input TEXT NOT NULL,                     -- the event id, or delivery-N
    event_id TEXT,                           -- NULL for an input without an event id
    delivery INTEGER,                        -- delivery number, id-less inputs only
    seq INTEGER NOT NULL,
    content TEXT NOT NULL,                   -- canonical JSON of the whole envelope (or raw:HEX)
    object_id TEXT,                          -- the envelope's object_id when it is a string
    decision TEXT NOT NULL,
    standing TEXT NOT NULL,                  -- settled | held | resolved | superseded
    held_under TEXT,                         -- the card a hold is filed under
    recorded_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS records_by_id ON records(event_id);
CREATE INDEX IF NOT EXISTS records_by_hold ON records(held_under, standing);
CREATE TABLE IF NOT EXISTS audit (
    n INTEGER PRIMARY KEY AUTOINCREMENT,
    at REAL NOT NULL,
    entry TEXT NOT NULL,
    subject TEXT NOT NULL,
    decision TEXT,
    previous TEXT
);
"""


class Store:
    def __init__(self, data_dir):
        self.data_dir = data_dir
        path = os.path.join(data_dir, "receiver.db")
        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self._initialise()

    def _initialise(self):
        def work():
            for stmt in SCHEMA.split(";"):
                if stmt.strip():
                    self.db.execute(stmt)
            if self.meta("initialised") is not None:
                log("recovered from", self.data_dir)
                return
            with open(os.path.join(self.data_dir, "initial.json"), "rb") as f:
                ok, initial = parse_json(f.read())
            if not ok or not isinstance(initial, dict):
                raise SystemExit("initial.json is not a JSON object")
            for oid, card in initial.items():
                self.db.execute("INSERT INTO cards(object_id, version, state, paused) VALUES (?,?,?,0)",
                                (oid, str(int(card["version"])), canonical(card["state"])))
            for key in ("arrivals", "replacements_event", "replacements_authority"):
                self.set_meta(key, 0)
            self.set_meta("initialised", 1)
            log("initialised", len(initial), "cards from initial.json")
        self.transact(work, lambda _: None)

    # One transaction per decision; the answer only after COMMIT.
    def transact(self, work, answer):
        self.db.execute("BEGIN IMMEDIATE")
        try:
            result = work()
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")
        answer(result)

    def meta(self, key):
        row = self.db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        return None if row is None else row[0]

    def set_meta(self, key, value):
        self.db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?,?)", (key, str(value)))

    def bump(self, key):
        self.set_meta(key, int(self.meta(key)) + 1)
        return int(self.meta(key))

    def card(self, oid):
        row = self.db.execute("SELECT version, state, paused FROM cards WHERE object_id=?",
                              (oid,)).fetchone()
        if row is None:
            return None
        return {"version": int(row[0]), "state": row[1], "paused": bool(row[2])}

    def pause(self, oid):
        self.db.execute("UPDATE cards SET paused=1 WHERE object_id=?", (oid,))

    def audit(self, entry, subject, decision=None, previous=None):
        self.db.execute("INSERT INTO audit(at, entry, subject, decision, previous) VALUES (?,?,?,?,?)",
                        (time.time(), entry, subject, decision, previous))

    # ------------------------------------------------------------ rules 2-6 (section 3)

    def rules_4_to_6(self, env, oid):
        """Rules 4-6 for an envelope whose object_id names the known card oid. Returns the
        decision and applies its effect (pause, or the state replacement)."""
        card = self.card(oid)
        if card["paused"]:
            return "held_paused"
        if "object_version" not in env:
            self.pause(oid)
            return "held_missing_version"
        version = env["object_version"]
        if not is_valid_version(version):
            self.pause(oid)
            return "held_invalid_version"
        if not isinstance(env.get("state"), dict):
            self.pause(oid)
            return "held_malformed"
        state = canonical(env["state"])
        if version > card["version"]:
            self.db.execute("UPDATE cards SET version=?, state=? WHERE object_id=?",
                            (str(version), state, oid))
            self.bump("replacements_event")
            return "applied"
        if version < card["version"]:
            return "stale"
        if state == card["state"]:
            return "equal"
        self.pause(oid)
        return "conflict_same_version"

    def rules_2_to_6(self, env):
        """Returns (decision, card the hold is filed under or None)."""
        oid = env.get("object_id")
        oid = oid if isinstance(oid, str) else None
        if env.get("type") != "card.snapshot":
            if oid is not None and self.card(oid) is not None:
                self.pause(oid)
            return "held_unsupported_type", oid
        if oid is None:
            return "held_malformed", None
        if self.card(oid) is None:
            return "held_unknown_object", oid
        return self.rules_4_to_6(env, oid), oid

    # ------------------------------------------------------------ a delivery

    def deliver(self, raw, delivery):
        """Decide one delivery inside the caller's transaction. Returns the ack word."""
        arrival = self.bump("arrivals")
        now = time.time()
        ok, env = parse_json(raw)
        if not ok or not isinstance(env, dict):
            env = None
        content = canonical(env) if ok else "raw:" + raw.hex()
        oid = env.get("object_id") if env is not None else None
        oid = oid if isinstance(oid, str) else None
        event_id = env.get("event_id") if env is not None else None

        # Rule 1: no event id -> held under the delivery number.
        if not isinstance(event_id, str):
            if delivery is not None:
                row = self.db.execute(
                    "SELECT input, decision FROM records WHERE event_id IS NULL AND delivery=?",
                    (delivery,)).fetchone()
            else:
                delivery = arrival
                row = self.db.execute(
                    "SELECT input, decision FROM records WHERE event_id IS NULL AND content=?",
                    (content,)).fetchone()
            if row is not None:
                self.audit("duplicate", row[0], "duplicate", row[1])
                return ack_of(row[1])
            name = "delivery-%d" % delivery
            if oid is not None and self.card(oid) is not None:
                self.pause(oid)
            self.db.execute(
                "INSERT INTO records(input, event_id, delivery, seq, content, object_id, decision,"
                " standing, held_under, recorded_at) VALUES (?,NULL,?,0,?,?,?,?,?,?)",
                (name, delivery, content, oid, "held_malformed", "held", oid, now))
            self.audit("decided", name, "held_malformed")
            return "held"

        records = self.db.execute(
            "SELECT rid, seq, content, decision, object_id FROM records WHERE event_id=? ORDER BY seq",
            (event_id,)).fetchall()
        # Rule 1: the same content as one of the id's records -> duplicate.
        for _rid, _seq, known, decision, _oid in records:
            if known == content:
                self.audit("duplicate", event_id, "duplicate", decision)
                return ack_of(decision)
        # Rule 1: a known id with another content -> changed payload, a new variant.
        if records:
            first_oid = records[0][4]
            for ref in (first_oid, oid):
                if ref is not None and self.card(ref) is not None:
                    self.pause(ref)
            self.db.execute(
                "INSERT INTO records(input, event_id, seq, content, object_id, decision, standing,"
                " held_under, recorded_at) VALUES (?,?,?,?,?,?,?,?,?)",
                (event_id, event_id, records[-1][1] + 1, content, oid,
                 "conflict_changed_payload", "held", oid, now))
            self.audit("decided", event_id, "conflict_changed_payload")
            return "held"
        # A new id: the first record takes the decision of rules 2-6.
        decision, under = self.rules_2_to_6(env)
        held = decision in HELD_DECISIONS
        self.db.execute(
            "INSERT INTO records(input, event_id, seq, content, object_id, decision, standing,"
            " held_under, recorded_at) VALUES (?,?,0,?,?,?,?,?,?)",
            (event_id, event_id, content, oid, decision, "held" if held else "settled",
             under if held else None, now))
        self.audit("decided", event_id, decision)
        return ack_of(decision)

    # ------------------------------------------------------------ reconciliation (section 5)

    def distinct_contents(self, event_id):
        if event_id is None:
            return 1
        return self.db.execute("SELECT COUNT(*) FROM records WHERE event_id=?",
                               (event_id,)).fetchone()[0]

    def reconcile(self, snap):
        oid = snap["object_id"]
        version = snap["version"]
        state = canonical(snap["state"])
        card = self.card(oid)
        if card is None:
            outcome = "created"
            self.db.execute("INSERT INTO cards(object_id, version, state, paused) VALUES (?,?,?,0)",
                            (oid, str(version), state))
            self.bump("replacements_authority")
        elif version < card["version"]:
            self.audit("reconciled", oid, "refused_behind")
            return "refused_behind"   # the pause remains; no hold is settled
        elif version == card["version"] and state == card["state"]:
            outcome = "confirmed"
            self.db.execute("UPDATE cards SET paused=0 WHERE object_id=?", (oid,))
        else:
            outcome = "replaced"
            self.db.execute("UPDATE cards SET version=?, state=?, paused=0 WHERE object_id=?",
                            (str(version), state, oid))
            self.bump("replacements_authority")
        self.audit("reconciled", oid, outcome)

        # Settling the holds filed under the card, one at a time in arrival order.
        holds = self.db.execute(
            "SELECT rid, input, event_id, content, decision FROM records"
            " WHERE held_under=? AND standing='held' ORDER BY rid", (oid,)).fetchall()
        repaused = False
        for rid, name, event_id, content, decision in holds:
            if event_id is not None and self.distinct_contents(event_id) >= 2:
                self.settle(rid, name, "resolved")
            elif decision in ("held_paused", "held_unknown_object"):
                if repaused:
                    continue   # waits for the next reconciliation ("Re-pausing")
                new = self.rules_4_to_6(json.loads(content), oid)
                held = new in HELD_DECISIONS
                self.db.execute(
                    "UPDATE records SET decision=?, standing=?, held_under=? WHERE rid=?",
                    (new, "held" if held else "settled", oid if held else None, rid))
                self.audit("re_evaluated", name, new, decision)
                if self.card(oid)["paused"]:
                    repaused = True
            elif decision in ("conflict_same_version", "conflict_changed_payload"):
                self.settle(rid, name, "resolved")
            else:
                self.settle(rid, name, "superseded")

        # Changed payloads waiting under another card whose first record names this card.
        others = self.db.execute(
            "SELECT v.rid, v.input FROM records v JOIN records f"
            " ON f.event_id = v.event_id AND f.seq = 0"
            " WHERE v.seq > 0 AND v.standing='held' AND v.decision='conflict_changed_payload'"
            " AND (v.held_under IS NULL OR v.held_under <> ?) AND f.object_id = ?"
            " ORDER BY v.rid", (oid, oid)).fetchall()
        for rid, name in others:
            self.settle(rid, name, "resolved")
        return outcome

    def settle(self, rid, name, standing):
        self.db.execute("UPDATE records SET standing=?, held_under=NULL WHERE rid=?", (standing, rid))
        self.audit(standing, name)

    # ------------------------------------------------------------ unresolved inputs, expiry

    def unresolved_record(self, event_id, content, object_id, standing, cards):
        if standing in ("held", "superseded"):
            return True
        if standing != "resolved" or self.distinct_contents(event_id) < 2:
            return False
        # A resolved content of a conflicted id counts when it could never have been decided.
        env = json.loads(content) if not content.startswith("raw:") else None
        if not isinstance(env, dict) or env.get("type") != "card.snapshot":
            return True
        if not isinstance(env.get("object_id"), str) or env["object_id"] not in cards:
            return True
        if "object_version" not in env or not is_valid_version(env["object_version"]):
            return True
        return not isinstance(env.get("state"), dict)

    def unresolved(self):
        cards = {r[0] for r in self.db.execute("SELECT object_id FROM cards")}
        names = set()
        for name, event_id, content, oid, standing in self.db.execute(
                "SELECT input, event_id, content, object_id, standing FROM records").fetchall():
            if self.unresolved_record(event_id, content, oid, standing, cards):
                names.add(name)
        return sorted(names)

    def expire(self):
        cards = {r[0] for r in self.db.execute("SELECT object_id FROM cards")}
        keep, ids = set(), set()
        for event_id, content, oid, standing in self.db.execute(
                "SELECT event_id, content, object_id, standing FROM records"
                " WHERE event_id IS NOT NULL").fetchall():
            ids.add(event_id)
            if self.unresolved_record(event_id, content, oid, standing, cards):
                keep.add(event_id)
        forgotten = sorted(ids - keep)
        for event_id in forgotten:
            self.db.execute("DELETE FROM records WHERE event_id=?", (event_id,))
            self.audit("forgotten", event_id)
        return forgotten

    def state(self):
        cards, paused = {}, []
        for oid, version, state, p in self.db.execute(
                "SELECT object_id, version, state, paused FROM cards ORDER BY object_id"):
            cards[oid] = {"version": int(version), "state": json.loads(state)}
            if p:
                paused.append(oid)
        return {"cards": cards, "paused": sorted(paused), "unresolved": self.unresolved(),
                "replacements": {"event": int(self.meta("replacements_event")),
                                 "authority": int(self.meta("replacements_authority"))}}


# ---------------------------------------------------------------- HTTP

def fetch_snapshot(authority, object_id):
    """GET {authority}/cards/{object_id}: the snapshot, or None when it cannot be had."""
    url = "%s/cards/%s" % (authority.rstrip("/"), urllib.parse.quote(object_id, safe=""))
    # The authority is on loopback: no proxy from the environment in between.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=2) as answer:
            ok, snap = parse_json(answer.read())
    except (urllib.error.URLError, OSError) as exc:
        log("authority fetch failed:", url, exc)
        return None
    return snap if ok and isinstance(snap, dict) else None


class Handler(BaseHTTPRequestHandler):
    store = None  # set in main
    authority = None  # --authority URL: reconcile in pull mode
    reconcile_on_pause = False  # --reconcile-on-pause: fetch and reconcile paused cards

    def reconcile_paused(self):
        """Every paused card whose snapshot the authority has, reconciled: one transaction each."""
        paused = [row[0] for row in
                  self.store.db.execute("SELECT object_id FROM cards WHERE paused=1")]
        for oid in paused:
            snap = fetch_snapshot(self.authority, oid)
            if snap is not None and is_valid_version(snap.get("version")) and "state" in snap:
                self.store.transact(lambda: self.store.reconcile(snap), lambda _: None)

    def answer_delivery(self, ack):
        if ack == "held" and self.reconcile_on_pause and self.authority:
            self.reconcile_paused()
        self.reply(200, {"ack": ack}, [("Arrival-Ack", ack)])

    def log_message(self, fmt, *args):
        log(self.address_string(), fmt % args)

    def reply(self, code, obj, headers=()):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)
        self.wfile.flush()

    def body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def delivery_number(self):
        text = self.headers.get("Arrival-Delivery")
        if text is None and "?" in self.path:
            for part in self.path.split("?", 1)[1].split("&"):
                if part.startswith("delivery="):
                    text = part[len("delivery="):]
        try:
            return int(text) if text is not None else None
        except ValueError:
            return None

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        if path == "/healthz":
            self.reply(200, {"ok": True})
        elif path == "/_arrival/state":
            self.reply(200, self.store.state())
        else:
            self.reply(404, {"error": "not found"})

    def do_POST(self):
        path = self.path.split("?", 1)[0]
        raw = self.body()
        try:
            if path == "/webhook":
                delivery = self.delivery_number()
                self.store.transact(lambda: self.store.deliver(raw, delivery),
                                    self.answer_delivery)
            elif path == "/_arrival/reconcile":
                ok, snap = parse_json(raw)
                if ok and isinstance(snap, dict) and "version" not in snap and \
                        isinstance(snap.get("object_id"), str) and \
                        (snap.get("authority") or self.authority):
                    snap = fetch_snapshot(snap.get("authority") or self.authority,
                                          snap["object_id"])
                    if snap is None:
                        self.reply(503, {"error": "the authority's snapshot could not be fetched"})
                        return
                if not (ok and isinstance(snap, dict) and isinstance(snap.get("object_id"), str)
                        and is_valid_version(snap.get("version")) and "state" in snap):
                    self.reply(400, {"error": "not an authority snapshot"})
                    return
                self.store.transact(lambda: self.store.reconcile(snap),
                                    lambda outcome: self.reply(200, {"outcome": outcome}))
            elif path == "/_arrival/expire":
                self.store.transact(self.store.expire,
                                    lambda forgotten: self.reply(200, {"forgotten": forgotten}))
            else:
                self.reply(404, {"error": "not found"})
        except sqlite3.Error as exc:
            log("storage error, no answer:", exc)
            self.reply(503, {"error": str(exc)})


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--authority", help="reconcile in pull mode: fetch snapshots from this URL")
    ap.add_argument("--reconcile-on-pause", action="store_true",
                    help="with --authority: reconcile every paused card after a held delivery")
    args = ap.parse_args()
    Handler.authority = args.authority
    Handler.reconcile_on_pause = args.reconcile_on_pause
    os.makedirs(args.data, exist_ok=True)
    Handler.store = Store(args.data)
    server = HTTPServer(("127.0.0.1", args.port), Handler)
    log("listening on 127.0.0.1:%d, data in %s" % (args.port, args.data))
    server.serve_forever()


if __name__ == "__main__":
    main()
