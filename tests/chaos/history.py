"""The recorded history: JSON lines, one file per process that writes them.

Each line is flushed as it is written, so a process killed with SIGKILL
leaves every line it wrote (the page cache survives the process). Times are
time.monotonic() seconds, one clock for every process of the machine
(CLOCK_MONOTONIC), so the checker can line up a client's ops with the
injector's faults.

Client files (client-<id>.jsonl) hold, per op, a "begin" record before the
request leaves and an "end" record with the outcome; an op of a client that
was killed has a begin and no end. The driver writes faults.jsonl (every
injected fault and its recovery), world.jsonl (the coordinator's generation
over time) and daemons.jsonl (every daemon start and exit).
"""

import json
import os
import time


def now():
    return time.monotonic()


class Writer:
    def __init__(self, path):
        self.path = path
        self._f = open(path, "a", buffering=1)

    def write(self, record):
        self._f.write(json.dumps(record, separators=(",", ":")) + "\n")

    def close(self):
        self._f.close()


def read(path):
    """Every complete line of a history file (a process killed mid-write
    leaves at most one partial last line, which is skipped)."""
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return out
