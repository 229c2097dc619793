"""What the bubblewrap sandbox isolates, probed from inside one."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autograder.paths import REPO
from autograder.sandbox import Limits, Sandbox, SandboxDied, acquire_slots, reap_uid, slot_uid
from autograder.strip import build_sandbox_course_lib

pytestmark = pytest.mark.slow  # starts sandboxed Python processes

PROBE = r"""
import json, os, socket, resource
facts = {"uid": os.getuid(), "pids": sorted(int(p) for p in os.listdir('/proc') if p.isdigit())}
facts["course_lib_source_visible"] = os.path.exists(%(repo)r + "/course_lib")
facts["solutions_visible"] = os.path.exists(%(repo)r + '/solutions')
facts["git_visible"] = os.path.exists(%(repo)r + '/.git')
try:
    open('/usr/evil', 'w')
    facts["usr_writable"] = True
except OSError:
    facts["usr_writable"] = False
open('/tmp/ok', 'w').write('x')
try:
    socket.create_connection(('127.0.0.1', 22), timeout=1)
    facts["net"] = True
except OSError:
    facts["net"] = False
facts["nproc"] = resource.getrlimit(resource.RLIMIT_NPROC)[0]
from course_lib import attention
import torch
try:
    attention.masked_softmax(torch.zeros(2))
    facts["reference"] = "callable"
except RuntimeError as err:
    facts["reference"] = str(err)
print(json.dumps(facts))
"""


@pytest.fixture(scope="module")
def course_dir(tmp_path_factory) -> Path:
    from course_lib import attention

    dest = tmp_path_factory.mktemp("course")
    stripped = build_sandbox_course_lib(dest, [attention.masked_softmax])
    assert stripped == ["course_lib/attention.py:masked_softmax"]
    return dest


@pytest.fixture()
def slot():
    import os

    slots, fds = acquire_slots(1)
    yield slots[0]
    for fd in fds:
        os.close(fd)


def test_sandbox_isolates_files_network_processes_and_references(course_dir: Path, slot: int) -> None:
    box = Sandbox(course_dir, slot=slot, limits=Limits(cell_timeout=30))
    box.start()
    try:
        reply = box.run("cell", PROBE % {"repo": str(REPO)}, 60)
    finally:
        box.kill()
    assert reply["ok"], reply
    facts = json.loads(reply["output"].strip().splitlines()[-1])
    assert facts["uid"] != 0
    assert not facts["solutions_visible"] and not facts["git_visible"]
    assert not facts["course_lib_source_visible"]
    assert facts["usr_writable"] is False
    assert facts["net"] is False
    assert facts["nproc"] == Limits().tasks
    assert max(facts["pids"]) < 50, "not a fresh PID namespace"
    assert "not available while grading" in facts["reference"]


def test_timeout_and_death_are_reported(course_dir: Path, slot: int) -> None:
    box = Sandbox(course_dir, slot=slot, limits=Limits())
    box.start()
    with pytest.raises(SandboxDied) as err:
        box.run("cell", "while True:\n    pass", 2)
    assert err.value.timed_out
    box = Sandbox(course_dir, slot=slot, limits=Limits())
    box.start()
    with pytest.raises(SandboxDied) as err:
        box.run("cell", "import os\nos._exit(3)", 20)
    assert not err.value.timed_out and "status 3" in err.value.reason


def test_a_fork_bomb_leaves_nothing_behind(course_dir: Path, slot: int) -> None:
    """After a fork bomb's sandbox is killed, its slot's uid has no process left."""
    box = Sandbox(course_dir, slot=slot, limits=Limits())
    box.start()
    with pytest.raises(SandboxDied):
        box.run("cell", "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
                "        pass", 3)
    assert reap_uid(slot_uid(slot), timeout=0.1)
    box = Sandbox(course_dir, slot=slot, limits=Limits())
    box.start()  # the slot is usable again at once
    assert box.run("cell", "print(1 + 1)", 20)["output"].strip() == "2"
    box.kill()
