"""``gpufleet whoami`` (this controller's user and SSH identity) and a fleet's members:
``gpufleet fleet grant``, ``revoke``, ``members`` and ``limit`` (added to ``gpufleet fleet``)."""

from __future__ import annotations

import json

from . import common


def add_whoami(commands):
    """Add ``gpufleet whoami`` to the command parser."""
    whoami = commands.add_parser(
        "whoami", help="show this controller's user and SSH identity",
        description=(
            "Show who this controller is to the fleets it shares: the user ($GPUFLEET_USER, "
            "else the login name), the SSH identity file ($GPUFLEET_IDENTITY, else "
            "~/.ssh/id_ed25519, else ~/.ssh/id_rsa) and the fingerprint of its public key "
            "(the .pub file beside it, which a fleet admin grants)."))
    whoami.add_argument("--json", action="store_true", help="print it as JSON")
    whoami.set_defaults(handler=_whoami)


def _whoami(args, out, err) -> int:
    from ..api import GpufleetError, whoami

    try:
        me = whoami()
    except GpufleetError as exc:
        return common.failed(exc, err)
    if args.json:
        json.dump(me, out, indent=2)
        out.write("\n")
        return 0
    out.write(f"user: {me['user']}\n")
    out.write(f"identity: {me['identity_file'] or 'the SSH agent ($SSH_AUTH_SOCK)'}\n")
    if me["fingerprint"]:
        out.write(f"fingerprint: {me['fingerprint']}\n")
    elif not me["identity_file"]:
        out.write("fingerprint: - (the SSH agent's key)\n")
    else:
        out.write(f"fingerprint: - (no public key at {me['public_key_file']}: make one with "
                  f"ssh-keygen -t ed25519 -f {me['identity_file']})\n")
    return 0


def _count(text):
    """An int for --runs/--gpus/--nodes; the check of its sign is the collection's."""
    import argparse

    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def add_member_actions(actions):
    """Add ``grant``, ``revoke``, ``members`` and ``limit`` to ``gpufleet fleet``."""
    grant = actions.add_parser(
        "grant", help="let a member in on every host of a fleet",
        description=(
            "Let the user NAME in on every host of the fleet FLEET, including hosts made later: "
            "their public key goes into the fleet login user's authorized_keys. Only an admin "
            "of the fleet (its creator first) may grant."))
    grant.add_argument("fleet", metavar="FLEET", help="the fleet's name")
    grant.add_argument("--user", required=True, metavar="NAME", help="the member's user name")
    grant.add_argument("--key", required=True, metavar="PUBKEY_FILE",
                       help="the member's OpenSSH public key file (such as id_ed25519.pub)")
    grant.add_argument("--admin", action="store_true",
                       help="make the member an admin (they may grant, revoke and set limits)")
    grant.set_defaults(handler=_grant)

    revoke = actions.add_parser(
        "revoke", help="take a member out of every host of a fleet",
        description=(
            "Take the user NAME out of every host of the fleet FLEET: their key leaves the "
            "hosts, so their next command is refused by the hosts themselves. Only an admin may "
            "revoke."))
    revoke.add_argument("fleet", metavar="FLEET", help="the fleet's name")
    revoke.add_argument("--user", required=True, metavar="NAME", help="the member's user name")
    revoke.set_defaults(handler=_revoke)

    members = actions.add_parser(
        "members", help="list a fleet's members, their roles and limits",
        description="List the members of the fleet FLEET as its hosts hold them: user, role, "
                    "key fingerprint, limits and who granted them.")
    members.add_argument("fleet", metavar="FLEET", help="the fleet's name")
    members.add_argument("--json", action="store_true", help="print the members as JSON")
    members.set_defaults(handler=_members)

    limit = actions.add_parser(
        "limit", help="set a member's (or the default) caps on a fleet",
        description=(
            "Set how many runs, GPUs and nodes the user NAME (or, with --default, each member "
            "without caps of their own) may hold at once on the fleet FLEET. Caps not given stay "
            "as they are. Only an admin may set them."))
    limit.add_argument("fleet", metavar="FLEET", help="the fleet's name")
    who = limit.add_mutually_exclusive_group(required=True)
    who.add_argument("--user", metavar="NAME", help="the member's user name")
    who.add_argument("--default", action="store_true",
                     help="the default caps, for every member without their own")
    for name, what in (("runs", "runs going at once"), ("gpus", "GPUs held at once"),
                       ("nodes", "nodes held at once")):
        limit.add_argument(f"--{name}", type=_count, metavar="N", help=f"at most N {what}")
    limit.set_defaults(handler=_limit)


def _refused(exc, err) -> int:
    """A refusal (one line of the collection's) printed alone; other failures as usual."""
    if exc.result is not None and exc.failures and all(
            f["host"] in ("localhost", "") for f in exc.failures):
        for failure in exc.failures:
            err.write(f"gpufleet: {failure['msg']}\n")
        return 1
    return common.failed(exc, err)


def _changed(args, out, err, call, done) -> int:
    from ..api import GpufleetError

    try:
        answer = call()
    except GpufleetError as exc:
        return _refused(exc, err)
    out.write(done + ("\n" if answer.get("changed", True) is not False else " (no change)\n"))
    return 0


def _grant(args, out, err) -> int:
    from ..api import grant

    role = "an admin" if args.admin else "a member"
    return _changed(args, out, err, lambda: grant(args.fleet, args.user, args.key,
                                                  admin=args.admin),
                    f"{args.user} is {role} of fleet {args.fleet}")


def _revoke(args, out, err) -> int:
    from ..api import revoke

    return _changed(args, out, err, lambda: revoke(args.fleet, args.user),
                    f"{args.user} is no longer a member of fleet {args.fleet}")


def _limit(args, out, err) -> int:
    from ..api import limit

    who = "the default" if args.default else args.user
    return _changed(args, out, err, lambda: limit(
        args.fleet, None if args.default else args.user, default=args.default, runs=args.runs,
        gpus=args.gpus, nodes=args.nodes), f"limits of {who} on fleet {args.fleet} set")


def _members(args, out, err) -> int:
    from ..api import GpufleetError, fleet_members

    try:
        found = fleet_members(args.fleet)
    except GpufleetError as exc:
        return _refused(exc, err)
    if args.json:
        json.dump(found, out, indent=2)
        out.write("\n")
        return 0
    for host, error in sorted((found.get("unread") or {}).items()):
        err.write(f"gpufleet: {host}: {error}\n")
    if not found.get("members"):
        out.write(f"Fleet {args.fleet} has no members document yet (apply the fleet).\n")
        return 0
    for line in common.member_tables().member_table(found["members"],
                                                    found.get("default_limits")):
        out.write(line + "\n")
    return 0
