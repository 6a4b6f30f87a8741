"""``gpufleet notify``: webhooks the fleets' hosts post their events to (Slack or any HTTP
receiver), as Slurm's ``--mail-type`` tells a user about their jobs."""

from __future__ import annotations

import json

from . import common


def add_notify(commands):
    """Add ``gpufleet notify`` to the command parser."""
    notify = commands.add_parser(
        "notify", help="post the fleets' events to webhooks (Slack, any HTTP receiver)",
        description="Make the fleets' hosts post their events (gpufleet event) to a URL. The "
                    "hosts post them from a timer of their own, so deliveries go on with this "
                    "controller switched off; a failed one is tried again for a day.")
    actions = notify.add_subparsers(dest="action", metavar="ACTION")
    actions.required = True
    add = actions.add_parser("add", help="add a webhook",
                             description="Add a webhook to every host of the fleets this "
                                         "controller reaches (--fleet: one fleet). The URL is "
                                         "kept in the secrets store and never shown; without "
                                         "URL it is asked for (or read from standard input), "
                                         "so that it is not in the command line.")
    add.add_argument("url", metavar="URL", nargs="?",
                     help="where to post (http or https); prefer leaving it out: it is read "
                          "without echo, and stays out of the process list")
    add.add_argument("--on", action="append", metavar="EVENT", default=[],
                     help="an event kind to post (repeatable; default: all), such as "
                          "run.status, job.ended, run.queued, instance.created, "
                          "member.granted")
    add.add_argument("--fleet", metavar="FLEET", help="only this fleet's hosts and events")
    add.add_argument("--format", choices=["json", "slack"], default="json",
                     help="the body: json (the event's fields) or slack (an incoming "
                          "webhook's text); default json")
    add.add_argument("--name", metavar="NAME", help="the hook's name (default: a new one)")
    _password_option(add)
    common.fleet_file_option(add, "an SSH fleet's file (repeatable)")
    add.set_defaults(handler=_add)
    listed = actions.add_parser("list", help="list the webhooks and their deliveries")
    listed.add_argument("--fleet", metavar="FLEET", help="only this fleet's hosts")
    listed.add_argument("--json", action="store_true", help="print the hooks as JSON")
    common.fleet_file_option(listed, "an SSH fleet's file (repeatable)")
    listed.set_defaults(handler=_list)
    remove = actions.add_parser("remove", help="remove a webhook")
    remove.add_argument("name", metavar="NAME", help="the hook's name (notify list)")
    remove.add_argument("--fleet", metavar="FLEET", help="only this fleet's hosts")
    _password_option(remove)
    common.fleet_file_option(remove, "an SSH fleet's file (repeatable)")
    remove.set_defaults(handler=_remove)


def _password_option(parser):
    parser.add_argument("--vault-password-file", metavar="FILE",
                        help="the secrets store's vault password file (default: "
                             "ANSIBLE_VAULT_PASSWORD_FILE, else ansible.cfg's)")


def _unreachable(answer, err):
    for host, error in sorted((answer.get("unreachable") or {}).items()):
        err.write(f"gpufleet: {host}: {error}\n")
    return 1 if answer.get("unreachable") else 0


def _add(args, out, err) -> int:
    from ..api import GpufleetError, notify_add
    from .secrets import _read_value

    url = args.url if args.url is not None else _read_value("the webhook URL")
    if not url:
        err.write("gpufleet: no URL given; no hook was added\n")
        return 2
    try:
        answer = notify_add(url, on=args.on, fleet=args.fleet, format=args.format,
                            name=args.name, vault_password_file=args.vault_password_file,
                            fleet_files=common.fleet_files(args))
    except GpufleetError as exc:
        return common.failed(exc, err)
    hook = answer["hook"]
    kinds = ", ".join(hook.get("on") or []) or "every event"
    out.write(f"Hook {hook['id']} posts {kinds} to {hook['url']} ({hook['format']}) from "
              f"{len(answer.get('set_on') or [])} host(s): {', '.join(answer.get('set_on') or [])}\n")
    return _unreachable(answer, err)


def _list(args, out, err) -> int:
    from ..api import GpufleetError, notify_list

    try:
        answer = notify_list(fleet=args.fleet, in_process=True,
                             fleet_files=common.fleet_files(args))
    except GpufleetError as exc:
        return common.failed(exc, err)
    if args.json:
        json.dump(answer, out, indent=2)
        out.write("\n")
        return _unreachable(answer, err)
    hooks = answer.get("hooks") or []
    if not hooks:
        out.write("No webhooks.\n")
        return _unreachable(answer, err)
    rows = [("NAME", "URL", "ON", "FORMAT", "HOSTS", "DELIVERED", "WAITING", "FAILED",
             "LAST ERROR")]
    for hook in hooks:
        hosts = hook.get("hosts") or {}
        total = {k: sum(int(h.get(k) or 0) for h in hosts.values())
                 for k in ("delivered", "waiting", "failed")}
        error = next((h.get("last_error") for h in hosts.values() if h.get("last_error")), "")
        rows.append((hook["id"], hook["url"], ",".join(hook.get("on") or []) or "all",
                     hook.get("format") or "json", str(len(hosts)), str(total["delivered"]),
                     str(total["waiting"]), str(total["failed"]), error or ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(row, widths)) + "  " + row[-1] + "\n")
    return _unreachable(answer, err)


def _remove(args, out, err) -> int:
    from ..api import GpufleetError, notify_remove

    try:
        answer = notify_remove(args.name, fleet=args.fleet,
                               vault_password_file=args.vault_password_file, in_process=True,
                               fleet_files=common.fleet_files(args))
    except GpufleetError as exc:
        return common.failed(exc, err)
    hosts = answer.get("removed_from") or []
    if hosts:
        out.write(f"Hook {args.name} removed from {', '.join(hosts)}\n")
    else:
        out.write(f"No host kept a hook named {args.name}\n")
    return _unreachable(answer, err)
