#!/usr/bin/env python3
"""Play a fixture's default order (docs/protocol.md section 8) against an example receiver.

    python3 examples/receivers/drive.py fixtures/B62-15-events.json
    python3 examples/receivers/drive.py --receiver python-lastwins fixtures/re-pause.json
    python3 examples/receivers/drive.py --kill-after 5 fixtures/B62-15-events.json
    python3 examples/receivers/drive.py --replay replay.json fixtures/B62-15-events.json

Starts the receiver on a free port with a fresh data dir (initial.json from the fixture),
delivers every delivery in array order (the body is the `event` serialised as JSON, the
delivery number in the header `Arrival-Delivery`), then runs the authority passes of the
default order, and prints each step's answer and the final /_arrival/state. With
--kill-after K it SIGKILLs the receiver's process group after K deliveries and restarts it on
the same data dir. With --replay it compares the acks, the outcomes and the final state with
the output of `arrival replay --json FIXTURE`. Exit status 0 when the final state matches the
fixture's `expect` (and the replay, if given), 1 otherwise.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Receiver:
    def __init__(self, name, data_dir, log_path):
        self.script = os.path.join(HERE, name, "receiver.py")
        self.data_dir = data_dir
        self.log_path = log_path
        self.proc = None
        self.port = None

    def start(self):
        self.port = free_port()
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, self.script, "--port", str(self.port), "--data", self.data_dir],
            stdout=subprocess.PIPE, stderr=log, start_new_session=True)
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(self.url("/healthz"), timeout=1) as r:
                    if 200 <= r.status < 300:
                        return
            except (urllib.error.URLError, ConnectionError, OSError):
                time.sleep(0.05)
        raise SystemExit("receiver did not become healthy; see " + self.log_path)

    def kill(self):
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()
        out = self.proc.stdout.read()
        if out:
            print("WARNING: receiver wrote to stdout:", out[:200], file=sys.stderr)

    def url(self, path):
        return "http://127.0.0.1:%d%s" % (self.port, path)

    def post(self, path, body, headers=None):
        req = urllib.request.Request(self.url(path), data=body, method="POST",
                                     headers=dict(headers or {}, **{"Content-Type": "application/json"}))
        with urllib.request.urlopen(req, timeout=30) as r:
            answer = json.loads(r.read())
            return answer, r.headers

    def state(self):
        with urllib.request.urlopen(self.url("/_arrival/state"), timeout=30) as r:
            return json.loads(r.read())


def reencode(value):
    """The same content in other bytes: every object's keys in reverse order, other spacing."""
    if isinstance(value, dict):
        return "{ " + " ,\n ".join(json.dumps(k) + " :  " + reencode(v)
                                     for k, v in reversed(list(value.items()))) + " }"
    if isinstance(value, list):
        return "[ " + " , ".join(reencode(v) for v in value) + " ]"
    return json.dumps(value)


