# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A fleet's members, from the controller: read from its hosts, changed on every one of them.

The members document lives on the fleet's hosts (tasks/hostside/memberside.py; its shape is
teams.members'). There is no server, so every host keeps a copy:

- ``members(...)`` asks every host and merges what they hold (newest entry wins), so one host
  that missed a change does not hide it;
- ``change(...)`` reads the document first and checks the change there (teams.members: an
  unknown or revoked member, a key file that is not a public key, a limit below zero, a
  change by someone who is not an admin), each refusal one line before any host is written;
  then a host that lacks entries (a host made later) gets the merged document
  (``members_sync``) and every host the change (``members_change``, refused there too when its
  author is not an admin);
- ``ensure(...)``, at fleet apply: a fleet whose hosts hold no document gets its first one, the
  applying controller's user as admin with the fleet's own key; hosts without one (a fleet
  grown, a host replaced) get a copy from those that have one.

After a grant or revoke the member's fingerprint is published to the backend (fleets.access),
so that controllers can tell which fleets they may reach without trying SSH.

A member's service token (services.tokens) reaches the fleet as its SHA-256 digest only:
``publish_token(nodes, fleet, user, digest)`` sets it in the user's own entry on every host
(``member_token``); the service apply calls it for the applying user, ``gpufleet token
--publish FLEET`` for one fleet, and ``republish_token`` puts a rotated token's digest on the
fleets that held the one it replaces. A grant publishes no token: a member publishes their own.
"""

from __future__ import annotations

import hashlib
import os
import re
import socket
import time
import uuid
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Tuple, cast

from ..backends.docker_cli import Docker
from ..core.errors import GpufleetError
from ..events.records import fleet_events
from ..fleets import access, lookup, state
from ..fleets import apply as fleet_apply
from ..fleets.types import FleetRecord
from ..teams import identity
from ..teams import members as team
from . import notifications
from .hostside.memberside import members_merge
from .ssh import Node, NodeError, parallel

Doc = Dict[str, Any]


class MembershipError(GpufleetError):
    """A members command that cannot be done: no such fleet, no host answers, a refusal."""


def controller_id(user: str, root: str) -> str:
    """Who made a change, as its stamp says: user, machine and a hash of the state dir (two
    controllers on one machine differ)."""
    digest = hashlib.sha1(os.path.abspath(root).encode("utf-8")).hexdigest()[:8]
    return "%s@%s/%s" % (user, socket.gethostname(), digest)


def _live(record: Mapping[str, Any]) -> list:
    return [i for i in record.get("instances") or []
            if i.get("hostname") and i.get("status") not in ("terminated", "terminating")]


def find(name: str, docker: Optional[Docker], root: str,
         settings: Optional[Dict[str, Any]] = None) -> FleetRecord:
    """The fleet record of fleet ``name``, found as ``gpufleet fleet delete NAME`` finds it."""
    try:
        config, path = lookup.find(name, docker, root, settings)
        record = fleet_apply.describe(config, path, docker, root, settings=settings)
    except fleet_apply.ApplyError as exc:
        raise MembershipError(str(exc)) from exc
    # A member's controller reaches the hosts with its own identity (fleets.access sets it).
    plain = cast(Dict[str, Any], record)
    access.annotate([plain], root, docker)
    if not access.reachable(plain):
        me = identity.user_name()
        raise MembershipError(
            "fleet %s: this controller has no access to it (its state dir %s holds no key of "
            "the fleet and %s is not a member): ask an admin of the fleet to run `gpufleet "
            "fleet grant %s --user %s --key YOUR_KEY.pub`" % (name, root, me, name, me))
    return record


def nodes_of(record: Mapping[str, Any], root: str) -> Dict[str, Node]:
    return {i["name"]: Node(i, root=root) for i in _live(record)}


Read = Tuple[Optional[Doc], Dict[str, Optional[Doc]], Dict[str, str]]


def read(nodes: Mapping[str, Node]) -> Read:
    """``(merged document or None, {host: its document or None}, {host: error})``."""
    answers = parallel(sorted(nodes), lambda host: nodes[host].call("members", timeout=60))
    held: Dict[str, Optional[Doc]] = {}
    errors: Dict[str, str] = {}
    for host, (answer, error) in answers.items():
        if error is not None:
            errors[host] = str(error.detail if isinstance(error, NodeError) else error)
        else:
            held[host] = (answer or {}).get("doc")
    merged = None
    for doc in held.values():
        if doc:
            merged = members_merge(merged, doc)
    return merged, held, errors


def _unreached(errors: Mapping[str, str]) -> str:
    return "; ".join("%s: %s" % item for item in sorted(errors.items()))


def members(name: str, docker: Optional[Docker] = None, root: Optional[str] = None,
            settings: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """``{"fleet", "members": rows (teams.members.table_rows), "limits": the default's,
    "doc", "unread": {host: error}}``."""
    root = state.state_dir(root)
    record = find(name, docker, root, settings)
    nodes = nodes_of(record, root)
    if not nodes:
        raise MembershipError("fleet %s has no running hosts to read its members from" % name)
    doc, _held, errors = read(nodes)
    if doc is None and errors and len(errors) == len(nodes):
        raise MembershipError("cannot read the members of fleet %s: %s"
                              % (name, _unreached(errors)))
    default = ((doc or {}).get("limits") or {}).get(team.DEFAULT) or {}
    return {"fleet": name, "members": team.table_rows(doc), "doc": doc, "unread": errors,
            "default_limits": {k: default.get(k) for k in team.LIMIT_FIELDS}}


def first_doc(fleet: str, creator: str, key: identity.PublicKey, controller: str) -> Doc:
    """The document a fleet starts with: its creator, admin, with the fleet's own key."""
    entry = {"role": team.ADMIN, "key": key.line(), "fingerprint": key.fingerprint,
             "by": creator, "stamp": team.stamp(controller, 0.0)}
    return {"fleet": fleet, "members": {creator: entry}, "revoked": {}, "limits": {}}


