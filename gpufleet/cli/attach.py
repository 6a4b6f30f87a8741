"""``gpufleet attach``: reach a run as ``dstack attach`` does (attach.yml), then follow it."""

from __future__ import annotations

from . import common


def add_attach(commands):
    """Add ``gpufleet attach`` to the command parser."""
    attach = commands.add_parser(
        "attach", help="reach a run: ssh RUN, its ports on localhost, its logs",
        description="Write SSH aliases for a run (ssh RUN lands in the attached job's "
                    "container, ssh RUN-N in job N's), forward its ports to localhost and "
                    "stream its logs. Ctrl-C detaches: the run goes on and ssh RUN keeps "
                    "working until the run ends.")
    attach.add_argument("run", metavar="RUN", help="the run's name")
    attach.add_argument("--job", type=int, default=0, metavar="N",
                        help="the job ssh RUN and the ports go to (default 0)")
    attach.add_argument("-p", "--port", action="append", default=[], metavar="LOCAL:CONTAINER",
                        dest="ports", help="forward a container port to another local port "
                                           "(repeatable)")
    attach.add_argument("--no-logs", action="store_true",
                        help="do not stream the logs; wait for Ctrl-C or the run's end")
    attach.add_argument("--remove", action="store_true",
                        help="remove the run's SSH aliases and close its ports, then exit")
    common.fleet_file_option(attach, "an SSH fleet's file (repeatable)")
    attach.set_defaults(handler=_attach)


def _ports(given, err):
    mapping = {}
    for item in given:
        local, _sep, container = item.partition(":")
        if not (local.isdigit() and container.isdigit()):
            err.write(f"gpufleet: -p {item}: write LOCAL:CONTAINER, e.g. -p 18080:8000\n")
            return None
        mapping[int(container)] = int(local)
    return mapping


POLL = 3.0


# Once a run was seen waiting, how long it may be nowhere: its queue entry is gone and its
# containers are not made yet (the pass that started it is placing it, or pulling its image).
BETWEEN = 600.0


def attach_when_running(run, options, pause, waits=("not running yet",), on_wait=None,
                        clock=None, **given):
    """Attach to ``run`` (gpufleet.api.attach with ``given``), asking again every POLL seconds
    while the refusal says the run is not up yet (one of ``waits``), and, once it was seen
    waiting, for up to BETWEEN seconds while it is between its queue entry and its containers
    ("no run named"); ``on_wait()`` once, when it first waits. ``pause(seconds)`` waits and
    returns True to give up (then None is returned). Any other refusal is raised."""
    import time

    from ..api import GpufleetError, attach

    clock = clock or time.monotonic
    told = False
    missing_since = None
    while True:
        try:
            return attach(run, **given, **options)
        except GpufleetError as exc:
            if told and "no run named" in str(exc):
                missing_since = missing_since if missing_since is not None else clock()
                if clock() - missing_since > BETWEEN:
                    raise
            elif not any(text in str(exc) for text in waits):
                raise
            else:
                missing_since = None
            if on_wait is not None and not told:
                on_wait()
                told = True
            if pause(POLL):
                return None


def _attach(args, out, err) -> int:
    from ..api import GpufleetError, detach

    options = {"fleet_files": common.fleet_files(args)}
    if args.remove:
        try:
            detach(args.run, remove=True, **options)
        except GpufleetError as exc:
            return common.failed(exc, err)
        out.write(f"Removed the SSH aliases of run {args.run}.\n")
        return 0
    ports = _ports(args.ports, err)
    if ports is None:
        return 2
    import time

    def waiting():   # as dstack: wait while the run comes up
        out.write(f"Attaching to {args.run}...\n")
        out.flush()

    def pause(seconds):   # waits; never asks to stop waiting
        time.sleep(seconds)
        return False

    try:
        attached = attach_when_running(args.run, options, pause,
                                       on_wait=waiting, job=args.job, ports=ports)
    except GpufleetError as exc:
        return common.failed(exc, err)
    print_attached(attached, out)
    return follow(args.run, attached, args, out, err, options)


def print_attached(attached, out):
    """What dstack prints once attached."""
    out.write(f"Attached to run {attached['run']} (replica=0 job={attached.get('job', 0)})\n")
    if attached.get("forwards"):
        out.write("Forwarded ports (local -> remote):\n")
        for forward in attached["forwards"]:
            out.write(f"  - localhost:{forward['local_port']} -> {forward['container_port']}"
                      f"  ({forward['url']})\n")
    out.write(f"To connect to the run via SSH, use `ssh {attached['alias']}`.\n")
    out.write("Press Ctrl+C to detach...\n")
    out.flush()


def follow(run, attached, args, out, err, options) -> int:
    """Stream the run's logs (or wait) until it ends, then remove its aliases; Ctrl-C closes
    the forwards only."""
    from ..api import GpufleetError, detach, wait

    interrupted = False
    quiet = getattr(args, "no_logs", False)
    try:
        # Followed as the logs are (the run's end, Ctrl-C), its lines printed or not.
        wait(run, check=False, on_event=(lambda event: None) if quiet else
             common.run_printer(out, err), **options)
    except KeyboardInterrupt:
        interrupted = True
    except GpufleetError as exc:
        # Ctrl-C reaches the playbook that follows the logs first: it ends "canceled".
        if getattr(exc.result, "status", None) != "canceled":
            return common.failed(exc, err)
        interrupted = True
    if interrupted:
        try:
            detach(run, **options)
        except GpufleetError as exc:
            common.failed(exc, err)
        out.write(f"\nDetached. Run {run} goes on; ssh {attached['alias']} still works "
                  f"(gpufleet attach {run} to forward its ports again).\n")
        return 0
    try:
        detach(run, remove=True, **options)
    except GpufleetError as exc:
        return common.failed(exc, err)
    return 0


def ports_problem(ports):
    """Why the run's ``ports`` cannot be forwarded here (a named local port in use), else
    None: dstack apply checks before it submits."""
    from ..api import ports_problem as problem

    return problem(ports)


class Background:
    """``gpufleet apply`` of a task with ports: attach once the run runs, beside the playbook
    that follows it, and detach when it ends (``remove``) or on Ctrl-C (aliases kept)."""

    def __init__(self, run, out, err, options):
        import threading

        self.run, self.out, self.err, self.options = run, out, err, options
        self.done = threading.Event()
        self.attached = None
        self.thread = threading.Thread(target=self._attach, daemon=True)

    def start(self):
        self.thread.start()

    def _attach(self):
        from ..api import GpufleetError

        if self.done.is_set():
            return
        try:
            # The run may not have a container yet: "no run named" waits too.
            self.attached = attach_when_running(
                self.run, self.options, self.done.wait,
                waits=("not running yet", "no run named"))
        except GpufleetError as exc:
            if "nothing to attach to" not in str(exc):
                self.err.write(f"gpufleet: cannot attach to run {self.run}: {exc}\n")
            return
        if self.attached is not None:
            print_attached(self.attached, self.out)

    def finish(self, remove):
        from ..api import GpufleetError, detach

        self.done.set()
        self.thread.join(timeout=120)
        if self.attached is None and not remove:
            return
        try:
            detach(self.run, remove=remove, **self.options)
        except GpufleetError as exc:
            self.err.write(f"gpufleet: {exc}\n")
