"""A stand-in for ``gpufleet.runner.run_playbook``, for the tests of the command and the API.

Each call is recorded (playbook, a copy of the extra vars, check mode, whether a callback was
given); the callback gets the answer's ansible-runner-like events; the answer is a
PlaybookResult carrying what the playbooks publish with set_stats.
"""

from __future__ import annotations

import copy

from gpufleet.runner import PlaybookResult


class FakePlaybooks:
    """Stands in for run_playbook: one answer per call, in order."""

    def __init__(self):
        self.answers = []
        self.calls = []
        self.out = None          # main()'s stdout, to see what was printed during a run
        self.snapshots = []      # stdout after each event handed to the callback

    def answer(self, rc=0, status=None, stats=None, failures=(), events=(), raises=None,
               output=""):
        """``output``: what the playbook writes to the caller's ``output`` file (the task
        runner's lines when run_playbook is given one)."""
        self.answers.append((list(events), raises, output, PlaybookResult(
            rc=rc, status=status or ("successful" if rc == 0 else "failed"),
            stats=dict(stats or {}), failures=list(failures), stdout="")))

    def __call__(self, playbook, extravars=None, check=False, on_event=None, **kwargs):
        self.calls.append({"playbook": playbook, "extravars": copy.deepcopy(extravars),
                           "check": check, "streamed": on_event is not None,
                           "kwargs": kwargs})
        assert self.answers, "unexpected playbook run: %s %r" % (playbook, extravars)
        events, raises, output, result = self.answers.pop(0)
        if raises is not None:
            raise raises
        if output:
            assert kwargs.get("output") is not None, "%s wrote output to no file" % playbook
            kwargs["output"].write(output)
        if on_event is not None:
            for event in events:
                on_event(event)
                self.snapshots.append(self.out.getvalue() if self.out is not None else None)
        return result


class Stdin:
    """sys.stdin for the command's questions: a terminal with one answer ready, or no terminal
    (never read)."""

    def __init__(self, tty, answer=None):
        self.tty = tty
        self.answer = answer
        self.reads = 0

    def isatty(self):
        return self.tty

    def readline(self):
        assert self.tty, "read an answer from a stdin that is not a terminal"
        self.reads += 1
        return self.answer


def run_cli(playbooks, *argv):
    """``gpufleet.cli.main`` in-process with ``playbooks`` as the playbook runner: exit code,
    stdout, stderr; never a traceback."""
    import io

    from gpufleet import cli

    out, err = io.StringIO(), io.StringIO()
    playbooks.out = out
    code = cli.main(list(argv), out=out, err=err)
    assert "Traceback" not in out.getvalue() + err.getvalue()
    return code, out.getvalue(), err.getvalue()


class FakeDirect:
    """Stands in for gpufleet.direct's ``runs``, ``logs``, ``stop``, ``submit``, ``events`` and
    ``notify`` (the commands answered in the command's own process): one answer per call, in
    order; each call is recorded as ``(function, args, kwargs)``. An answer is a value, or an exception to
    raise; for ``logs`` and ``submit`` it may also carry the lines written to the command's
    output. ``submit`` with no answer queued gives None: task.yml submits the run (the fake
    playbooks answer), as for a task that needs the secrets store or a fleet's growth."""

    def __init__(self):
        self.answers = []
        self.calls = []

    def answer(self, value=None, raises=None, lines=""):
        self.answers.append((value, raises, lines))

    def install(self, monkeypatch):
        from gpufleet import direct

        for name in ("runs", "logs", "stop", "submit", "events", "notify"):
            monkeypatch.setattr(direct, name, self._function(name))
        return self

    def _function(self, name):
        def call(*args, **kwargs):
            self.calls.append((name, args, copy.deepcopy(kwargs)))
            if name == "submit" and not self.answers:
                return None
            assert self.answers, "unexpected direct %s%r %r" % (name, args, kwargs)
            value, raises, lines = self.answers.pop(0)
            if raises is not None:
                raise raises
            if name in ("logs", "submit") and lines:
                args[1].write(lines)   # logs(run, out, ...), submit(path, out, ...)
            return value

        return call