def run(fixture, receiver, kill_after=None, keep=False, quiet=False, use_schedule=False):
    """Play the default order (or the schedule) once; returns (steps, final state)."""
    say = (lambda *a: None) if quiet else print
    work = tempfile.mkdtemp(prefix="drive-")
    data_dir = os.path.join(work, "data")
    os.makedirs(data_dir)
    with open(os.path.join(data_dir, "initial.json"), "w") as f:
        json.dump(fixture["initial"], f)
    rx = Receiver(receiver, data_dir, os.path.join(work, "receiver.log"))
    rx.start()
    steps = []
    try:
        by_number = {d["delivery"]: d for d in fixture["deliveries"]}

        def deliver(d, body=None, fault=None):
            body = json.dumps(d["event"]).encode() if body is None else body
            answer, headers = rx.post("/webhook", body, {"Arrival-Delivery": str(d["delivery"])})
            if headers.get("Arrival-Ack") != answer.get("ack"):
                say("WARNING: header Arrival-Ack %r differs from body %r"
                    % (headers.get("Arrival-Ack"), answer.get("ack")))
            steps.append({"kind": "deliver", "delivery": d["delivery"], "ack": answer["ack"]})
            say("deliver #%-3s %-28s -> %s%s" % (d["delivery"], json.dumps(
                d["event"].get("event_id") if isinstance(d["event"], dict) else None), answer["ack"],
                "" if fault is None else "  (" + fault + ")"))

        def reconcile(snap):
            body = json.dumps({k: snap[k] for k in ("object_id", "version", "state")}).encode()
            answer, _ = rx.post("/_arrival/reconcile", body)
            steps.append({"kind": "reconcile", "object_id": snap["object_id"],
                          "outcome": answer["outcome"]})
            say("reconcile %-30s -> %s" % (snap["object_id"], answer["outcome"]))

        snapshots = {a["object_id"]: a for a in fixture.get("authority", [])}
        if use_schedule and fixture.get("schedule"):
            for step in fixture["schedule"]:
                if "deliver" in step:
                    d = by_number[step["deliver"]]
                    if step.get("crash"):
                        # A crash before the decision is recorded: nothing reaches storage.
                        rx.kill()
                        rx.start()
                        steps.append({"kind": "deliver", "delivery": d["delivery"], "ack": None})
                        say("deliver #%-3s crash before recording; restarted" % d["delivery"])
                    elif step.get("reencoded"):
                        deliver(d, reencode(d["event"]).encode(), "reencoded")
                    else:
                        deliver(d, fault="ack_lost" if step.get("ack_lost") else
                                "duplicate" if step.get("duplicate") else None)
                elif "reconcile" in step:
                    reconcile(snapshots[step["reconcile"]])
                elif step.get("expire"):
                    answer, _ = rx.post("/_arrival/expire", b"")
                    steps.append({"kind": "expire", "forgotten": answer.get("forgotten")})
                    say("expire -> forgotten %s" % answer.get("forgotten"))
        else:
            for i, d in enumerate(fixture["deliveries"]):
                if kill_after is not None and i == kill_after:
                    rx.kill()
                    say("-- SIGKILL after %d deliveries; restarting on the same data dir" % i)
                    rx.start()
                deliver(d)
            # Pass 1: every snapshot whose card is paused or not yet created.
            for snap in fixture.get("authority", []):
                st = rx.state()
                if snap["object_id"] not in st["cards"] or snap["object_id"] in st.get("paused", []):
                    reconcile(snap)
            # Further passes: still-paused cards whose snapshot is not behind them.
            while True:
                found = False
                for snap in fixture.get("authority", []):
                    st = rx.state()
                    card = st["cards"].get(snap["object_id"])
                    if (snap["object_id"] in st.get("paused", []) and card is not None
                            and snap["version"] >= card["version"]):
                        reconcile(snap)
                        found = True
                if not found:
                    break
        final = rx.state()
    finally:
        rx.kill()
        if keep:
            say("data dir kept:", work)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return steps, final


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("fixture")
    ap.add_argument("--receiver", default="python-sqlite")
    ap.add_argument("--kill-after", type=int, default=None,
                    help="SIGKILL the receiver after this many deliveries, then restart it")
    ap.add_argument("--kill-every", action="store_true",
                    help="also replay once per K = 0..n with a SIGKILL and restart after K "
                         "deliveries, and check each ends in the same state and acks")
    ap.add_argument("--schedule", action="store_true",
                    help="play the fixture's `schedule` (if it has one) instead of the default "
                         "order; a crash step is a SIGKILL and restart with nothing delivered")
    ap.add_argument("--replay", help="JSON written by `arrival replay --json FIXTURE`")
    ap.add_argument("--keep", action="store_true", help="keep the data dir")
    args = ap.parse_args()

    with open(args.fixture) as f:
        fixture = json.load(f)
    steps, final = run(fixture, args.receiver, args.kill_after, args.keep,
                       use_schedule=args.schedule)
    print(json.dumps(final, indent=2, sort_keys=True))
    ok = True
    if args.kill_every:
        diffs = []
        for k in range(len(fixture["deliveries"]) + 1):
            ksteps, kfinal = run(fixture, args.receiver, k, quiet=True)
            if kfinal != final:
                diffs.append("killed after %d: final state %s" % (k, json.dumps(kfinal, sort_keys=True)))
            if ksteps != steps:
                diffs.append("killed after %d: acks/outcomes %s" % (k, json.dumps(ksteps)))
        print("kill-every:", "every kill point ends the same" if not diffs else "\n  ".join(["differs"] + diffs))
        ok = ok and not diffs
    expect = fixture.get("expect")
    if expect is not None:
        diffs = []
        if final["cards"] != expect["final"]:
            diffs.append("final cards differ from expect.final")
        if final.get("paused", []) != sorted(expect.get("paused", [])):
            diffs.append("paused %r, expected %r" % (final.get("paused"), expect.get("paused", [])))
        if final.get("unresolved") != expect["unresolved"]:
            diffs.append("unresolved %r, expected %r" % (final.get("unresolved"), expect["unresolved"]))
        if "replacements" in expect and "replacements" in final and final["replacements"] != expect["replacements"]:
            diffs.append("replacements %r, expected %r" % (final["replacements"], expect["replacements"]))
        print("expect:", "holds" if not diffs else "; ".join(diffs))
        ok = ok and not diffs
    if args.replay:
        with open(args.replay) as f:
            replay = json.load(f)
        diffs = []
        theirs = [s for s in replay["steps"] if s["kind"] in ("deliver", "reconcile", "expire")]
        if len(theirs) != len(steps):
            diffs.append("%d steps here, %d in the replay" % (len(steps), len(theirs)))
        for n, (mine, ref) in enumerate(zip(steps, theirs), 1):
            if mine["kind"] != ref["kind"]:
                diffs.append("step %d: %s here, %s in the replay" % (n, mine["kind"], ref["kind"]))
            elif mine["kind"] == "deliver" and mine["ack"] != ref["ack"]:
                diffs.append("step %d (delivery %s): ack %s here, %s in the replay (decision %s)"
                             % (n, mine["delivery"], mine["ack"], ref["ack"], ref["decision"]))
            elif mine["kind"] == "reconcile" and (mine["object_id"], mine["outcome"]) != (ref["object_id"], ref["outcome"]):
                diffs.append("step %d: reconcile %s %s here, %s %s in the replay"
                             % (n, mine["object_id"], mine["outcome"], ref["object_id"], ref["outcome"]))
            elif mine["kind"] == "expire" and mine["forgotten"] != ref["forgotten"]:
                diffs.append("step %d: expire forgot %s here, %s in the replay"
                             % (n, mine["forgotten"], ref["forgotten"]))
        for key, mine in (("final", final["cards"]), ("paused", final.get("paused")),
                          ("unresolved", final.get("unresolved")), ("replacements", final.get("replacements"))):
            if mine is not None and replay.get(key) != mine:
                diffs.append("%s: %r here, %r in the replay" % (key, mine, replay.get(key)))
        print("replay:", "same acks, outcomes and final state" if not diffs else "\n  ".join(["differs"] + diffs))
        ok = ok and not diffs
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
