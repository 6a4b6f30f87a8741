"""``gpufleet secret``: the values of ``${{ secrets.NAME }}``, kept on this controller.

dstack keeps secrets on its server; gpufleet keeps them in ``<state dir>/secrets.yml``, encrypted
with Ansible Vault (plugins/plugin_utils/secret_store.py), which the task playbook reads with the
same vault password. Only ``secret get`` ever prints a value.
"""

from __future__ import annotations

import getpass
import sys

from . import common

MASK = "*" * 6


def add_secret(commands):
    """Add ``gpufleet secret`` (list, get, set, delete) to the command parser."""
    secret = commands.add_parser(
        "secret", help="manage secrets",
        description=(
            "Manage the secrets tasks reference as ${{ secrets.NAME }}, as dstack secret does. "
            "They are kept in <state dir>/secrets.yml, encrypted with Ansible Vault; the vault "
            "password comes from --vault-password-file, else ANSIBLE_VAULT_PASSWORD_FILE, else "
            "vault_password_file in ansible.cfg. Without a subcommand: list."))
    secret.set_defaults(handler=_list, vault_password_file=None)
    actions = secret.add_subparsers(dest="action", metavar="ACTION")

    listing = actions.add_parser("list", help="list secrets (values masked)",
                                 description="List the secrets' names; values are masked.")
    _password_option(listing)
    listing.set_defaults(handler=_list)

    get = actions.add_parser("get", help="print a secret's value",
                             description="Print one secret with its value.")
    get.add_argument("name", metavar="NAME", help="the secret's name")
    _password_option(get)
    get.set_defaults(handler=_get)

    set_ = actions.add_parser(
        "set", help="add or replace a secret",
        description=(
            "Add a secret or replace its value. Without VALUE the value is read from standard "
            "input: asked for without echo on a terminal, else read to its end (one trailing "
            "newline dropped). A VALUE on the command line is visible to other users in the "
            "process list and stays in the shell's history: prefer standard input."))
    set_.add_argument("name", metavar="NAME",
                      help="the secret's name: letters, digits and _, not starting with a digit")
    set_.add_argument("value", metavar="VALUE", nargs="?",
                      help="the value (default: read from standard input)")
    _password_option(set_)
    set_.set_defaults(handler=_set)

    delete = actions.add_parser("delete", help="delete a secret",
                                description="Delete a secret from the store.")
    delete.add_argument("name", metavar="NAME", help="the secret's name")
    delete.add_argument("-y", "--yes", action="store_true", help="delete without asking")
    _password_option(delete)
    delete.set_defaults(handler=_delete)


def _password_option(parser):
    parser.add_argument("--vault-password-file", metavar="FILE",
                        help="the vault password file (default: ANSIBLE_VAULT_PASSWORD_FILE, "
                             "else vault_password_file in ansible.cfg)")


def _open(args, err):
    """The store (gpufleet.api.secret_store), or None after printing why it cannot be
    opened."""
    from ..api import GpufleetError, secret_store

    try:
        return secret_store(args.vault_password_file)
    except GpufleetError as exc:
        err.write(f"gpufleet: {exc}\n")
        return None


def _table(rows, out):
    width = max(len("NAME"), *(len(name) for name, _value in rows))
    out.write(f"{'NAME'.ljust(width)}  VALUE\n")
    for name, value in rows:
        out.write(f"{name.ljust(width)}  {value}\n")


def _list(args, out, err) -> int:
    from ..api import GpufleetError

    store = _open(args, err)
    if store is None:
        return 1
    try:
        names = store.names()
    except GpufleetError as exc:
        err.write(f"gpufleet: {exc}\n")
        return 1
    if not names:
        out.write("No secrets.\n")
    else:
        _table([(name, MASK) for name in names], out)
    return 0


def _get(args, out, err) -> int:
    from ..api import GpufleetError

    store = _open(args, err)
    if store is None:
        return 1
    try:
        value = store.get(args.name)
    except GpufleetError as exc:
        err.write(f"gpufleet: {exc}\n")
        return 1
    _table([(args.name, value)], out)
    return 0


def _read_value(name):
    """The value from standard input: a prompt without echo on a terminal (None at its end of
    file), else all of it."""
    if sys.stdin.isatty():
        try:
            return getpass.getpass(f"Value of {name}: ")
        except EOFError:
            return None
    text = sys.stdin.read()
    if text.endswith("\r\n"):
        return text[:-2]
    if text.endswith("\n"):
        return text[:-1]
    return text


def _set(args, out, err) -> int:
    from ..api import GpufleetError, check_secret_name

    try:
        check_secret_name(args.name)
    except GpufleetError as exc:
        err.write(f"gpufleet: {exc}\n")
        return 2
    store = _open(args, err)
    if store is None:
        return 1
    try:
        store.read()  # a wrong vault password fails before the value is asked for
        value = args.value if args.value is not None else _read_value(args.name)
        if value is None:
            err.write("gpufleet: no value given; nothing was set\n")
            return 1
        store.set(args.name, value)
    except GpufleetError as exc:
        err.write(f"gpufleet: {exc}\n")
        return 1
    out.write("OK\n")
    return 0


def _delete(args, out, err) -> int:
    from ..api import GpufleetError, shorten

    store = _open(args, err)
    if store is None:
        return 1
    try:
        if args.name not in store.read():
            err.write(f"gpufleet: no secret named {shorten(args.name)}\n")
            return 1
        if not common.confirm(f"Delete the secret {args.name}?", args, out, err):
            out.write("Nothing was deleted.\n")
            return 1
        store.delete(args.name)
    except GpufleetError as exc:
        err.write(f"gpufleet: {exc}\n")
        return 1
    out.write("OK\n")
    return 0