def _fleet_key(record: Mapping[str, Any], root: str) -> Optional[identity.PublicKey]:
    """The fleet's own public key: a backend fleet's in the state dir, an SSH fleet's
    identity file's ``.pub`` beside it (None when there is none)."""
    paths = []
    if record.get("fleet_type") != "ssh" and record.get("name"):
        paths.append(state.key_path(root, record["name"]) + ".pub")
    paths += [i["identity_file"] + ".pub" for i in record.get("instances") or []
              if i.get("identity_file")]
    for path in paths:
        if os.path.isfile(path):
            try:
                return identity.read_public_key(path)
            except identity.IdentityError:
                continue
    return None


def ensure(record: Mapping[str, Any], root: Optional[str] = None,
           creator: Optional[str] = None, nodes: Optional[Mapping[str, Node]] = None,
           make: bool = True) -> Dict[str, Any]:
    """Every reachable host of the fleet (or those of ``nodes``) gets a members document: a
    copy of what the others hold, else (no host has one, and ``make``) the first one,
    ``creator`` (this controller's user) admin with the fleet's key.
    ``{"made": bool, "synced": [hosts], "unread": {host: error}}``."""
    root = state.state_dir(root)
    nodes = nodes_of(record, root) if nodes is None else nodes
    if not nodes:
        return {"made": False, "synced": [], "unread": {}}
    doc, held, errors = read(nodes)
    made = False
    if doc is None:
        key = _fleet_key(record, root) if make else None
        if key is None:
            return {"made": False, "synced": [], "unread": errors}
        user = creator or identity.user_name()
        doc = first_doc(record["name"], user, key, controller_id(user, root))
        made = True
    # Every host that answered is sent the document: the hosts that lack entries take them,
    # and every host writes its members' keys again (a node whose authorized_keys was made
    # anew when it restarted gets them back).
    behind = [h for h, d in held.items() if d != members_merge(d, doc)]
    # The fleet's webhooks (gpufleet notify) reach the hosts the apply added, before the
    # apply's events are written: one of those hosts may be the one that posts them.
    if len(held) > 1:
        errors.update(notifications.copy_to_new_hosts(
            dict((h, nodes[h]) for h in held))["unreachable"])
    # With it, each host keeps the facts the apply measured on it: a member's controller, which
    # has no facts cache of the fleet, reads them from there (host_facts).
    # The apply's events (what it created and removed) go to every host with it.
    applied = fleet_events(dict(record), creator or identity.user_name(), time.time(),
                           uuid.uuid4().hex)
    # Each host records them; the first one alone posts them to the fleet's webhooks.
    first = min(held) if held else None
    answers = parallel(sorted(held), lambda host: nodes[host].call(
        "members_sync", {"doc": doc, "login_user": nodes[host].instance.get("user"),
                         "facts": _facts_of(record, host),
                         "events": [dict(e, deliver=host == first) for e in applied]},
        timeout=60))
    for host, (_answer, error) in answers.items():
        if error is not None:
            errors[host] = str(error.detail if isinstance(error, NodeError) else error)
    return {"made": made, "synced": sorted(h for h in behind if h not in errors),
            "unread": errors}


