# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What host tools print, as the tests of hosts (and of tasks' health refresh) read it:
dcgmi's health reports, and the firewall rules the role writes as nft and ufw list them."""

from __future__ import annotations

# `dcgmi health -c -j` as dcgmi prints it (jsoncpp's styled output of the report tree; keys in
# name order; long messages cut into parts of at most 54 characters).
HEALTHY_JSON = """\
{
   "body" : {
      "Overall Health" : {
         "value" : "Healthy"
      }
   },
   "header" : [ "Health Monitor Report" ]
}
"""
WARNING_JSON = """\
{
   "body" : {
      "GPU" : {
         "children" : {
            "0" : {
               "children" : {
                  "Errors" : {
                     "children" : {
                        "PCIe system" : {
                           "overflow" : [
                              "Detected more than 8 PCIe replays per minute for GPU 0",
                              ": 13"
                           ],
                           "value" : "Warning"
                        }
                     }
                  }
               },
               "value" : "Warning"
            }
         }
      },
      "Overall Health" : {
         "value" : "Warning"
      }
   },
   "header" : [ "Health Monitor Report" ]
}
"""
FAILURE_JSON = """\
{
   "body" : {
      "GPU" : {
         "children" : {
            "1" : {
               "children" : {
                  "Errors" : {
                     "children" : {
                        "InfoROM system" : {
                           "overflow" : [
                              "A corrupt InfoROM has been detected in GPU 1."
                           ],
                           "value" : "Warning"
                        },
                        "Memory system" : {
                           "overflow" : [
                              "Detected 2 volatile double-bit ECC error(s) in GPU 1."
                           ],
                           "value" : "Failure"
                        }
                     }
                  }
               },
               "value" : "Failure"
            },
            "10" : {
               "children" : {
                  "Errors" : {
                     "children" : {
                        "Thermal system" : {
                           "overflow" : [
                              "Clocks event: thermal violation detected for GPU 10 for",
                              "1200 ms. Check the cooling of the system."
                           ],
                           "value" : "Warning"
                        }
                     }
                  }
               },
               "value" : "Warning"
            },
            "2" : {
               "children" : {
                  "Errors" : {
                     "children" : {
                        "PCIe system" : {
                           "overflow" : [
                              "Detected more than 8 PCIe replays per minute for GPU 2",
                              ": 9"
                           ],
                           "value" : "Warning"
                        }
                     }
                  }
               },
               "value" : "Warning"
            }
         }
      },
      "NvSwitch" : {
         "children" : {
            "3" : {
               "children" : {
                  "Errors" : {
                     "children" : {
                        "NvSwitch F" : {
                           "overflow" : [
                              "Detected fatal errors on NvSwitch 3 link 17"
                           ],
                           "value" : "Failure"
                        }
                     }
                  }
               },
               "value" : "Failure"
            }
         }
      },
      "Overall Health" : {
         "value" : "Failure"
      }
   },
   "header" : [ "Health Monitor Report" ]
}
"""

# `dcgmi health -c`: the same reports as dcgmi's tree table (columns of 28 and 60 characters).
HEALTHY_TABLE = """\
+---------------------------+----------------------------------------------------------+
| Health Monitor Report                                                                |
+===========================+==========================================================+
| Overall Health            | Healthy                                                  |
+---------------------------+----------------------------------------------------------+
"""
WARNING_TABLE = """\
+---------------------------+----------------------------------------------------------+
| Health Monitor Report                                                                |
+===========================+==========================================================+
| Overall Health            | Warning                                                  |
| GPU                       |                                                          |
| -> 0                      | Warning                                                  |
|    -> Errors              |                                                          |
|       -> PCIe system      | Warning                                                  |
|                           | Detected more than 8 PCIe replays per minute for GPU 0   |
|                           | : 13                                                     |
+---------------------------+----------------------------------------------------------+
"""
FAILURE_TABLE = """\
+---------------------------+----------------------------------------------------------+
| Health Monitor Report                                                                |
+===========================+==========================================================+
| Overall Health            | Failure                                                  |
| GPU                       |                                                          |
| -> 1                      | Failure                                                  |
|    -> Errors              |                                                          |
|       -> Memory system    | Failure                                                  |
|                           | Detected 2 volatile double-bit ECC error(s) in GPU 1.    |
|       -> InfoROM system   | Warning                                                  |
|                           | A corrupt InfoROM has been detected in GPU 1.            |
| -> 2                      | Warning                                                  |
|    -> Errors              |                                                          |
|       -> PCIe system      | Warning                                                  |
|                           | Detected more than 8 PCIe replays per minute for GPU 2   |
|                           | : 9                                                      |
| -> 10                     | Warning                                                  |
|    -> Errors              |                                                          |
|       -> Thermal system   | Warning                                                  |
|                           | Clocks event: thermal violation detected for GPU 10 for  |
|                           | 1200 ms. Check the cooling of the system.                |
| NvSwitch                  |                                                          |
| -> 3                      | Failure                                                  |
|    -> Errors              |                                                          |
|       -> NvSwitch F       | Failure                                                  |
|                           | Detected fatal errors on NvSwitch 3 link 17              |
+---------------------------+----------------------------------------------------------+
"""
# An older dcgmi with narrower columns (34 + 44) prints the same tree.
OLD_WARNING_TABLE = """\
+---------------------------------+------------------------------------------+
| Health Monitor Report                                                      |
+=================================+==========================================+
| Overall Health                  | Warning                                  |
| GPU                             |                                          |
| -> 0                            | Warning                                  |
|    -> Errors                    |                                          |
|       -> Memory system          | Warning                                  |
|                                 | Detected 1 volatile double-bit ECC       |
|                                 | error(s) in GPU 0.                       |
+---------------------------------+------------------------------------------+
"""


