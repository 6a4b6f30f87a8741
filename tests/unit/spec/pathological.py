"""Pathological inputs to the config loader, shared by spec/test_loader.py and cli/test_cli.py:
what the parser must refuse with a clear message (``PATHOLOGICAL``), what once made it raise
something else (``CRASHERS``), a large valid task, and a time limit for each parse."""

from __future__ import annotations

import contextlib
import random
import signal

# Generous: every input here is refused in milliseconds; the guard only turns a regression
# (a hang, or quadratic work) into a failure instead of a stuck test run.
TIME_LIMIT_S = 20


class TookTooLong(Exception):
    pass


class _Alarm(BaseException):
    """Raised by the SIGALRM handler; a BaseException so no ``except Exception`` swallows it."""


@contextlib.contextmanager
def time_limit(seconds=TIME_LIMIT_S):
    """Fail, instead of hanging, when the body runs longer than ``seconds``.

    The exception raised from inside the interrupted code is replaced by a fresh TookTooLong
    raised here: a traceback through a frame interrupted by a signal can carry no line number,
    which breaks pytest's failure report (INTERNALERROR) on Python 3.11.
    """

    def on_alarm(signum, frame):
        raise _Alarm()

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    timed_out = False
    try:
        yield
    except _Alarm:
        timed_out = True
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    if timed_out:
        # "from None": the interrupted traceback must not be reported as this one's context.
        raise TookTooLong("did not finish within %d s" % seconds) from None


def _random_binary():
    rng = random.Random(20240601)
    data = bytearray(rng.randbytes(4096))
    data[17] = 0
    return bytes(data)


ALIAS_BOMB = b"""type: task
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
commands: *i
"""

# id -> (input bytes, substrings the message must contain, case-insensitively)
PATHOLOGICAL = {
    "empty": (b"", ["empty", "type: fleet, task or volume"]),
    "whitespace-only": (b"  \n\t\n   \n", ["empty"]),
    "bom-only": (b"\xef\xbb\xbf\n", ["empty"]),
    "comments-only": (b"# a comment\n\n# another\n", ["no content", "only comments"]),
    "invalid-yaml-flow": (
        b"type: task\ncommands: [a, b\nname: x\n",
        ["invalid YAML", "line 3", "column 5"],
    ),
    "invalid-yaml-indent": (
        b"type: task\ncommands:\n  - a\n - b\n",
        ["invalid YAML", "line 4", "column 2"],
    ),
    "invalid-yaml-unterminated-quote": (
        b'type: task\nname: "unterminated\n',
        ["invalid YAML", "line 3", "column 1", "end of stream"],
    ),
    "tab-indentation": (b"type: task\n\tcommands: [x]\n", ["invalid YAML", "line 2", "tab"]),
    "control-character": (b"type: task\ncommands: [\x01]\n", ["invalid YAML", "control"]),
    "binary-with-nul": (_random_binary(), ["NUL", "binary"]),
    "utf16": ("type: task\ncommands: [x]\n".encode("utf-16"), ["UTF-16", "save it as UTF-8"]),
    "latin1-not-utf8": (b"type: task\nname: caf\xe9\n", ["not UTF-8", "offset 20", "UTF-8"]),
    "top-level-list": (b"- type: task\n- commands: [x]\n", ["mapping at the top level", "list"]),
    "top-level-string": (b"hello world\n", ["mapping at the top level", "'hello world'"]),
    "top-level-int": (b"42\n", ["mapping at the top level", "42"]),
    "top-level-null": (b"null\n", ["mapping at the top level", "null"]),
    "top-level-tilde": (b"~\n", ["mapping at the top level", "null"]),
    "int-key": (b"type: task\n1: a\ncommands: [x]\n", ["keys must be strings", "key 1"]),
    "null-key": (b"type: task\nnull: a\n", ["keys must be strings", "key null"]),
    "bool-key": (b"type: task\ntrue: a\n", ["keys must be strings", "key true"]),
    "list-key": (b"? [a, b]\n: c\ntype: task\n", ["invalid YAML", "unhashable key"]),
    "missing-type": (b"name: my-task\ncommands: [x]\n", ["missing type", "type: task"]),
    "unknown-type": (b"type: job\ncommands: [x]\n", ["unknown configuration type", "'job'",
                                                     "fleet, task, dev-environment, service or volume"]),
    "type-service": (b"type: service\ncommands: [x]\n",
                     ["port", "a service needs port"]),
    "type-dev-environment": (b"type: dev-environment\nide: vscode\ncommands: [x]\n",
                             ["commands", "a dev environment has no commands"]),
    "type-gateway": (b"type: gateway\nregion: us-east-1\n",
                     ["backend", "a gateway needs backend"]),
    "two-documents": (b"type: task\ncommands: [x]\n---\ntype: task\ncommands: [y]\n",
                      ["more than one YAML document"]),
    "document-separator-then-empty": (b"type: task\ncommands: [x]\n---\n",
                                      ["more than one YAML document"]),
    "nested-100": (b"type: task\ncommands: " + b"[" * 100 + b"]" * 100 + b"\n",
                   ["nested more than 64 levels"]),
    "nested-100000-flow": (b"[" * 100000, ["nested more than 64 levels"]),
    "nested-100000-mapping": (b"a: {" * 100000, ["nested more than 64 levels"]),
    "nested-100000-block": (b"- " * 100000 + b"x\n", ["nested more than 64 levels"]),
    "alias-bomb": (ALIAS_BOMB, ["anchors and aliases", "more than"]),
    "self-referencing-alias": (b"type: task\ncommands: &a [*a]\n", ["anchors and aliases"]),
    "python-object-tag": (
        b"type: task\ncommands: [x]\nname: !!python/object/apply:os.system ['echo pwned']\n",
        ["invalid YAML", "python/object"],
    ),
    "python-name-tag": (b"type: !!python/name:os.system\n", ["invalid YAML", "python/name"]),
    "date-as-name": (b"type: task\ncommands: [x]\nname: 2024-01-01\n",
                     ["a date (2024-01-01)", "quote it"]),
    "impossible-date": (b"type: task\ncommands: [x]\nname: 2024-02-30\n",
                        ["invalid YAML value", "out of range"]),
    "binary-tag-as-name": (b"type: task\ncommands: [x]\nname: !!binary aGVsbG8=\n",
                           ["binary data"]),
}


