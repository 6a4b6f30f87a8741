# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Running the collection's playbooks through ansible-runner, for the ``gpufleet`` command.

    result = run_playbook("fleet.yml", extravars={...}, on_event=progress_printer(sys.stderr))
    result.rc, result.status           # 0, "successful"
    result.stats["gpufleet_fleets"]    # what the playbook published with set_stats
    result.failures                    # [{"host", "task", "msg"}] that ended a host's play

The playbook runs with the ``ansible-playbook`` of the Python running this code, with this
checkout first on the collections path, from the current directory (so relative paths in extra
vars mean what the user meant), against ``localhost`` unless an inventory is given.
"""

from __future__ import annotations

import codecs
import dataclasses
import io
import os
import selectors
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ._collection import collection_root, collections_path

# Ansible's own default, kept after this checkout so other installed collections still resolve.
DEFAULT_COLLECTIONS_PATHS = ("~/.ansible/collections", "/usr/share/ansible/collections")
STATUSES = ("successful", "failed", "timeout", "canceled")
# The events of a task that failed on a host, and of a host that could not be reached.
FAILED_EVENTS = ("runner_on_failed", "runner_on_async_failed", "runner_on_unreachable")
# How many characters of a result are shown when it has no message of its own.
RAW_RESULT_LIMIT = 300


class RunnerError(RuntimeError):
    """The playbook could not be started (not found, no ansible-playbook, bad inventory)."""


@dataclasses.dataclass
class PlaybookResult:
    """What a playbook run gave.

    ``rc``: ansible-playbook's exit status. ``status``: ansible-runner's, one of successful,
    failed, timeout, canceled. ``stats``: the custom stats published with set_stats
    (``per_host: false``, the default). ``failures``: ``{"host", "task", "msg"}`` per task
    failure or unreachable host that ended that host's play: errors with ``ignore_errors`` and
    failures a ``rescue`` handled are left out. ``stdout``: the output ansible-playbook printed
    (its last 4 MiB: the end, where errors are).
    """

    rc: int
    status: str
    stats: dict = dataclasses.field(default_factory=dict)
    failures: list = dataclasses.field(default_factory=list)
    stdout: str = ""

    @property
    def ok(self) -> bool:
        return self.rc == 0 and self.status == "successful"

    def failure_lines(self) -> list[str]:
        """Why the run failed, as lines for a person: ``HOST: TASK: MESSAGE`` per failure, else
        the errors ansible-playbook printed (a syntax error, a missing file), else its status."""
        if self.ok:
            return []
        if self.failures:
            return ["%s: %s: %s" % (f["host"], f["task"], f["msg"]) for f in self.failures]
        errors = _error_blocks(self.stdout)
        if errors:
            return errors
        return ["ansible-playbook ended with status %s (exit code %s)" % (self.status, self.rc)]


def _error_blocks(stdout: str) -> list[str]:
    """The ``ERROR!`` / ``[ERROR]:`` messages in ansible-playbook's output, with the lines that
    continue them."""
    found = []
    current = None
    for line in stdout.splitlines():
        stripped = line.strip()
        if stripped.startswith(("ERROR!", "[ERROR]:")):
            current = [stripped]
            found.append(current)
        elif current is not None and stripped:
            current.append(stripped)
        else:
            current = None
    return [" ".join(block) for block in found]


def playbook_path(playbook: str | os.PathLike) -> Path:
    """A playbook of the collection by name (``fleet.yml``), or a path to any playbook."""
    path = Path(playbook)
    if path.is_absolute() or os.sep in str(playbook):
        if not path.is_file():
            raise RunnerError(f"no playbook at {path}")
        return path.resolve()
    directory = collection_root() / "playbooks"
    found = directory / path
    if not found.is_file():
        names = sorted(p.name for p in directory.glob("*.yml")) if directory.is_dir() else []
        raise RunnerError(
            f"no playbook named {playbook} in {directory}; there are: {', '.join(names) or 'none'}"
        )
    return found


def _collections_env() -> str:
    """ANSIBLE_COLLECTIONS_PATH with this checkout first, then what was there before."""
    before = os.environ.get("ANSIBLE_COLLECTIONS_PATH") or os.environ.get(
        "ANSIBLE_COLLECTIONS_PATHS"
    )
    rest = before.split(os.pathsep) if before else list(DEFAULT_COLLECTIONS_PATHS)
    ours = str(collections_path())
    return os.pathsep.join([ours] + [p for p in rest if p and p != ours])


def _environment() -> dict[str, str]:
    """Environment for ansible-playbook: this Python's bin directory first on PATH (its
    ansible-playbook runs), this collection, plain text output, no chatter, host keys checked
    (unless ANSIBLE_HOST_KEY_CHECKING says otherwise)."""
    bindir = str(Path(sys.executable).parent)
    path = os.environ.get("PATH", "")
    return {
        "PATH": os.pathsep.join([bindir] + [p for p in path.split(os.pathsep) if p != bindir]),
        "ANSIBLE_COLLECTIONS_PATH": _collections_env(),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_FORCE_COLOR": "0",
        "ANSIBLE_LOCALHOST_WARNING": "0",
        "ANSIBLE_INVENTORY_UNPARSED_WARNING": "0",
        "ANSIBLE_RETRY_FILES_ENABLED": "0",
        # ansible-runner turns host key checking off when the variable is unset; keep Ansible's
        # own default (on) unless the user chose. SSH fleet hosts carry their policy in their
        # host variables (fleets/records.py), so they are checked whatever this says.
        "ANSIBLE_HOST_KEY_CHECKING": os.environ.get("ANSIBLE_HOST_KEY_CHECKING") or "True",
    }


def _inventory(inventory):
    """What ansible-runner gets as inventory.

    None: localhost only, run locally with this Python. A mapping: inventory data (as in a YAML
    inventory). A path or a list of paths: inventory files or directories, which must exist
    (ansible-runner would take a missing path for inventory text).
    """
    if inventory is None:
        return {
            "all": {
                "hosts": {
                    "localhost": {
                        "ansible_connection": "local",
                        "ansible_python_interpreter": sys.executable,
                    }
                }
            }
        }
    if isinstance(inventory, dict):
        return inventory
    paths = [inventory] if isinstance(inventory, (str, os.PathLike)) else list(inventory)
    resolved = []
    for path in paths:
        if not os.path.exists(path):
            raise RunnerError(f"inventory {path} does not exist")
        resolved.append(os.path.abspath(path))
    return resolved[0] if isinstance(inventory, (str, os.PathLike)) else resolved


def _result_message(res: Any) -> str:
    """The message of a failed or unreachable task result."""
    if not isinstance(res, dict):
        return str(res)
    msg = res.get("msg")
    items = res.get("results")
    if isinstance(items, list):
        failed = [item for item in items if isinstance(item, dict) and item.get("failed")]
        if failed:
            parts = []
            for item in failed:
                label = str(item.get("_ansible_item_label", item.get("item")))
                message = _result_message(dict(item, results=None))
                parts.append(message if label in message else f"{label}: {message}")
            return "; ".join(parts)
    if msg:
        text = str(msg)
        stderr = str(res.get("stderr") or "").strip()
        if stderr and stderr not in text:
            text += f" (stderr: {stderr})"
        return text
    for key in ("stderr", "stdout", "exception"):
        value = str(res.get(key) or "").strip()
        if value:
            return value.splitlines()[-1] if key == "exception" else value
    text = repr({k: v for k, v in res.items() if not k.startswith("_ansible")})
    return text if len(text) <= RAW_RESULT_LIMIT else text[:RAW_RESULT_LIMIT] + "..."


def _task_name(data: dict) -> str:
    task = str(data.get("task") or data.get("task_action") or "")
    role = data.get("role")
    return f"{role} : {task}" if role else task


class _Collector:
    """Keeps what a PlaybookResult needs from the events, and hands each one on."""

    def __init__(self, on_event):
        self.on_event = on_event
        self.stats = {}
        self.counts = None
        self.failed = []  # (kind, failure), in order

    def __call__(self, event: dict) -> bool:
        kind = event.get("event")
        data = event.get("event_data") or {}
        if kind in FAILED_EVENTS and not data.get("ignore_errors"):
            failure = {
                "host": str(data.get("host") or ""),
                "task": _task_name(data),
                "msg": _result_message(data.get("res")),
            }
            self.failed.append(("dark" if kind == "runner_on_unreachable" else "failures", failure))
        elif kind == "playbook_on_stats":
            self.stats = dict(data.get("artifact_data") or {})
            self.counts = data
        if self.on_event is not None:
            self.on_event(event)
        return True  # keep every event in the artifacts too

    def failures(self) -> list:
        """The failures that ended a host's play.

        Ansible counts a failure a rescue handled as rescued, not failed, but its event says
        nothing of that. A host's final failure and unreachable counts say how many of its last
        failures and unreachables stood; earlier ones were rescued or ignored.
        """
        if self.counts is None:
            return [failure for _kind, failure in self.failed]
        keep = {}
        for kind in ("failures", "dark"):
            for host, count in (self.counts.get(kind) or {}).items():
                keep[(kind, host)] = count
        kept = []
        for kind, failure in reversed(self.failed):
            left = keep.get((kind, failure["host"]), 0)
            if left > 0:
                keep[(kind, failure["host"])] = left - 1
                kept.append(failure)
        kept.reverse()
        return kept


def run_playbook(
    playbook: str | os.PathLike,
    extravars: dict | None = None,
    check: bool = False,
    inventory=None,
    on_event: Callable[[dict], Any] | None = None,
    quiet: bool = True,
    private_data_dir: str | os.PathLike | None = None,
    timeout: int | None = None,
    output=None,
) -> PlaybookResult:
    """Run a playbook of the collection (``"fleet.yml"``) or at a path, and wait for it.

    ``extravars`` become ``-e`` variables; ``check`` runs it in check mode (``--check``);
    ``inventory`` is None (localhost), inventory data or inventory path(s); ``on_event`` is
    called with each ansible-runner event as it comes (see ``progress_printer``); ``quiet=False``
    also prints ansible-playbook's output; ``private_data_dir`` keeps ansible-runner's files
    (artifacts, events) there, otherwise a temporary directory is used and removed; ``timeout``
    stops the run after that many seconds (status ``timeout``). ``output`` (a writable file,
    such as sys.stdout): the task runner's lines (a run's logs and its jobs' changes) are
    written there as they come, through a pipe whose path the playbook gets as
    ``gpufleet_output_path``, instead of as events: ansible-runner holds everything a
    playbook prints until it ends, and a run's logs may be gigabytes.

    Raises RunnerError when the playbook cannot be started at all; a playbook that fails gives
    a result with a non-zero ``rc``.
    """
    import ansible_runner  # imported here: the other commands do not need it

    path = playbook_path(playbook)
    env = _environment()
    if shutil.which("ansible-playbook", path=env["PATH"]) is None:
        raise RunnerError(
            "ansible-playbook not found next to %s or on PATH; install ansible-core in the "
            "environment gpufleet runs from" % sys.executable
        )
    inventory = _inventory(inventory)
    temporary = private_data_dir is None
    data_dir = tempfile.mkdtemp(prefix="gpufleet-run-") if temporary else str(private_data_dir)
    os.makedirs(data_dir, exist_ok=True)
    collector = _Collector(on_event)
    pump = _Pump(output) if output is not None else None
    if pump is not None:
        extravars = dict(extravars or {}, gpufleet_output_path=pump.path)
    try:
        runner = ansible_runner.run(
            private_data_dir=data_dir,
            # Run from the current directory, as ansible-playbook would be.
            project_dir=os.getcwd(),
            playbook=str(path),
            inventory=inventory,
            extravars=dict(extravars or {}),
            envvars=env,
            cmdline="--check" if check else None,
            event_handler=collector,
            quiet=quiet,
            timeout=timeout,
        )
        try:
            with runner.stdout as handle:   # the property opens the file each time
                stdout = _tail(handle)
        except ansible_runner.exceptions.AnsibleRunnerException:
            stdout = ""
        return PlaybookResult(
            rc=runner.rc if runner.rc is not None else -1,
            status=str(runner.status),
            stats=collector.stats,
            failures=collector.failures(),
            stdout=stdout,
        )
    finally:
        if pump is not None:
            pump.close()
        if temporary:
            shutil.rmtree(data_dir, ignore_errors=True)


class _Pump:
    """A FIFO in a private folder, copied to ``out`` by a thread while a playbook runs.

    This process holds the FIFO open both ways, so the playbook's writer never waits to open
    it and the reader never sees an end before the writer came; once the playbook has ended,
    what is left in the pipe is read and the pump stops.
    """

    def __init__(self, out):
        self.out = out
        self.folder = tempfile.mkdtemp(prefix="gpufleet-out-")
        self.path = os.path.join(self.folder, "output")
        os.mkfifo(self.path, 0o600)
        self.fd = os.open(self.path, os.O_RDWR | os.O_NONBLOCK)
        self.done = threading.Event()
        self.binary = getattr(out, "buffer", None)
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.thread = threading.Thread(target=self._copy, name="gpufleet-output", daemon=True)
        self.thread.start()

    def _write(self, data):
        if self.binary is not None:
            self.binary.write(data)
            self.binary.flush()
        elif isinstance(self.out, (io.RawIOBase, io.BufferedIOBase)):
            self.out.write(data)
            self.out.flush()
        else:
            self.out.write(self.decoder.decode(data))
            self.out.flush()

    def _copy(self):
        watch = selectors.DefaultSelector()   # poll/epoll: any descriptor number
        watch.register(self.fd, selectors.EVENT_READ)
        writing = True
        try:
            while True:
                if watch.select(0.2):
                    try:
                        data = os.read(self.fd, 65536)
                    except BlockingIOError:
                        continue
                    if data:
                        if writing:
                            try:
                                self._write(data)
                            except Exception:  # noqa: BLE001  # whatever out does, drain on
                                writing = False
                        continue
                if self.done.is_set():
                    break
        finally:
            watch.close()

    def close(self):
        self.done.set()
        self.thread.join()
        os.close(self.fd)
        shutil.rmtree(self.folder, ignore_errors=True)


# The most of ansible-playbook's output a result keeps: the end, where errors are. A playbook
# that streams a run's logs prints all of them, and they must not be held in memory.
STDOUT_KEPT = 4 * 1024 * 1024


def _tail(handle) -> str:
    """The last STDOUT_KEPT characters or so of ansible-runner's stdout file."""
    try:
        handle.seek(0, os.SEEK_END)
        size = handle.tell()
        if size > STDOUT_KEPT:
            # A text file seeks only to tell() cookies; reread from the byte offset instead.
            with open(handle.name, "rb") as raw:
                raw.seek(size - STDOUT_KEPT)
                return raw.read().decode("utf-8", "replace")
        handle.seek(0)
    except (OSError, ValueError, AttributeError):
        pass
    return handle.read()