# `nft -j list table inet gpufleet` (nftables 1.0.6, Debian 12) for the rules the role writes
# with peers 10.79.7.11 and 10.79.7.12 (auto-merged into a range), sources 192.0.2.0/24 and
# 2001:db8:7::/48, the controller 10.79.7.1, TCP port 8443 and UDP ports 60000-60010.
NFT_GPUFLEET = (
    '{"nftables": [{"metainfo": {"version": "1.0.6", "release_name": "Lester Gooch #5", '
    '"json_schema_version": 1}}, '
    '{"table": {"family": "inet", "name": "gpufleet", "handle": 7}}, '
    '{"set": {"family": "inet", "name": "control_v4", "table": "gpufleet", '
    '"type": "ipv4_addr", "handle": 2, "flags": ["interval"], "elem": ["10.79.7.1"]}}, '
    '{"set": {"family": "inet", "name": "control_v6", "table": "gpufleet", '
    '"type": "ipv6_addr", "handle": 3, "flags": ["interval"]}}, '
    '{"set": {"family": "inet", "name": "peers_v4", "table": "gpufleet", "type": "ipv4_addr", '
    '"handle": 4, "flags": ["interval"], "elem": [{"range": ["10.79.7.11", "10.79.7.12"]}]}}, '
    '{"set": {"family": "inet", "name": "peers_v6", "table": "gpufleet", "type": "ipv6_addr", '
    '"handle": 5, "flags": ["interval"]}}, '
    '{"set": {"family": "inet", "name": "sources_v4", "table": "gpufleet", '
    '"type": "ipv4_addr", "handle": 6, "flags": ["interval"], '
    '"elem": [{"prefix": {"addr": "192.0.2.0", "len": 24}}]}}, '
    '{"set": {"family": "inet", "name": "sources_v6", "table": "gpufleet", '
    '"type": "ipv6_addr", "handle": 7, "flags": ["interval"], '
    '"elem": [{"prefix": {"addr": "2001:db8:7::", "len": 48}}]}}, '
    '{"set": {"family": "inet", "name": "tcp_ports", "table": "gpufleet", '
    '"type": "inet_service", "handle": 8, "flags": ["interval"], "elem": [8443]}}, '
    '{"set": {"family": "inet", "name": "udp_ports", "table": "gpufleet", '
    '"type": "inet_service", "handle": 9, "flags": ["interval"], "elem": [{"range": [60000, '
    '60010]}]}}, '
    '{"chain": {"family": "inet", "table": "gpufleet", "name": "input", "handle": 1, '
    '"type": "filter", "hook": "input", "prio": 0, "policy": "drop"}}, '
    '{"rule": {"family": "inet", "table": "gpufleet", "chain": "input", "handle": 10, '
    '"expr": [{"match": {"op": "in", "left": {"ct": {"key": "state"}}, '
    '"right": ["established", "related"]}}, '
    '{"accept": null}]}}, '
    '{"rule": {"family": "inet", "table": "gpufleet", "chain": "input", "handle": 11, '
    '"expr": [{"match": {"op": "in", "left": {"ct": {"key": "state"}}, "right": "invalid"}}, '
    '{"drop": null}]}}, '
    '{"rule": {"family": "inet", "table": "gpufleet", "chain": "input", "handle": 12, '
    '"expr": [{"match": {"op": "==", "left": {"meta": {"key": "iif"}}, "right": "lo"}}, '
    '{"accept": null}]}}, '
    '{"rule": {"family": "inet", "table": "gpufleet", "chain": "input", "handle": 14, '
    '"expr": [{"match": {"op": "==", "left": {"meta": {"key": "l4proto"}}, '
    '"right": {"set": ["icmp", "ipv6-icmp"]}}}, '
    '{"accept": null}]}}, '
    '{"rule": {"family": "inet", "table": "gpufleet", "chain": "input", "handle": 15, '
    '"expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip6", '
    '"field": "saddr"}}, "right": {"prefix": {"addr": "fe80::", "len": 10}}}}, '
    '{"match": {"op": "==", "left": {"payload": {"protocol": "udp", "field": "dport"}}, '
    '"right": 546}}, '
    '{"accept": null}]}}, '
    '{"rule": {"family": "inet", "table": "gpufleet", "chain": "input", "handle": 16, '
    '"expr": [{"match": {"op": "==", "left": {"meta": {"key": "iifname"}}, '
    '"right": "docker0"}}, '
    '{"accept": null}]}}, '
    '{"rule": {"family": "inet", "table": "gpufleet", "chain": "input", "handle": 17, '
    '"expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "tcp", '
    '"field": "dport"}}, "right": 22}}, '
    '{"accept": null}]}}, '
    '{"rule": {"family": "inet", "table": "gpufleet", "chain": "input", "handle": 18, '
    '"expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip", '
    '"field": "saddr"}}, "right": "@control_v4"}}, '
    '{"accept": null}]}}, '
    '{"rule": {"family": "inet", "table": "gpufleet", "chain": "input", "handle": 19, '
    '"expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip6", '
    '"field": "saddr"}}, "right": "@control_v6"}}, '
    '{"accept": null}]}}, '
    '{"rule": {"family": "inet", "table": "gpufleet", "chain": "input", "handle": 20, '
    '"expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip", '
    '"field": "saddr"}}, "right": "@peers_v4"}}, '
    '{"accept": null}]}}, '
    '{"rule": {"family": "inet", "table": "gpufleet", "chain": "input", "handle": 21, '
    '"expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip6", '
    '"field": "saddr"}}, "right": "@peers_v6"}}, '
    '{"accept": null}]}}, '
    '{"rule": {"family": "inet", "table": "gpufleet", "chain": "input", "handle": 22, '
    '"expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip", '
    '"field": "saddr"}}, "right": "@sources_v4"}}, '
    '{"accept": null}]}}, '
    '{"rule": {"family": "inet", "table": "gpufleet", "chain": "input", "handle": 23, '
    '"expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "ip6", '
    '"field": "saddr"}}, "right": "@sources_v6"}}, '
    '{"accept": null}]}}, '
    '{"rule": {"family": "inet", "table": "gpufleet", "chain": "input", "handle": 24, '
    '"expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "tcp", '
    '"field": "dport"}}, "right": "@tcp_ports"}}, '
    '{"accept": null}]}}, '
    '{"rule": {"family": "inet", "table": "gpufleet", "chain": "input", "handle": 25, '
    '"expr": [{"match": {"op": "==", "left": {"payload": {"protocol": "udp", '
    '"field": "dport"}}, "right": "@udp_ports"}}, '
    '{"accept": null}]}}]}'
)

