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


def _read_records(folder, n_cases, probe=False):
    """The exercise's ``n_cases`` record files (or its memory probe's), base64, within
    :data:`RECORD_CAP` in all.

    Only the names the exercise has (``case00.npz`` ..., ``probe.npz``) are read, each opened
    without following a link and read up to the cap: any other file student code left there is
    ignored.
    """
    records, total = {}, 0
    count = max(0, min(n_cases, 1000))
    names = ["probe.npz"] if probe else [f"case{k:02d}.npz" for k in range(count)]
    for name in names:
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


#: The largest description of a graded function's code sent back (the similarity report's).
FINGERPRINT_CAP = 64 * 1024
#: The file name IPython's InteractiveShell gives a cell's code; any other (``<string>`` of
#: ``exec``/``compile``, a module's path) means the code did not come from a cell as written.
CELL_FILE = re.compile(r"<ipython-input-\d+-[0-9a-f]+>\Z")


def describe_code(code, helper=None, cap=FINGERPRINT_CAP):
    """``(text, file names)``: ``code`` as one normalised line per instruction, then its nested
    code objects and the helpers it names (``helper(name)``: their code, or ``None``), in order.

    The opname and argument of each instruction, without file name, line numbers, addresses or
    jump offsets; local names become an index (a renamed variable changes nothing), constants
    their ``repr`` (cut), globals and attributes their names. The same code compiled by the same
    Python gives the same text wherever its source came from (a cell, ``exec`` of a decoded
    string). Also used in the trusted process on the instructor's solution (no code runs).
    """
    import dis
    import types

    jumps = set(getattr(dis, "hasjump", dis.hasjrel + dis.hasjabs))
    named = set(dis.haslocal + dis.hasfree)
    lines = [f"python {sys.version_info[0]}.{sys.version_info[1]}"]
    files, seen, todo, size = set(), set(), [("f", code)], 0
    while todo and size < cap:
        label, co = todo.pop(0)
        if id(co) in seen or len(seen) >= 1000:
            continue
        seen.add(id(co))
        files.add(str(co.co_filename))
        # arguments by position, other local, cell and free names in order of first use (a
        # cell's index follows its name's sort order: renaming would reorder it)
        n_args = co.co_argcount + co.co_kwonlyargcount + bool(co.co_flags & 4) \
            + bool(co.co_flags & 8)
        local = {n: f"v{i}" for i, n in enumerate(co.co_varnames[:n_args])}
        out = [f"code {label} args={co.co_argcount},{co.co_posonlyargcount},"
               f"{co.co_kwonlyargcount} flags={co.co_flags & 0x3ac}"]
        for ins in dis.get_instructions(co):
            if ins.opname in ("CACHE", "EXTENDED_ARG", "NOP"):
                continue
            if ins.opcode in jumps or ins.opname in ("MAKE_CELL", "COPY_FREE_VARS"):
                arg = ""  # offsets; cells made in their names' sort order
            elif isinstance(ins.argval, types.CodeType):
                todo.append((f"{label}.{len(out)}", ins.argval))
                arg = f"<code {todo[-1][0]}>"
            elif ins.opcode in named:
                names = ins.argval if isinstance(ins.argval, tuple) else (ins.argval,)
                arg = ",".join(local.setdefault(n, f"v{len(local)}") for n in names)
            elif ins.opname in ("LOAD_CONST", "KW_NAMES"):  # KW_NAMES: the keywords' names
                arg = repr(co.co_consts[ins.arg] if ins.opname == "KW_NAMES" else ins.argval)
            else:
                arg = ins.argrepr or ("" if ins.arg is None else str(ins.arg))  # CALL: its count
            arg = arg[:200]
            out.append(f"{ins.opname} {arg}".rstrip())
            if helper is not None and ins.opname in ("LOAD_GLOBAL", "LOAD_NAME"):
                found = helper(ins.argval) if isinstance(ins.argval, str) else None
                if isinstance(found, types.CodeType) and id(found) not in seen:
                    todo.append((f"helper {ins.argval}", found))
        lines += out
        size += sum(len(line) + 1 for line in out)
    text = "\n".join(lines)
    if len(text) > cap:
        text = text[:text.rfind("\n", 0, cap)]
    return text, files


def _unwrapped(fn):
    """The function under a decorator (``__wrapped__``: ``torch.no_grad()``, ``functools.wraps``),
    a bound method or a ``functools.partial``: the code the student wrote, not a library's
    wrapper."""
    for _ in range(5):
        inner = getattr(fn, "__wrapped__", None) or getattr(fn, "__func__", None) \
            or getattr(fn, "func", None)
        if inner is None or inner is fn:
            break
        fn = inner
    return fn


def runtime_fingerprint(namespace, name):
    """``{"fingerprint": ..., "code_origin": ...}`` of the graded function ``namespace[name]``
    as it is after its hidden tests ran (the similarity report's; never part of a verdict).

    ``code_origin`` lists the file names of its code (and its helpers') that are not a cell's:
    ``<string>`` when it was compiled from a string. Empty strings when there is no function.
    """
    import os.path
    import types

    try:
        fn = namespace.get(name) if isinstance(name, str) else None
        fn = _unwrapped(fn)
        code = getattr(fn, "__code__", None)
        if not isinstance(code, types.CodeType):
            return {"fingerprint": "", "code_origin": ""}
        glb = getattr(fn, "__globals__", None)

        def helper(n):  # a function defined beside it (a cell, an exec'd string), not a library's
            h = _unwrapped(glb.get(n)) if isinstance(glb, dict) else None
            if isinstance(h, types.FunctionType) and (
                    h.__globals__ is glb or not os.path.isabs(h.__code__.co_filename)):
                return h.__code__
            return None

        text, files = describe_code(code, helper)
        odd = sorted(f for f in files if not CELL_FILE.match(f))
        return {"fingerprint": text, "code_origin": ", ".join(odd)[:500]}
    except Exception:  # noqa: BLE001 - advisory: whatever the student's object does, no crash
        return {"fingerprint": "", "code_origin": ""}


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
                                             int(msg.get("cases", 0)), bool(msg.get("probe")))
            reply.update(runtime_fingerprint(shell.user_ns, msg.get("function")))
        send(reply)


if __name__ == "__main__":
    main()
