#!/usr/bin/env python3
"""A deliberately WRONG card.snapshot receiver: the last arrival wins.

It applies every valid snapshot for a known card whatever its version (so an old replay
rolls the card back), keeps no event ids, no holds and no pauses, and answers `ignored` to
everything it cannot apply. Durable like the correct one (SQLite, WAL, synchronous=FULL,
one BEGIN IMMEDIATE per request, answer after COMMIT). Written from docs/protocol.md.

    python3 receiver.py --port 8080 --data /tmp/rx
"""
import argparse, json, os, sqlite3, sys
from http.server import BaseHTTPRequestHandler, HTTPServer


class Handler(BaseHTTPRequestHandler):
    db = None

    def log_message(self, fmt, *args):
        print("lastwins:", fmt % args, file=sys.stderr, flush=True)

    def reply(self, code, obj, headers=()):
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/healthz":
            return self.reply(200, {"ok": True})
        if self.path != "/_arrival/state":
            return self.reply(404, {})
        cards = {oid: {"version": int(v), "state": json.loads(s)}
                 for oid, v, s in self.db.execute("SELECT object_id, version, state FROM cards")}
        self.reply(200, {"cards": cards, "paused": [], "unresolved": []})  # it believes so

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            env = json.loads(raw)
        except ValueError:
            env = None
        env = env if isinstance(env, dict) else {}
        self.db.execute("BEGIN IMMEDIATE")
        if self.path == "/webhook":
            known = self.db.execute("SELECT 1 FROM cards WHERE object_id=?",
                                    (str(env.get("object_id")),)).fetchone()
            v = env.get("object_version")
            valid = (known and env.get("type") == "card.snapshot" and type(v) is int
                     and 0 <= v < 2 ** 64 and isinstance(env.get("state"), dict))
            if valid:  # no version comparison, no event ids: the last arrival wins
                self.db.execute("UPDATE cards SET version=?, state=? WHERE object_id=?",
                                (str(v), json.dumps(env["state"]), env["object_id"]))
            self.db.execute("COMMIT")
            ack = "applied" if valid else "ignored"
            return self.reply(200, {"ack": ack}, [("Arrival-Ack", ack)])
        if self.path == "/_arrival/reconcile":
            row = self.db.execute("SELECT version, state FROM cards WHERE object_id=?",
                                  (env["object_id"],)).fetchone()
            state = json.dumps(env["state"])
            outcome = ("created" if row is None else
                       "confirmed" if (int(row[0]), json.loads(row[1])) == (env["version"], env["state"])
                       else "replaced")
            self.db.execute("INSERT OR REPLACE INTO cards VALUES (?,?,?)",
                            (env["object_id"], str(env["version"]), state))
            self.db.execute("COMMIT")
            return self.reply(200, {"outcome": outcome})
        self.db.execute("ROLLBACK")
        self.reply(404, {})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--data", required=True)
    args = ap.parse_args()
    db = sqlite3.connect(os.path.join(args.data, "lastwins.db"), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("BEGIN IMMEDIATE")
    db.execute("CREATE TABLE IF NOT EXISTS cards (object_id TEXT PRIMARY KEY, version TEXT, state TEXT)")
    db.execute("CREATE TABLE IF NOT EXISTS meta (initialised INTEGER)")
    if db.execute("SELECT 1 FROM meta").fetchone() is None:
        with open(os.path.join(args.data, "initial.json")) as f:
            for oid, card in json.load(f).items():
                db.execute("INSERT INTO cards VALUES (?,?,?)",
                           (oid, str(card["version"]), json.dumps(card["state"])))
        db.execute("INSERT INTO meta VALUES (1)")
    db.execute("COMMIT")
    Handler.db = db
    HTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
