# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""How a request starts on a host: the small program ``python3 -S -c`` runs there (BOOTSTRAP),
which reads the helper's source (tasks.ssh.host_source: tasks.hostside.nodeside and the parts
sent with it), the separator line and the JSON request from its standard input, and runs the
helper's ``serve`` on the request. It is the command line of every request, not part of the
source sent, so it stays here on the controller's side; like the helper, it uses the standard
library only.
"""

SEPARATOR = b"#--gpufleet-request--"
# Where a host keeps the helper compiled, one file per helper source and Python (see bootstrap).
HELPER_CACHE = "/var/lib/gpufleet/helper"


def bootstrap(cache=HELPER_CACHE):
    """The program ``python3 -S -c`` runs on a host for every request (tasks.ssh.Node.call).

    stdin holds the helper's source, the separator line and the request. Compiling the ~60 KB
    source costs about as much as the request itself, so the controller also passes a digest
    of the source as the first argument, and the code object is kept in ``cache`` (marshal,
    one file per digest and Python). It is read only from a folder and a file owned by the
    user it runs as and writable by nobody else; anything odd about the cache (missing,
    foreign, unreadable, another Python) falls back to compiling, so the cache can never
    change what runs, only how soon.
    """
    return (
        "import sys\n"
        "d = sys.stdin.buffer.read()\n"
        "s, _, r = d.partition(b'\\n#--gpufleet-request--\\n')\n"
        "c = p = None\n"
        "try:\n"
        "    import os, marshal\n"
        "    k = sys.argv[1] if len(sys.argv) > 1 else ''\n"
        "    t = sys.implementation.cache_tag\n"
        "    if t and len(k) == 24 and not k.strip('0123456789abcdef'):\n"
        "        f = %r\n"
        "        p = os.path.join(f, k + '.' + t)\n"
        "        def mine(x):\n"
        "            st = os.lstat(x)\n"
        "            return st.st_uid == os.geteuid() and not st.st_mode & 0o022\n"
        "        if os.path.isfile(p) and mine(f) and mine(p):\n"
        "            with open(p, 'rb') as h:\n"
        "                c = marshal.load(h)\n"
        "except Exception:\n"
        "    c = None\n"
        "if c is None:\n"
        "    c = compile(s, 'gpufleet_node', 'exec')\n"
        "    try:\n"
        "        if p:\n"
        "            os.makedirs(f, 0o700, exist_ok=True)\n"
        "            if mine(f):\n"
        "                for n in os.listdir(f):\n"
        "                    if n != os.path.basename(p):\n"
        "                        os.unlink(os.path.join(f, n))\n"
        "                w = '%%s.%%d' %% (p, os.getpid())\n"
        "                with open(w, 'wb') as h:\n"
        "                    marshal.dump(c, h)\n"
        "                os.replace(w, p)\n"
        "    except Exception:\n"
        "        pass\n"
        "g = {'__name__': 'gpufleet_node'}\n"
        "exec(c, g)\n"
        "g['serve'](r)\n"
    ) % cache


BOOTSTRAP = bootstrap()
