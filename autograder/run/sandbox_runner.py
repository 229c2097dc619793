"""Runs INSIDE the sandbox: executes the cells the trusted driver sends, one at a time.

Protocol (file descriptors passed as argv[1] and argv[2]): the driver writes one JSON object per
line (``{"op": "cell"|"test", "code": ..., "exercise": ...}``); this process answers one JSON line
per request. Nothing here is trusted by the driver: student code shares this process and may
forge replies. The driver only ever takes *data* from them (text to show, record bytes that are
loaded with ``allow_pickle=False``), caps their size, and decides every verdict itself.

This file only imports the standard library, IPython and torch; it never sees the reference
solutions (the sandbox's course_lib has their bodies removed).
"""

import base64
import json
import os
import re
import sys
import time
import traceback

OUTPUT_CAP = 64 * 1024
RECORD_CAP = 32 * 1024 * 1024


class CappedWriter:
    """A text stream that keeps the first ``cap`` characters and counts the rest."""

    def __init__(self, cap=OUTPUT_CAP):
        self.cap, self.parts, self.size, self.dropped = cap, [], 0, 0

    def write(self, s):
        s = str(s)
        room = self.cap - self.size
        if room > 0:
            self.parts.append(s[:room])
            self.size += min(room, len(s))
        self.dropped += max(0, len(s) - max(room, 0))
        return len(s)

    def flush(self):
        pass

    def isatty(self):
        return False

    def text(self):
        out = "".join(self.parts)
        if self.dropped:
            out += f"\n[... {self.dropped} more characters of output not kept]"
        return out


def _error(err):
    if err is None:
        return None
    return f"{type(err).__name__}: {err}"[:2000]


def _read_records(folder, n_cases):
    """The exercise's ``n_cases`` record files, base64, within :data:`RECORD_CAP` in all.

    Only the names the exercise has (``case00.npz`` ...) are read, each opened without following
    a link and read up to the cap: any other file student code left there is ignored.
    """
    records, total = {}, 0
    for k in range(max(0, min(n_cases, 1000))):
        name = f"case{k:02d}.npz"
        try:
            fd = os.open(os.path.join(folder, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        with os.fdopen(fd, "rb") as f:
            data = f.read(RECORD_CAP - total + 1)
        if total + len(data) > RECORD_CAP:
            break
        total += len(data)
        records[name] = base64.b64encode(data).decode()
    return records


def main():
    for fd in (int(sys.argv[1]), int(sys.argv[2])):
        os.set_inheritable(fd, False)  # student subprocesses do not get the grader's channel
    cmd = os.fdopen(int(sys.argv[1]), "rb")
    rep = os.fdopen(int(sys.argv[2]), "wb", buffering=0)

    def send(obj):
        return rep.write((json.dumps(obj) + "\n").encode())

    _exec, _compile = exec, compile
    record_dir = os.environ.get("COURSE_GRADING_RECORD_DIR", "/tmp/records")

    # torch and IPython are imported only now, after the grader's channel is closed to student
    # subprocesses, and take seconds: the driver waits for "ready" with its own timeout
    import torch
    torch.set_num_threads(1)
    from IPython.core.interactiveshell import InteractiveShell
    shell = InteractiveShell.instance()
    shell.colors = "nocolor"
    send({"ready": True})
    ansi = re.compile(r"\x1b\[[0-9;]*m")
    for line in cmd:
        msg = json.loads(line)
        out = CappedWriter()
        old = sys.stdout, sys.stderr
        sys.stdout = sys.stderr = out
        err = None
        start = time.time()
        try:
            if msg["op"] == "cell":  # student code: run as IPython would (magics, transformers)
                result = shell.run_cell(msg["code"], store_history=False)
                err = result.error_before_exec or result.error_in_exec
            else:  # the course's test code: compiled directly, no input transformers
                if msg.get("hidden"):
                    folder = os.path.join(record_dir, msg["exercise"])
                    if os.path.isdir(folder):
                        for name in os.listdir(folder):
                            os.unlink(os.path.join(folder, name))
                try:
                    _exec(_compile(msg["code"], "<test>", "exec"), shell.user_ns)
                except BaseException as e:  # noqa: BLE001 - the verdict is the driver's
                    err = e
                    if not msg.get("hidden"):
                        traceback.print_exception(type(e), e, e.__traceback__.tb_next, file=out)
        except BaseException as e:  # noqa: BLE001
            err = e
        finally:
            sys.stdout, sys.stderr = old
        reply = {"ok": err is None, "error": _error(err), "output": ansi.sub("", out.text()),
                 "seconds": round(time.time() - start, 3)}
        if msg["op"] == "test" and msg.get("hidden"):
            reply["records"] = _read_records(os.path.join(record_dir, msg["exercise"]),
                                             int(msg.get("cases", 0)))
        send(reply)


if __name__ == "__main__":
    main()
