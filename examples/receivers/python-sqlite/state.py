#!/usr/bin/env python3
"""Prints python-sqlite's state document (what GET /_arrival/state answers) from its
SQLite file, opened read-only: a state command for `arrival conform`
(examples/targets/python-sqlite-command.toml).

    python3 state.py DATA_DIR
"""
import json
import os
import sqlite3
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from receiver import Store  # noqa: E402


def main():
    path = os.path.join(sys.argv[1], "receiver.db")
    store = Store.__new__(Store)  # not __init__: it would create and initialise the file
    store.data_dir = sys.argv[1]
    store.db = sqlite3.connect("file:%s?mode=ro" % path, uri=True, timeout=5)
    store.db.execute("BEGIN")  # one snapshot for every query
    print(json.dumps(store.state()))


if __name__ == "__main__":
    main()
