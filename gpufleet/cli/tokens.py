"""``gpufleet token``: this controller user's service token, the Bearer of the services of the
fleets they are a member of. It is kept in the secrets store (``gpufleet secret``'s, encrypted
with Ansible Vault) and this is the one command that prints it; the fleets' hosts keep only its
SHA-256 digest."""

from __future__ import annotations

import json

from . import common


def add_token(commands):
    """Add ``gpufleet token`` to the command parser."""
    token = commands.add_parser(
        "token", help="print your token for the fleets' services",
        description=(
            "Print this controller user's token: requests to a service with auth (the default) "
            "carry it as 'Authorization: Bearer TOKEN'. It is made on first use and kept in "
            "the secrets store (<state dir>/secrets.yml, encrypted with Ansible Vault; the "
            "vault password as for gpufleet secret). A fleet's hosts keep only its SHA-256 "
            "digest: applying a service publishes yours on the service's fleet, and --publish "
            "does it without one. Only the token is printed on standard output."))
    token.add_argument("--json", action="store_true",
                       help="print the user, the token and the fleets it was published on as "
                            "JSON")
    token.add_argument("--rotate", action="store_true",
                       help="make a new token; its digest replaces the old one's on the fleets "
                            "this controller reaches that held it, and the old token stops "
                            "working on each once that is done")
    token.add_argument("--publish", metavar="FLEET",
                       help="publish the token's digest on the hosts of FLEET (you must be a "
                            "member of it)")
    token.add_argument("--vault-password-file", metavar="FILE",
                       help="the vault password file (default: ANSIBLE_VAULT_PASSWORD_FILE, "
                            "else vault_password_file in ansible.cfg)")
    token.set_defaults(handler=_token)


def _token(args, out, err) -> int:
    from ..api import GpufleetError, token

    try:
        answer = token(rotate=args.rotate, publish=args.publish,
                       vault_password_file=args.vault_password_file)
    except GpufleetError as exc:
        code = common.failed(exc, err)
        if args.rotate and exc.result is not None:
            err.write("gpufleet: the new token is kept in the store: publish it on each fleet "
                      "with gpufleet token --publish FLEET\n")
        return code
    if args.json:
        json.dump(answer, out, indent=2)
        out.write("\n")
    else:
        out.write(answer["token"] + "\n")
    if args.json:
        return 0
    fleets = answer["published"]
    if fleets:
        err.write(f"Published on fleet{'s' if len(fleets) > 1 else ''} {', '.join(fleets)}.\n")
    elif args.rotate and not args.publish:
        err.write("No fleet held the old token: the new one is published on a fleet by your "
                  "next service apply there, or by gpufleet token --publish FLEET.\n")
    for where, why in sorted(answer["unread"].items()):
        err.write(f"gpufleet: {where}: not published: {why}\n")
    return 0
