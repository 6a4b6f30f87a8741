# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""A fleet's members on each of its hosts: the members document and the members' keys.

This file travels to the hosts after tasks.hostside.nodeside (tasks.ssh.host_source) and runs in
their namespace, so it uses the standard library only and the Python 3.6+ of any
Ansible-managed host; every top-level name is unique across the files sent with it. The
controller's side is tasks.membership, and the document's shape is teams.members' docstring.

On the host, under ``TEAM_ROOT`` (``/var/lib/gpufleet/team``, root's, 0700):

- ``members.json``: the members document;
- ``lock``: an exclusive flock held for every read-change-write of it.

Every change carries ``"stamp": [epoch, controller]`` and ``"by": user``. One entry per user
holds both grant and revoke (``members`` or ``revoked``), one per user or ``"*"`` holds the
limits; a change replaces an entry only when its stamp is greater than the entry's, so hosts
that see concurrent changes in different orders end in the same state (last writer wins).

The member's key goes into the fleet login user's ``authorized_keys``, one line per member,
each with a comment ``gpufleet-member fleet=F user=U``: after every change the marked lines of
this fleet are written again from the document (under the lock, atomically, keeping the file's
owner and mode), so a revoke takes out exactly its member's line and never a line without the
mark (the fleet's own key among them).

Operations (joining nodeside's ``OPS``):

- ``members`` ``{}``: ``{"doc": the document or null}``;
- ``members_change`` ``{"change": {...}, "login_user": name}``: refused unless the change's
  ``by`` is an admin in the document; answers ``{"doc", "applied"}`` (``applied`` false when a
  newer change held the entry already);
- ``members_sync`` ``{"doc": {...}, "login_user": name}``: merge a whole document (the first
  one, made at fleet apply, or a copy for a host made later), entry by entry, last writer wins;
- ``member_token`` ``{"fleet", "user", "token_sha256", "stamp"}``: sets the digest of ``user``'s
  service token in ``user``'s own member entry (``token_sha256``, with its own
  ``token_stamp``), refused when ``user`` is not a member; answers ``{"applied"}`` (false when
  a newer digest was there already).

A member entry's token has its own stamp, so that a token and a grant made at once do not
undo each other: a merge keeps the entry with the greater stamp and, on it, the newest digest
given for that grant (the same grant stamp) or after it (a token stamp greater than the
grant's). A revoke drops the digest, and so does a grant made after one: a member granted again
publishes their token again (their next service apply does).
"""

import json
import os

try:  # imported as part of the collection (tests, the controller)
    from .booking import _Lock
    from .nodeside import OPS, Failure
except ImportError:  # on a host: nodeside's source runs first in this namespace
    pass

TEAM_ROOT = "/var/lib/gpufleet/team"
MEMBER_MARK = "gpufleet-member"
_MEMBER_SECTIONS = ("members", "revoked", "limits")
_MEMBER_LIMIT_FIELDS = ("runs", "gpus", "nodes")
_MEMBER_TOKEN_FIELDS = ("token_sha256", "token_stamp")


def team_path(*parts):
    """A path under TEAM_ROOT (read when called: tests point it elsewhere)."""
    return os.path.join(TEAM_ROOT, *parts)


def _members_read():
    try:
        with open(team_path("members.json")) as handle:
            doc = json.load(handle)
    except (IOError, OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def _members_facts_read():
    """The host facts the last fleet apply measured on this host (``host-facts.json``), or
    None: what a member's controller, which holds no facts cache of the fleet, places tasks by."""
    try:
        with open(team_path("host-facts.json")) as handle:
            facts = json.load(handle)
    except (IOError, OSError, ValueError):
        return None
    return facts if isinstance(facts, dict) else None


def _members_write(doc, name="members.json"):
    path = team_path(name)
    temp = path + ".tmp"
    with open(temp, "w") as handle:
        json.dump(doc, handle, sort_keys=True)
        handle.flush()
        os.fsync(handle.fileno())
    os.chmod(temp, 0o600)
    os.rename(temp, path)


def _members_stamp(entry):
    """An entry's stamp as a comparable pair; an entry without one is older than any."""
    stamp = (entry or {}).get("stamp")
    if isinstance(stamp, (list, tuple)) and len(stamp) == 2:
        try:
            return (float(stamp[0]), str(stamp[1]))
        except (TypeError, ValueError):
            pass
    return (float("-inf"), "")


def _members_blank(fleet):
    return {"fleet": fleet, "members": {}, "revoked": {}, "limits": {}}


def _members_user_entry(doc, user):
    """``(section, entry)`` of ``user``'s grant/revoke entry, or ``(None, None)``."""
    for section in ("members", "revoked"):
        entry = (doc.get(section) or {}).get(user)
        if entry is not None:
            return section, entry
    return None, None


def _members_token_stamp(entry):
    return _members_stamp({"stamp": (entry or {}).get("token_stamp")})


def _members_token_of(entries, winner):
    """The newest ``(token_sha256, token_stamp)`` of ``entries`` (a user's member entries) that
    holds for the grant ``winner``: given for it or after it; None when none does."""
    best = None
    for entry in entries:
        if not entry.get("token_sha256"):
            continue
        stamp = _members_token_stamp(entry)
        if (_members_stamp(entry) != _members_stamp(winner)
                and stamp <= _members_stamp(winner)):
            continue
        if best is None or stamp > _members_token_stamp(best):
            best = entry
    return None if best is None else (best["token_sha256"], best.get("token_stamp"))


def members_merge(mine, theirs):
    """``mine`` and ``theirs`` merged entry by entry, the greater stamp winning (a new dict).
    Grant and revoke share one entry per user; limits have one per user or ``"*"``; a member
    entry's token digest goes with its own stamp (the module's docstring)."""
    merged = _members_blank((mine or {}).get("fleet") or (theirs or {}).get("fleet"))
    docs = [d for d in (mine, theirs) if d]
    users = set()
    for doc in docs:
        users.update((doc.get("members") or {}).keys())
        users.update((doc.get("revoked") or {}).keys())
    for user in users:
        best = None
        for doc in docs:
            section, entry = _members_user_entry(doc, user)
            if entry is not None and (best is None
                                      or _members_stamp(entry) > _members_stamp(best[1])):
                best = (section, entry)
        entry = dict(best[1])
        for name in _MEMBER_TOKEN_FIELDS:
            entry.pop(name, None)
        if best[0] == "members":
            token = _members_token_of([(d.get("members") or {}).get(user) or {} for d in docs],
                                      best[1])
            if token is not None:
                entry["token_sha256"], entry["token_stamp"] = token
        merged[best[0]][user] = entry
    for doc in docs:
        for key, entry in (doc.get("limits") or {}).items():
            held = merged["limits"].get(key)
            if held is None or _members_stamp(entry) > _members_stamp(held):
                merged["limits"][key] = dict(entry)
    return merged


def members_apply(doc, change):
    """``(doc, applied)``: the document with ``change`` made, when its stamp is greater than
    that of the entry it changes. Failure when ``change`` is not one."""
    kind = change.get("kind")
    user = change.get("user")
    stamp = change.get("stamp")
    if not isinstance(user, str) or not user or not isinstance(stamp, list):
        raise Failure("a members change needs a user and a stamp")
    base = {"by": change.get("by"), "stamp": stamp}
    doc = members_merge(doc, None)
    if kind == "limit":
        held = doc["limits"].get(user)
        if held is not None and _members_stamp(held) >= _members_stamp(change):
            return doc, False
        entry = dict(base)
        for name in _MEMBER_LIMIT_FIELDS:
            entry[name] = change.get(name)
        doc["limits"][user] = entry
        return doc, True
    if kind not in ("grant", "revoke"):
        raise Failure("unknown members change %r" % (kind,))
    section, held = _members_user_entry(doc, user)
    if held is not None and _members_stamp(held) >= _members_stamp(change):
        return doc, False
    doc["members"].pop(user, None)
    doc["revoked"].pop(user, None)
    if kind == "grant":
        if not change.get("key"):
            raise Failure("a grant needs the member's key")
        entry = dict(base, role="admin" if change.get("role") == "admin" else "member",
                     key=change["key"], fingerprint=change.get("fingerprint"))
        if section == "members" and held.get("token_sha256"):
            # A member granted again (another role or key) keeps the token they published.
            for name in _MEMBER_TOKEN_FIELDS:
                entry[name] = held.get(name)
        doc["members"][user] = entry
    else:
        doc["revoked"][user] = base
    return doc, True


def _members_home(login_user):
    """The home folder of ``login_user`` on this host (tests replace it)."""
    import pwd

    try:
        return pwd.getpwnam(login_user).pw_dir
    except KeyError as exc:
        raise Failure("the fleet's login user %s does not exist on this host"
                      % login_user) from exc


def _members_marked(line, fleet):
    """Whether ``line`` of authorized_keys is a member line of ``fleet``."""
    return (" %s fleet=%s user=" % (MEMBER_MARK, fleet)) in line


def members_key_lines(doc):
    """The authorized_keys lines of ``doc``'s members, each with its mark."""
    fleet = doc.get("fleet") or ""
    lines = []
    for user in sorted(doc.get("members") or {}):
        key = (doc["members"][user].get("key") or "").split()
        if len(key) >= 2 and "\n" not in user:
            lines.append("%s %s %s fleet=%s user=%s" % (key[0], key[1], MEMBER_MARK, fleet, user))
    return lines


def members_write_keys(doc, login_user):
    """Write the fleet's member lines into ``login_user``'s authorized_keys: every other line
    stays as it is; the file keeps its owner and mode and is replaced atomically."""
    if not login_user:
        return False
    fleet = doc.get("fleet") or ""
    home = _members_home(login_user)
    folder = os.path.join(home, ".ssh")
    path = os.path.join(folder, "authorized_keys")
    try:
        info = os.stat(home)
    except OSError as exc:
        raise Failure("the home folder %s of %s is missing" % (home, login_user)) from exc
    if not os.path.isdir(folder):
        os.mkdir(folder, 0o700)
        os.chown(folder, info.st_uid, info.st_gid)
    try:
        with open(path) as handle:
            old = handle.read().splitlines()
        held = os.stat(path)
        owner, mode = (held.st_uid, held.st_gid), held.st_mode & 0o7777
    except (IOError, OSError):
        old, owner, mode = [], (info.st_uid, info.st_gid), 0o600
    kept = [line for line in old if not _members_marked(line, fleet)]
    plain = set(" ".join(line.split()[:2]) for line in kept if line.strip())
    added = [line for line in members_key_lines(doc)
             if " ".join(line.split()[:2]) not in plain]
    new = kept + added
    if new == old:
        return False
    temp = path + ".gpufleet-tmp"
    with open(temp, "w") as handle:
        handle.write("".join(line + "\n" for line in new))
        handle.flush()
        os.fsync(handle.fileno())
    os.chown(temp, owner[0], owner[1])
    os.chmod(temp, mode)
    os.rename(temp, path)
    return True


def op_members(payload):
    """The members document, or null on a host that has none; with ``facts`` asked, also the
    host facts the fleet's last apply left here (null when none)."""
    answer = {"doc": _members_read()}
    if payload.get("facts"):
        answer["facts"] = _members_facts_read()
    return answer


def op_members_change(payload):
    """Make one change (grant, revoke, limit) when its author is an admin of the fleet."""
    change = payload.get("change")
    if not isinstance(change, dict):
        raise Failure("members_change needs a change")
    by = change.get("by")
    with _Lock(team_path(), private=True):
        doc = _members_read()
        if doc is None:
            raise Failure("this host holds no members document of the fleet: apply the fleet "
                          "again (gpufleet apply) so that its hosts get one")
        entry = (doc.get("members") or {}).get(by) or {}
        if entry.get("role") != "admin":
            raise Failure("%s is not an admin of fleet %s: only its admins change members and "
                          "limits" % (by, doc.get("fleet")))
        doc, applied = members_apply(doc, change)
        if applied:
            _members_write(doc)
        members_write_keys(doc, payload.get("login_user"))
    return _members_told_proxy({"doc": doc, "applied": applied})


def op_members_sync(payload):
    """Merge a whole document into this host's (last writer wins per entry)."""
    given = payload.get("doc")
    if not isinstance(given, dict):
        raise Failure("members_sync needs a document")
    with _Lock(team_path(), private=True):
        doc = _members_read()
        merged = members_merge(doc, given)
        if merged != doc:
            _members_write(merged)
        members_write_keys(merged, payload.get("login_user"))
        facts = payload.get("facts")
        if isinstance(facts, dict) and facts and facts != _members_facts_read():
            _members_write(facts, "host-facts.json")
    return _members_told_proxy({"doc": merged, "applied": merged != doc})


def members_set_token(doc, payload):
    """``(doc, applied)``: ``doc`` with the digest of ``payload`` in its user's member entry,
    when its stamp is greater than that of the digest held. Failure when the user is not a
    member of the document's fleet, or the payload is not a token change."""
    user = payload.get("user")
    digest = payload.get("token_sha256")
    stamp = payload.get("stamp")
    fleet = doc.get("fleet")
    if not isinstance(user, str) or not user or not isinstance(stamp, list):
        raise Failure("member_token needs a user and a stamp")
    if (not isinstance(digest, str) or len(digest) != 64
            or digest.strip("0123456789abcdef")):
        raise Failure("member_token needs token_sha256, a lower-case hex SHA-256")
    if payload.get("fleet") and fleet and payload["fleet"] != fleet:
        raise Failure("this host belongs to fleet %s, not %s" % (fleet, payload["fleet"]))
    doc = members_merge(doc, None)
    entry = doc["members"].get(user)
    if entry is None:
        raise Failure("%s is not a member of fleet %s: only its members publish a service "
                      "token there (an admin grants them with gpufleet fleet grant)"
                      % (user, fleet))
    if (entry.get("token_sha256")
            and _members_token_stamp(entry) >= _members_stamp({"stamp": stamp})):
        return doc, False
    entry["token_sha256"] = digest
    entry["token_stamp"] = stamp
    return doc, True


def op_member_token(payload):
    """Set the digest of a member's service token in their own entry (last stamp wins)."""
    with _Lock(team_path(), private=True):
        doc = _members_read()
        if doc is None:
            raise Failure("this host holds no members document of the fleet: apply the fleet "
                          "again (gpufleet apply) so that its hosts get one")
        doc, applied = members_set_token(doc, payload)
        if applied:
            _members_write(doc)
    return _members_told_proxy({"applied": applied})


def _members_told_proxy(answer):
    """After a change of the document (a token set, a member revoked), the proxy this host runs
    for services, if any (tasks/hostside/proxyside.py, sent along), makes its token lists again
    from it, so that a revoked member's token stops at once and a new one works at once. A
    proxy that cannot take it is said in the answer (``proxy``); the change itself stands."""
    refresh = globals().get("proxy_refresh_if_routed")
    if answer.get("applied") and refresh is not None:
        try:
            refresh()
        except Failure as exc:
            answer["proxy"] = str(exc)
    return answer


OPS.update({
    "members": op_members,
    "members_change": op_members_change,
    "members_sync": op_members_sync,
    "member_token": op_member_token,
})