def _indent_message(msg: str, indent: str) -> str:
    lines = str(msg).splitlines() or [""]
    return lines[0] + "".join("\n" + indent + line for line in lines[1:])


def progress_printer(stream, verbose: bool = False) -> Callable[[dict], None]:
    """An ``on_event`` callback that writes short progress lines to ``stream``.

    ``PLAY name`` and ``TASK name`` as they start, then per host only what deserves attention:
    ``  host: changed``, ``  host: failed: msg``, ``  host: unreachable: msg``, and the errors and
    warnings ansible-playbook prints itself. Tasks that are ok or skipped on a host, and
    failures the playbook ignores on purpose (``ignore_errors``), print nothing unless
    ``verbose`` (then ``  host: ok``, ``  host: skipped``, ``  host: failed (ignored): msg``):
    while nodes come up, the task names show where the run is and every failure that matters
    shows why, without a line per host per task.
    """

    def write(line: str) -> None:
        stream.write(line + "\n")
        flush = getattr(stream, "flush", None)
        if flush is not None:
            flush()

    def on_event(event: dict) -> None:
        kind = event.get("event")
        data = event.get("event_data") or {}
        host = data.get("host") or ""
        if kind == "playbook_on_play_start":
            write("PLAY %s" % (data.get("name") or data.get("play") or ""))
        elif kind in ("playbook_on_task_start", "playbook_on_handler_task_start"):
            write("TASK %s" % _task_name(data))
        elif kind in ("runner_on_failed", "runner_on_async_failed"):
            if data.get("ignore_errors") and not verbose:
                return
            label = "failed (ignored)" if data.get("ignore_errors") else "failed"
            msg = _result_message(data.get("res"))
            write("  %s: %s: %s" % (host, label, _indent_message(msg, "    ")))
        elif kind == "runner_on_unreachable":
            msg = _result_message(data.get("res"))
            write("  %s: unreachable: %s" % (host, _indent_message(msg, "    ")))
        elif kind == "runner_on_ok":
            res = data.get("res") or {}
            if isinstance(res, dict) and res.get("changed"):
                write("  %s: changed" % host)
            elif verbose:
                write("  %s: ok" % host)
        elif kind == "runner_on_skipped" and verbose:
            write("  %s: skipped" % host)
        elif kind in ("verbose", "error", "warning"):
            text = str(event.get("stdout") or "").strip()
            if text.startswith(("ERROR!", "[ERROR]", "[WARNING]")):
                write(text)

    return on_event