# `ufw status verbose` (ufw 0.36.2, Debian 12) for the same rules.
UFW_STATUS = """\
Status: active
Logging: on (low)
Default: deny (incoming), allow (outgoing), deny (routed)
New profiles: skip

To                         Action      From
--                         ------      ----
Anywhere on docker0        ALLOW IN    Anywhere                   # gpufleet:interface
22/tcp                     ALLOW IN    Anywhere                   # gpufleet:ssh
Anywhere                   ALLOW IN    10.79.7.11                 # gpufleet:peer
60000:60010/udp            ALLOW IN    Anywhere                   # gpufleet:udp
8443/tcp                   ALLOW IN    Anywhere                   # gpufleet:tcp
Anywhere                   ALLOW IN    10.79.7.12                 # gpufleet:peer
Anywhere                   ALLOW IN    10.79.7.1                  # gpufleet:control
Anywhere                   ALLOW IN    192.0.2.0/24               # gpufleet:source
Anywhere (v6) on docker0   ALLOW IN    Anywhere (v6)              # gpufleet:interface
Anywhere (v6)              ALLOW IN    2001:db8:7::/48            # gpufleet:source
22/tcp (v6)                ALLOW IN    Anywhere (v6)              # gpufleet:ssh
60000:60010/udp (v6)       ALLOW IN    Anywhere (v6)              # gpufleet:udp
8443/tcp (v6)              ALLOW IN    Anywhere (v6)              # gpufleet:tcp

"""