def _facts_of(record: Mapping[str, Any], host: str) -> Optional[Dict[str, Any]]:
    """The host facts an apply measured on ``host`` (its instance's ``resources``), or None."""
    for instance in record.get("instances") or []:
        if instance.get("name") == host and isinstance(instance.get("resources"), dict):
            return dict(instance["resources"])
    return None


def host_facts(nodes: Mapping[str, Node]) -> Dict[str, Dict[str, Any]]:
    """``{host: facts}`` of the hosts that keep the facts of the fleet's last apply (members
    read them there instead of a facts cache of their own); a host that does not answer, or
    keeps none, is left out."""
    answers = parallel(sorted(nodes), lambda host: nodes[host].call(
        "members", {"facts": True}, timeout=30))
    return dict((host, answer["facts"]) for host, (answer, error) in answers.items()
                if error is None and isinstance((answer or {}).get("facts"), dict))


def _holds(doc: Optional[Mapping[str, Any]], made: Mapping[str, Any]) -> bool:
    """Whether ``doc`` says what the change ``made`` would (a grant of the same key and role,
    the same limits): then nothing is written."""
    if made["kind"] == "grant":
        held = ((doc or {}).get("members") or {}).get(made["user"]) or {}
        return (held.get("role") == made["role"]
                and (held.get("key") or "").split()[:2] == made["key"].split()[:2])
    if made["kind"] == "limit":
        held = ((doc or {}).get("limits") or {}).get(made["user"])
        return held is not None and all(held.get(k) == made[k] for k in team.LIMIT_FIELDS)
    return False


def change(name: str, operation: str, by: str, user: str, key_file: Optional[str] = None,
           admin: bool = False, limits: Optional[Mapping[str, Optional[int]]] = None,
           docker: Optional[Docker] = None, root: Optional[str] = None,
           settings: Optional[Dict[str, Any]] = None, check_mode: bool = False) -> Dict[str, Any]:
    """Grant, revoke or set limits on every host of fleet ``name``; ``by`` makes the change.
    Returns ``{"fleet", "change", "changed", "members"}``; MembershipError (one line) when the
    change is refused or a host did not take it."""
    root = state.state_dir(root)
    key = team.read_key(key_file or "") if operation == "grant" else None
    record = find(name, docker, root, settings)
    nodes = nodes_of(record, root)
    if not nodes:
        raise MembershipError("fleet %s has no running hosts to change its members on" % name)
    doc, held, errors = read(nodes)
    if errors:
        raise MembershipError("cannot change the members of fleet %s while some of its hosts "
                              "cannot be read (nothing was changed): %s"
                              % (name, _unreached(errors)))
    if doc is None:
        # A fleet made before members existed: the controller that holds its key makes the
        # first document, its user the admin.
        ensured = ensure(record, root, by)
        if not ensured["made"]:
            raise MembershipError("the hosts of fleet %s hold no members document and this "
                                  "controller does not hold the fleet's key: apply the fleet "
                                  "from the controller that made it" % name)
        doc, held, errors = read(nodes)
    when = team.stamp(controller_id(by, root))
    if operation == "grant" and key is not None:
        made = team.grant(doc, name, by, user, key, admin, when)
    elif operation == "revoke":
        made = team.revoke(doc, name, by, user, when)
    elif operation == "limit":
        made = team.limit(doc, name, by, user, limits or {}, when)
    else:
        raise MembershipError("unknown members operation %r" % operation)
    if _holds(doc, made):
        return {"fleet": name, "change": made, "changed": False, "members": team.table_rows(doc)}
    if check_mode:
        return {"fleet": name, "change": made, "changed": True, "members": team.table_rows(doc)}
    behind = [h for h, d in held.items() if d != members_merge(d, doc)]
    parallel(behind, lambda host: nodes[host].call(
        "members_sync", {"doc": doc, "login_user": nodes[host].instance.get("user")},
        timeout=60))
    first = min(nodes)   # the one host that posts the change to the fleet's webhooks
    answers = parallel(sorted(nodes), lambda host: nodes[host].call(
        "members_change", {"change": made, "login_user": nodes[host].instance.get("user"),
                           "deliver": host == first}, timeout=60))
    failed = {h: str(e.detail if isinstance(e, NodeError) else e)
              for h, (_a, e) in answers.items() if e is not None}
    if failed:
        raise MembershipError("fleet %s: the change reached %d of %d hosts; run it again: %s"
                              % (name, len(nodes) - len(failed), len(nodes), _unreached(failed)))
    final, _held, _errors = read(nodes)
    if operation in ("grant", "revoke"):
        access.publish(cast(Dict[str, Any], record), user, made.get("fingerprint"), docker,
                       root, settings)
    return {"fleet": name, "change": made, "changed": True, "members": team.table_rows(final)}