def large_task(approx_bytes=3 * 1024 * 1024):
    line = "  - echo 'step %07d - a long enough command line to make this file big'\n"
    count = approx_bytes // len(line % 0) + 1
    text = "type: task\nname: big-task\ncommands:\n" + "".join(line % i for i in range(count))
    return text.encode(), count


# ---------------------------------------------------------------------------------------------
# Inputs that made the parser raise something other than SpecError, hang, or accept a value it
# cannot represent. Each names the field that is wrong; the exact wording is the parser's call.

HUGE_HEX = "0x" + "f" * 4000  # a YAML int with ~4800 decimal digits (hex has no digit limit)
DIGITS = "1" * 5000  # more digits than Python converts between str and int by default

CRASHERS = {
    "type-is-a-list": (b"type: [fleet]\nnodes: 1\n", "type"),
    "type-is-a-mapping": (b"type: {fleet: 1}\nnodes: 1\n", "type"),
    "type-is-a-set": (b"type: !!set {fleet}\nnodes: 1\n", "type"),
    "type-is-a-huge-int": (("type: %s\n" % HUGE_HEX).encode(), "type"),
    "memory-400-digit-int": (
        ("type: task\ncommands: [x]\nresources: {memory: 1%s}\n" % ("0" * 400)).encode(),
        "resources.memory",
    ),
    "volume-size-400-digit-int": (
        ("type: volume\nbackend: aws\nregion: us-east-1\nsize: 1%s\n" % ("0" * 400)).encode(),
        "size",
    ),
    "nodes-as-long-digit-string": (
        ("type: task\ncommands: [x]\nnodes: '%s'\n" % DIGITS).encode(), "nodes"),
    "blocks-as-long-digit-string": (
        ("type: fleet\nnodes: 1\nblocks: '%s'\n" % DIGITS).encode(), "blocks"),
    "port-as-long-digit-string": (
        ("type: task\ncommands: [x]\nports: ['%s:80']\n" % DIGITS).encode(), "ports[0]"),
    "duration-as-long-digit-string": (
        ("type: task\ncommands: [x]\nmax_duration: %ss\n" % DIGITS).encode(), "max_duration"),
    "cron-with-long-number": (
        ("type: task\ncommands: [x]\nschedule: {cron: '%s * * * *'}\n" % DIGITS).encode(),
        "schedule.cron",
    ),
    "priority-huge-hex": (("type: task\ncommands: [x]\npriority: %s\n" % HUGE_HEX).encode(),
                          "priority"),
    "gpu-huge-hex": (("type: task\ncommands: [x]\nresources: {gpu: %s}\n" % HUGE_HEX).encode(),
                     "resources.gpu"),
    "cpu-huge-hex": (("type: task\ncommands: [x]\nresources: {cpu: %s}\n" % HUGE_HEX).encode(),
                     "resources.cpu"),
    "ssh-port-huge-hex": (
        ("type: fleet\nssh_config:\n  user: u\n  identity_file: k\n  hosts:\n"
         "    - {hostname: h, port: %s}\n" % HUGE_HEX).encode(),
        "ssh_config.hosts[0].port",
    ),
    "env-value-huge-hex": (("type: task\ncommands: [x]\nenv: {A: %s}\n" % HUGE_HEX).encode(),
                           "env"),
}