# ---- a member's service token: its digest on the fleet's hosts ----------------------------

DIGEST = re.compile(r"[0-9a-f]{64}\Z")


def _check_digest(digest: Any, what: str = "token_sha256") -> str:
    if not isinstance(digest, str) or not DIGEST.match(digest):
        raise MembershipError("%s must be a lower-case hex SHA-256 (64 characters)" % what)
    return digest


def publish_token(nodes: Mapping[str, Node], fleet: str, user: str, digest: str,
                  root: Optional[str] = None, now: Optional[float] = None) -> Dict[str, Any]:
    """Set ``user``'s token digest in their own member entry on every host of ``nodes`` (the
    hosts of fleet ``fleet``). ``{"fleet", "changed", "hosts": [hosts that hold it now],
    "unreached": {host: error}}``; MembershipError when no host took it (the user is not a
    member, no host answers), naming each host's answer. A host that did not answer keeps the
    digest it held; the next publish (a service apply) reaches it."""
    _check_digest(digest)
    if not nodes:
        raise MembershipError("fleet %s has no running hosts to publish the token on" % fleet)
    when = team.stamp(controller_id(user, state.state_dir(root)), now)
    payload = {"fleet": fleet, "user": user, "token_sha256": digest, "stamp": when}
    answers = parallel(sorted(nodes), lambda host: nodes[host].call(
        "member_token", payload, timeout=60))
    failed = {h: str(e.detail if isinstance(e, NodeError) else e)
              for h, (_a, e) in answers.items() if e is not None}
    if len(failed) == len(nodes):
        raise MembershipError("cannot publish the service token of %s on fleet %s: %s"
                              % (user, fleet, _unreached(failed)))
    return {"fleet": fleet, "hosts": sorted(h for h in nodes if h not in failed),
            "changed": any((a or {}).get("applied") for a, e in answers.values() if e is None),
            "unreached": failed}


def publish_token_to(name: str, user: str, digest: str, docker: Optional[Docker] = None,
                     root: Optional[str] = None,
                     settings: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
    """``publish_token`` on the hosts of fleet ``name``, found as ``gpufleet fleet members``
    finds it."""
    root = state.state_dir(root)
    record = find(name, docker, root, settings)
    return publish_token(nodes_of(record, root), name, user, digest, root)


def held_digest(doc: Optional[Mapping[str, Any]], user: str) -> Optional[str]:
    """The token digest ``user``'s member entry holds in ``doc``, or None."""
    return (((doc or {}).get("members") or {}).get(user) or {}).get("token_sha256")


def republish_token(records: Iterable[Mapping[str, Any]], user: str, replaced: str,
                    digest: str, root: Optional[str] = None,
                    skip: Iterable[str] = ()) -> Dict[str, Any]:
    """Put ``digest`` on every fleet of ``records`` whose hosts hold ``replaced`` (the digest of
    the token it replaces) for ``user``: ``{"published": [fleets], "unread": {fleet: error}}``
    (a fleet none of whose hosts answered, or that refused the new digest)."""
    _check_digest(digest)
    _check_digest(replaced, "the replaced token's digest")
    root = state.state_dir(root)
    published: List[str] = []
    unread: Dict[str, str] = {}
    for record in records:
        name = record.get("name") or ""
        nodes = nodes_of(record, root)
        if not nodes or name in skip:
            continue
        doc, held, errors = read(nodes)
        if not held:
            unread[name] = _unreached(errors)
            continue
        if held_digest(doc, user) != replaced:
            continue
        try:
            publish_token(nodes, name, user, digest, root)
        except MembershipError as exc:
            unread[name] = str(exc)
            continue
        published.append(name)
    return {"published": sorted(published), "unread": unread}


def _token(params: Mapping[str, Any], by: str, root: str, settings: Optional[Dict[str, Any]],
           docker: Optional[Docker], collect: Optional[Callable[..., list]],
           check_mode: bool) -> Dict[str, Any]:
    """operation=token: publish ``by``'s digest on ``fleet``, and with ``replaces_sha256`` on
    every fleet that holds that one (the fleets ``collect`` finds)."""
    if params.get("user") not in (None, "", by):
        raise MembershipError("a member publishes only their own service token: %s cannot "
                              "publish one for %s" % (by, params["user"]))
    digest = _check_digest(_need(params, "token_sha256", "operation=token"))
    replaced = params.get("replaces_sha256")
    if not params.get("fleet") and not replaced:
        raise MembershipError("operation=token needs fleet, or replaces_sha256 (a rotate)")
    result: Dict[str, Any] = {"user": by, "published": [], "unread": {}, "changed": False}
    if check_mode:
        return result
    if params.get("fleet"):
        done = publish_token_to(params["fleet"], by, digest, docker, root, settings)
        result["published"].append(done["fleet"])
        result["changed"] = done["changed"]
        result["unread"].update(("%s/%s" % (done["fleet"], h), e)
                                for h, e in done["unreached"].items())
    if replaced:
        if collect is None:
            raise MembershipError("operation=token with replaces_sha256 needs the fleets")
        again = republish_token(collect(root=root, docker=docker), by, replaced, digest, root,
                                skip=[str(params.get("fleet") or "")])
        result["published"] = sorted(set(result["published"]) | set(again["published"]))
        result["unread"].update(again["unread"])
        result["changed"] = result["changed"] or bool(again["published"])
    return result


OPERATIONS = ("list", "grant", "revoke", "limit", "ensure", "token")
FLEET_MEMBERS_ARGS = dict(
    fleet=dict(type="str"), operation=dict(type="str", default="list", choices=list(OPERATIONS)),
    token_sha256=dict(type="str", no_log=True), replaces_sha256=dict(type="str", no_log=True),
    user=dict(type="str"), key=dict(type="path", no_log=False), admin=dict(type="bool", default=False),
    default=dict(type="bool", default=False), runs=dict(type="int"), gpus=dict(type="int"),
    nodes=dict(type="int"), by=dict(type="str"), record=dict(type="dict"),
    state_dir=dict(type="path"), backend_settings=dict(type="dict"))


def _need(params: Mapping[str, Any], name: str, why: str) -> Any:
    if params.get(name) in (None, ""):
        raise MembershipError("%s needs %s" % (why, name))
    return params[name]


def run(params: Mapping[str, Any], check_mode: bool = False,
        docker: Optional[Docker] = None,
        collect: Optional[Callable[..., list]] = None) -> Dict[str, Any]:
    """What the fleet_members module does with its parameters (FLEET_MEMBERS_ARGS);
    ``collect(root=..., docker=...)``: the fleet records a rotated token is published again on (the
    module passes tasks.surveys.collect_fleets, which imports this module)."""
    operation = params.get("operation") or "list"
    root = state.state_dir(params.get("state_dir"))
    settings = state.backend_settings(root, params.get("backend_settings"))
    docker = docker if docker is not None else Docker()
    by: Optional[str] = None
    try:
        by = params.get("by") or identity.user_name()
    except identity.IdentityError as exc:
        if operation != "ensure":
            raise MembershipError(str(exc)) from exc
    if operation == "ensure":
        record = _need(params, "record", "operation=ensure")
        if check_mode:
            return {"changed": False, "fleet": record.get("name")}
        if by is None:
            # Applying a fleet does not fail for want of a user name: its hosts only get no
            # first members document (nobody could be its admin).
            done = ensure(record, root, None, make=False)
            return dict(done, changed=bool(done["synced"]), fleet=record.get("name"),
                        warnings=["no members document was made for fleet %s: set $%s to your "
                                  "user name and apply it again" % (record.get("name"),
                                                                    identity.USER_ENV)])
        done = ensure(record, root, by)
        return dict(done, changed=bool(done["made"] or done["synced"]), fleet=record.get("name"))
    author = by or ""
    if operation == "token":
        return _token(params, author, root, settings, docker, collect, check_mode)
    name = _need(params, "fleet", "operation=%s" % operation)
    if operation == "list":
        return dict(members(name, docker, root, settings), changed=False)
    if operation == "limit":
        if params.get("default") == bool(params.get("user")):
            raise MembershipError("a limit is for one user or for everyone: give user or "
                                  "default (one of them)")
        user = team.DEFAULT if params.get("default") else params["user"]
    else:
        user = _need(params, "user", "operation=%s" % operation)
    if operation == "grant":
        _need(params, "key", "operation=grant")
    limits = {k: params.get(k) for k in team.LIMIT_FIELDS}
    return change(name, operation, author, user, key_file=params.get("key"),
                  admin=bool(params.get("admin")), limits=limits, docker=docker, root=root,
                  settings=settings, check_mode=check_mode)
