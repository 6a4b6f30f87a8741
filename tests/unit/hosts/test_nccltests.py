# -*- coding: utf-8 -*-
# Copyright: gpufleet contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""nccl-tests / rccl-tests output (nccltests): the parser, the expected figures, the comparison
and the gpufleet.cluster.nccl_tests_result / nccl_tests_expected filters.

The samples are real outputs (trimmed to a few rows) in the formats nccl-tests and rccl-tests
print: nccl-tests 2.17 (version line, ``Collective test starting``), 2.13 (no version line), the
pre-2.11 format (no root column, a max-error column), rccl-tests with and without the
``Group`` field, the gpufleet MPI stand-in, and runs with wrong values, ``-c 0``, ``-S``
timestamps, launcher prefixes and NCCL INFO lines mixed in.
"""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.gpufleet.cluster.plugins.filter import nccl_tests as nccl_filter
from ansible_collections.gpufleet.cluster.plugins.module_utils.hosts import (
    nccltests,
    nccltests_compare,
)

GIB = 1024 ** 3

# nccl-tests 2.17 (src/util.cu): 2 nodes x 8 H100 on p5.48xlarge; data rows from an ADT Slurm run.
NCCL_217 = """\
# nccl-tests version 2.17.6 nccl-headers=22602 nccl-library=22602
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 1 minBytes 8 maxBytes 17179869184 step: 2(factor) warmup iters: 1 iters: 20 \
agg iters: 1 validation: 1 graph: 0 unalign: 0
#
# Using devices
""" + "".join(
    "#  Rank %2d Group  0 Pid %6d on p5-node-%d device %2d [0000:%02x:00] NVIDIA H100 80GB HBM3\n"
    % (rank, 4000 + rank, rank // 8, rank % 8, 0x53 + rank % 8) for rank in range(16)) + """\
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1    65.12    0.00    0.00       0    64.87    0.00    0.00       0
     1048576        262144     float     sum      -1    94.33   11.12   20.84       0    93.81   11.18   20.96       0
   268435456      67108864     float     sum      -1   1356.1  197.95  371.16       0   1352.4  198.49  372.17       0
  2147483648     536870912     float     sum      -1   9074.5  236.65  443.72       0   9108.5  235.77  442.06       0
 17179869184    4294967296     float     sum      -1    66132  259.78  487.08       0    66107  259.88  487.27       0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 52.9753
#
# Collective test concluded: all_reduce_perf
"""

# nccl-tests 2.13 (no version line): GCP A3 Mega, 2 nodes x 8 H100, TCPXO.
NCCL_213 = """\
# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 \
agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid   6899 on ztan-mig-235z device  0 [0000:04:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   6900 on ztan-mig-235z device  1 [0000:05:00] NVIDIA H100 80GB HBM3
#  Rank  8 Group  0 Pid   6733 on ztan-mig-gq73 device  0 [0000:04:00] NVIDIA H100 80GB HBM3
#  Rank  9 Group  0 Pid   6734 on ztan-mig-gq73 device  1 [0000:05:00] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1    135.8    0.00    0.00      0    123.5    0.00    0.00      0
    16777216       4194304     float     sum      -1    977.6   17.16   32.18      0    951.6   17.63   33.06      0
  2147483648     536870912     float     sum      -1    12646  169.81  318.40      0    12641  169.88  318.52      0
  8589934592    2147483648     float     sum      -1    47535  180.71  338.82      0    47743  179.92  337.35      0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 70.742
"""

# rccl-tests, one node of 8 MI300X (Kubernetes): version line without '#', Group field.
RCCL_ONE_NODE = """\
# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20 \
agg iters: 1 validation: 1 graph: 0
#
rccl-tests: Version develop:a7809b3
# Using devices
""" + "".join(
    "#  Rank  %d Group  0 Pid   %d on 1942ef50-8240-449e-82ca-4ce7993f70b4-78bfb5d4f4-4z9xh "
    "device  %d [0000:%02x:00] AMD Instinct MI300X\n" % (rank, 7085 + rank, rank, 5 + 32 * rank)
    for rank in range(8)) + """\
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1    19.28    0.00    0.00      0    17.24    0.00    0.00      0
    16777216       4194304     float     sum      -1    149.9  111.92  195.85      0    156.3  107.33  187.83      0
  8589934592    2147483648     float     sum      -1    47617  180.40  315.69      0    47584  180.52  315.91      0
# Errors with asterisks indicate errors that have exceeded the maximum threshold.
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 110.464
#
"""

# rccl-tests, 2 nodes x 8 MI300X (Slurm): no Group field, RCCL/HIP/ROCm lines before the table.
RCCL_TWO_NODES = """\
# nThread 1 nGpus 1 minBytes 8 maxBytes 17179869184 step: 2(factor) warmup iters: 5 iters: 20 \
agg iters: 1 validation: 1 graph: 0
#
rccl-tests: Version develop:448c4c7
# Using devices
""" + "".join(
    "#   Rank %2d Pid %d on     gpu-%d device  %d [0000:%02x:00.0] AMD Instinct MI300X\n"
    % (rank, 3844613 + rank, 53 if rank < 8 else 56, rank % 8, 5 + 32 * (rank % 8))
    for rank in range(16)) + """\
RCCL version : 2.22.3-HEAD:7d8d67c
HIP version  : 6.4.43484-123eb5128
ROCm version : 6.4.2.0-120-e7d83f5
Hostname     : gpu-53
Librccl path : /shared/apps/ubuntu/opt/rocm-6.4.2/lib/librccl.so.1
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1    256.5    0.00    0.00      0    254.7    0.00    0.00      0
  2147483648     536870912     float     sum      -1    11574  185.55  347.90      0    11593  185.24  347.32      0
  8589934592    2147483648     float     sum      -1    45224  189.94  356.14      0    45242  189.87  356.00      0
 17179869184    4294967296     float     sum      -1    90115  190.64  357.46      0    90127  190.62  357.41      0
# Errors with asterisks indicate errors that have exceeded the maximum threshold.
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 92.3318
#
"""

# A run whose data check failed on some sizes (nccl-tests prints the count per half and FAILED).
WRONG = """\
# nccl-tests version 2.17.6 nccl-headers=22602 nccl-library=22602
# Collective test starting: all_reduce_perf
#  Rank  0 Group  0 Pid   1001 on node-a device  0 [0000:53:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   1002 on node-b device  0 [0000:53:00] NVIDIA H100 80GB HBM3
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
     1048576        262144     float     sum      -1    120.5    8.70    8.70       0    119.9    8.75    8.75       0
     2097152        524288     float     sum      -1    180.2   11.64   11.64    1024    181.0   11.59   11.59    2048
     4194304       1048576     float     sum      -1    301.7   13.90   13.90  1.04858e+06    299.9   13.99   13.99       0
# Out of bounds values : 3 FAILED
# Avg bus bandwidth    : 11.4283
#
# Collective test concluded: all_reduce_perf
"""

# -c 0: nothing checked, #wrong is N/A; -S 1: a timestamp after each row.
UNCHECKED_TIMESTAMPS = """\
# nccl-tests version 2.17.6 nccl-headers=22602 nccl-library=22602
# Collective test starting: all_gather_perf
#  Rank  0 Group  0 Pid   1001 on node-a device  0 [0000:53:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   1002 on node-b device  0 [0000:53:00] NVIDIA H100 80GB HBM3
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong            timestamp
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)          %Y-%m-%d %H:%M:%S
     4194304        524288     float    none      -1    210.4   19.93    9.97     N/A    205.1   20.45   10.23     N/A  2026-03-01 10:00:01
  8589934592    1073741824     float    none      -1    92811   92.55   46.28     N/A    92790   92.57   46.29     N/A  2026-03-01 10:00:09
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 28.1925
#
# Collective test concluded: all_gather_perf
"""

# Before nccl-tests 2.11: no root column, and the largest error instead of a count.
OLD_FORMAT = """\
# nThread 1 nGpus 8 minBytes 8 maxBytes 134217728 step: 2(factor) warmup iters: 5 iters: 20 \
validation: 1
#
#                                                     out-of-place                       in-place
#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
           8             2   float     sum    39.36    0.00    0.00  4e-07    37.64    0.00    0.00  4e-07
   134217728      33554432   float     sum   1421.4   94.43  165.25  4e-07   1418.2   94.64  165.62  4e-07
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 41.5402
"""

# What tests/molecule/nccl_standin/all_reduce_perf printed for 4 ranks in gpufleet/task-base.
STANDIN = """\
# nccl-tests version mpi-standin-1 nccl-headers=0 nccl-library=0
# (gpufleet stand-in: MPI_Allreduce with mpi4py over Open MPI, on CPUs; no NCCL, no GPU)
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 1 minBytes 8 maxBytes 16777216 step: 2(factor) warmup iters: 1 iters: 20 \
agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid     11 on 61522d1ba64b device  0 [0000:00:00] CPU (MPI stand-in)
#  Rank  1 Group  0 Pid     12 on 61522d1ba64b device  1 [0000:00:00] CPU (MPI stand-in)
#  Rank  2 Group  0 Pid     13 on 7a0c3e1f2b44 device  0 [0000:00:00] CPU (MPI stand-in)
#  Rank  3 Group  0 Pid     14 on 7a0c3e1f2b44 device  1 [0000:00:00] CPU (MPI stand-in)
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1   115.08    0.00    0.00       0   118.48    0.00    0.00       0
     1048576        262144     float     sum      -1  4043.12    0.26    0.39       0  3429.90    0.31    0.46       0
    16777216       4194304     float     sum      -1   138699    0.12    0.18       0  97635.7    0.17    0.26       0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 0.124149
#
# Collective test concluded: all_reduce_perf

"""

ABORTED = """\
# nccl-tests version 2.17.6 nccl-headers=22602 nccl-library=22602
# Collective test starting: all_reduce_perf
node-a:1001:1001 [0] NCCL INFO Bootstrap : Using eth0:10.0.0.2<0>
node-a: Test NCCL failure common.cu:1279 'unhandled system error (run with NCCL_DEBUG=INFO for details) / '
 .. node-a pid 1001: Test failure common.cu:1137
"""


def rows(result):
    return [(e["bytes"], e["busbw"], e["in_place"]["busbw"], e["wrong"]) for e in result["sizes"]]


# --- parse ------------------------------------------------------------------------------------


def test_nccl_tests_217_every_field():
    result = nccltests.parse(NCCL_217)
    assert result["suite"] == "nccl-tests" and result["version"] == "2.17.6"
    assert result["test"] == "all_reduce_perf" and result["op"] == "all_reduce"
    assert result["params"] == {
        "nthreads": 1, "ngpus": 1, "min_bytes": 8, "max_bytes": 17179869184, "step_factor": 2,
        "warmup_iters": 1, "iters": 20, "agg_iters": 1, "validation": 1, "graph": 0,
        "unalign": 0}
    assert result["gpus"] == 16 and result["nodes"] == 2
    assert result["hosts"] == ["p5-node-0", "p5-node-1"]
    assert result["devices"][9] == {"rank": 9, "group": 0, "pid": 4009, "host": "p5-node-1",
                                    "device": 1, "bus_id": "0000:54:00",
                                    "name": "NVIDIA H100 80GB HBM3"}
    assert rows(result) == [(8, 0.0, 0.0, 0), (1048576, 20.84, 20.96, 0),
                            (268435456, 371.16, 372.17, 0), (2 * GIB, 443.72, 442.06, 0),
                            (16 * GIB, 487.08, 487.27, 0)]
    big = result["sizes"][3]
    assert big["count"] == 536870912 and big["type"] == "float" and big["redop"] == "sum"
    assert big["root"] == -1 and big["time_us"] == 9074.5 and big["algbw"] == 236.65
    assert big["out_of_place"] == {"time_us": 9074.5, "algbw": 236.65, "busbw": 443.72,
                                   "wrong": 0}
    assert big["in_place"] == {"time_us": 9108.5, "algbw": 235.77, "busbw": 442.06, "wrong": 0}
    assert result["avg_busbw"] == 52.9753 and result["avg_busbw_check"] is None
    assert result["max_busbw"] == 487.27
    assert result["largest_bytes"] == 16 * GIB and result["largest_busbw"] == 487.08
    assert result["busbw_by_size"]["2147483648"] == 443.72
    assert result["wrong_total"] == 0 and result["out_of_bounds"] == 0
    assert result["out_of_bounds_ok"] is True and result["complete"] is True
    assert result["failures"] == []


def test_nccl_tests_213_without_version_line():
    result = nccltests.parse(NCCL_213)
    assert result["version"] is None and result["test"] is None
    assert result["params"]["warmup_iters"] == 5 and result["params"]["max_bytes"] == 8 * GIB
    assert result["nodes"] == 2 and result["gpus"] == 4
    assert rows(result)[-1] == (8 * GIB, 338.82, 337.35, 0)
    assert result["sizes"][2]["time_us"] == 12646.0
    assert result["avg_busbw"] == 70.742
    assert result["complete"] is False  # no "Collective test concluded" in this version


def test_rccl_tests_one_node():
    result = nccltests.parse(RCCL_ONE_NODE)
    assert result["suite"] == "rccl-tests" and result["version"] == "develop:a7809b3"
    assert result["nodes"] == 1 and result["gpus"] == 8
    assert result["devices"][7]["name"] == "AMD Instinct MI300X"
    assert rows(result) == [(8, 0.0, 0.0, 0), (16777216, 195.85, 187.83, 0),
                            (8 * GIB, 315.69, 315.91, 0)]
    assert result["avg_busbw"] == 110.464 and result["wrong_total"] == 0


def test_rccl_tests_two_nodes_without_group_field():
    result = nccltests.parse(RCCL_TWO_NODES)
    assert result["suite"] == "rccl-tests" and result["version"] == "develop:448c4c7"
    assert result["nodes"] == 2 and result["hosts"] == ["gpu-53", "gpu-56"]
    assert result["gpus"] == 16
    assert result["devices"][8]["group"] is None and result["devices"][8]["device"] == 0
    assert result["devices"][8]["bus_id"] == "0000:05:00.0"
    assert result["largest_bytes"] == 16 * GIB and result["largest_busbw"] == 357.46
    assert len(result["sizes"]) == 4  # the RCCL/HIP/ROCm lines are not rows


def test_wrong_values_are_counted_per_row_and_in_total():
    result = nccltests.parse(WRONG)
    assert [e["wrong"] for e in result["sizes"]] == [0, 3072, 1048580]
    assert result["sizes"][1]["out_of_place"]["wrong"] == 1024
    assert result["sizes"][1]["in_place"]["wrong"] == 2048
    assert result["wrong_total"] == 3072 + 1048580
    assert result["out_of_bounds"] == 3 and result["out_of_bounds_ok"] is False
    facts = nccltests_compare.result_facts(WRONG, expected_busbw=10)
    assert facts["wrong_total"] > 0 and facts["verdict"] == "pass"  # bandwidth is not the issue


def test_unchecked_run_with_timestamps():
    result = nccltests.parse(UNCHECKED_TIMESTAMPS)
    assert result["test"] == "all_gather_perf" and result["op"] == "all_gather"
    assert [e["wrong"] for e in result["sizes"]] == [None, None]
    assert result["wrong_total"] is None
    assert result["sizes"][1]["redop"] == "none"
    assert rows(result)[1] == (8 * GIB, 46.28, 46.29, None)


def test_old_format_without_root_column():
    result = nccltests.parse(OLD_FORMAT)
    first = result["sizes"][0]
    assert first["root"] is None and first["redop"] == "sum" and first["time_us"] == 39.36
    assert first["wrong"] is None and first["out_of_place"]["max_error"] == 4e-07
    assert rows(result)[1] == (134217728, 165.25, 165.62, None)
    assert result["params"]["ngpus"] == 8 and result["params"]["validation"] == 1


def test_the_mpi_stand_ins_output_reads_as_nccl_tests():
    result = nccltests.parse(STANDIN)
    assert result["version"] == "mpi-standin-1" and result["test"] == "all_reduce_perf"
    assert result["nodes"] == 2 and result["gpus"] == 4
    assert rows(result) == [(8, 0.0, 0.0, 0), (1048576, 0.39, 0.46, 0),
                            (16777216, 0.18, 0.26, 0)]
    assert result["avg_busbw"] == 0.124149 and result["complete"]


@pytest.mark.parametrize("prefix", ["[nccl-tests-0] ", "[1,0]<stdout>:", "0: ",
                                    "[run-0] [1,0]<stdout>:"])
def test_launcher_prefixes_are_stripped(prefix):
    text = "".join(prefix + line + "\n" for line in NCCL_217.splitlines())
    assert rows(nccltests.parse(text)) == rows(nccltests.parse(NCCL_217))
    assert nccltests.parse(text)["nodes"] == 2


def test_nccl_info_lines_and_mpi_warnings_are_ignored():
    lines = NCCL_217.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("     1048576"))
    lines[at:at] = [
        "p5-node-0:4000:4100 [0] NCCL INFO NET/OFI Selected Provider is efa (found 32 nics)",
        "p5-node-0:4000:4100 [0] NCCL INFO Channel 00/32 :    0   1   2   3   4   5   6   7",
        "[p5-node-1:04008] 15 more processes have sent help message help-mpi-btl-base.txt",
        "10.0.0.1: Warning: Permanently added '10.0.0.2' (ED25519) to the list of known hosts.",
    ]
    assert rows(nccltests.parse(lines)) == rows(nccltests.parse(NCCL_217))


def test_a_list_of_lines_parses_as_the_text():
    assert nccltests.parse(NCCL_217.splitlines()) == nccltests.parse(NCCL_217)


def test_in_place_only_rows():
    text = ("#       size         count      type   redop    root     time   algbw   busbw  #wrong"
            "     time   algbw   busbw  #wrong \n"
            "     1048576        262144     float     sum      -1" + " " * 32 +
            "    94.33   11.12   20.84       0\n")
    entry = nccltests.parse(text)["sizes"][0]
    assert entry["out_of_place"] is None and entry["busbw"] == 20.84
    assert entry["in_place"]["time_us"] == 94.33


def test_rows_without_a_header_use_the_default_layout():
    body = [line for line in NCCL_217.splitlines() if not line.startswith("#")]
    assert rows(nccltests.parse(body)) == rows(nccltests.parse(NCCL_217))


def test_output_without_results_is_an_error():
    with pytest.raises(nccltests.NcclTestsError, match="no nccl-tests results"):
        nccltests.parse(ABORTED)
    with pytest.raises(nccltests.NcclTestsError):
        nccltests.parse("")


def test_allow_empty_keeps_the_failure_lines():
    facts = nccltests_compare.result_facts(ABORTED, expected_busbw=400, allow_empty=True)
    assert facts["sizes"] == [] and facts["verdict"] == "unknown"
    assert facts["reason"] == "the run printed no result rows"
    assert len(facts["failures"]) == 2
    assert "unhandled system error" in facts["failures"][0]


def test_a_failure_after_some_rows_is_kept_and_the_run_incomplete():
    text = "\n".join(NCCL_217.splitlines()[:-4]) + \
        "\np5-node-1: Test CUDA failure common.cu:891 'an illegal memory access'\n"
    result = nccltests.parse(text)
    assert len(result["sizes"]) == 5 and result["complete"] is False
    assert result["avg_busbw"] == pytest.approx(
        sum(b for _s, o, i, _w in rows(result) for b in (o, i)) / 10)
    assert result["failures"] == ["p5-node-1: Test CUDA failure common.cu:891 "
                                  "'an illegal memory access'"]


def test_bad_wrong_cell_is_an_error():
    text = ("#       size         count      type   redop    root     time   algbw   busbw  #wrong"
            "     time   algbw   busbw  #wrong \n"
            "           8             2     float     sum      -1    65.12    0.00    0.00"
            "     abc    64.87    0.00    0.00       0\n")
    with pytest.raises(nccltests.NcclTestsError, match="#wrong"):
        nccltests.parse(text)


# --- sizes and factors -------------------------------------------------------------------------


@pytest.mark.parametrize("value, expected", [
    ("8", 8), (8, 8), ("512K", 512 * 1024), ("128M", 128 * 1024 ** 2), ("8G", 8 * GIB),
    ("8g", 8 * GIB), ("1.5K", 1536), ("16GB", 16 * GIB)])
def test_parse_size(value, expected):
    assert nccltests.parse_size(value) == expected


@pytest.mark.parametrize("value", ["", "eight", "8X", True, "-8"])
def test_parse_size_refuses(value):
    with pytest.raises(nccltests.NcclTestsError):
        nccltests.parse_size(value)


def test_expected_sizes():
    assert nccltests.expected_sizes("8", "128") == [8, 16, 32, 64, 128]
    assert len(nccltests.expected_sizes(8, "8G")) == 31
    assert nccltests.expected_sizes("1M", "4M", step_bytes="1M") == [
        1024 ** 2, 2 * 1024 ** 2, 3 * 1024 ** 2, 4 * 1024 ** 2]
    with pytest.raises(nccltests.NcclTestsError):
        nccltests.expected_sizes("8M", "8")
    with pytest.raises(nccltests.NcclTestsError):
        nccltests.expected_sizes("8", "8M", factor=1)


def test_busbw_factors():
    assert nccltests_compare.busbw_factor("all_reduce", 16) == pytest.approx(30 / 16.0)
    assert nccltests_compare.busbw_factor("all_reduce", 2) == 1.0
    assert nccltests_compare.busbw_factor("all_gather", 4) == 0.75
    assert nccltests_compare.busbw_factor("sendrecv", 8) == 1.0
    # The ADT p5 row: 2 nodes x 8 GPUs, algbw 236.65 -> busbw 443.72.
    factor = nccltests_compare.busbw_factor("all_reduce", 16)
    assert 236.65 * factor == pytest.approx(443.72, abs=0.01)
    with pytest.raises(nccltests.NcclTestsError):
        nccltests_compare.busbw_factor("hypercube", 8)


def test_op_of():
    assert nccltests.op_of("all_reduce_perf") == "all_reduce"
    assert nccltests.op_of("/opt/nccl-tests/build/alltoall_perf") == "alltoall"
    assert nccltests.op_of("all_reduce_perf_mpi") == "all_reduce"
    assert nccltests.op_of(None) is None


# --- compare -----------------------------------------------------------------------------------


def test_compare_with_a_given_figure_uses_the_largest_size():
    result = nccltests.parse(NCCL_217)
    outcome = nccltests_compare.compare(result, expected_busbw=480)
    assert outcome["verdict"] == "pass" and outcome["compared_bytes"] == 16 * GIB
    assert outcome["measured_busbw"] == 487.08 and outcome["expected_busbw"] == 480.0
    assert outcome["ratio"] == pytest.approx(487.08 / 480, abs=1e-4)
    assert outcome["expected_key"] is None and outcome["expected_source"] == "given"
    below = nccltests_compare.compare(result, expected_busbw=700, tolerance=0.9)
    assert below["verdict"] == "below" and "below 0.9 x 700.00" in below["reason"]


def test_tolerance_is_the_boundary():
    result = nccltests.parse(NCCL_217)
    assert nccltests_compare.compare(result, expected_busbw=487.08 / 0.8)["verdict"] == "pass"
    assert nccltests_compare.compare(result, expected_busbw=487.2 / 0.8)["verdict"] == "below"


def test_compare_with_a_platform_picks_the_largest_anchor_size_the_run_reached():
    result = nccltests.parse(NCCL_217)  # up to 16 GiB: p5's 16 GiB figure (487.1)
    outcome = nccltests_compare.compare(result, expected="p5.48xlarge")
    assert outcome["compared_bytes"] == 16 * GIB and outcome["expected_busbw"] == 487.1
    assert outcome["verdict"] == "pass" and outcome["expected_key"] == "p5.48xlarge"
    assert "awsome-distributed-training" in outcome["expected_source"]
    eight = nccltests.parse(NCCL_213)  # up to 8 GiB: p5's 2 GiB figure (443.7) at 2 GiB
    outcome = nccltests_compare.compare(eight, expected="p5.48xlarge")
    assert outcome["compared_bytes"] == 2 * GIB and outcome["measured_busbw"] == 318.40
    assert outcome["verdict"] == "below"  # a TCPXO run is no p5
    assert nccltests_compare.compare(eight, expected="h100-ib-ndr")["expected_busbw"] == 467.5


def test_compare_when_the_run_ends_between_anchor_sizes():
    text = "\n".join(line for line in NCCL_217.splitlines()
                     if not line.startswith(" 17179869184"))
    result = nccltests.parse(text)  # largest 2 GiB; h100-ib-ndr has 2 and 8 GiB
    outcome = nccltests_compare.compare(result, expected="h100-ib-ndr")
    assert outcome["compared_bytes"] == 2 * GIB and outcome["expected_busbw"] == 458.8


def test_compare_unknown_cases():
    result = nccltests.parse(NCCL_217)
    assert nccltests_compare.compare(result)["verdict"] == "unknown"
    gather = nccltests_compare.compare(result, expected="a3-megagpu-8g")
    assert gather["verdict"] == "unknown" and "all_gather" in gather["reason"]
    small = nccltests.parse(STANDIN)  # stops at 16 MiB; p5 starts at 2 GiB
    outcome = nccltests_compare.compare(small, expected="p5.48xlarge")
    assert outcome["verdict"] == "unknown" and "below the smallest size" in outcome["reason"]
    empty = nccltests.empty_result()
    assert nccltests_compare.compare(empty, expected_busbw=1)["verdict"] == "unknown"
    assert nccltests_compare.compare(empty, expected="p5.48xlarge")["verdict"] == "unknown"


def test_compare_all_gather_with_its_platform():
    result = nccltests.parse(UNCHECKED_TIMESTAMPS)  # all_gather up to 8 GiB, 46.28 GB/s
    outcome = nccltests_compare.compare(result, expected="a3-highgpu-8g")
    assert outcome["expected_busbw"] == 50.2 and outcome["verdict"] == "pass"
    assert nccltests_compare.compare(result, expected="a3-ultragpu-8g")["verdict"] == "below"


@pytest.mark.parametrize("kwargs, message", [
    ({"expected": "p6.48xlarge"}, "no expected figure named"),
    ({"expected_busbw": "fast"}, "must be a number"),
    ({"expected_busbw": 0}, "more than 0"),
    ({"expected_busbw": 10, "tolerance": 0}, "tolerance"),
    ({"expected_busbw": 10, "tolerance": 1.5}, "tolerance"),
    ({"expected_busbw": 10, "tolerance": "most"}, "tolerance"),
])
def test_compare_refuses(kwargs, message):
    with pytest.raises(nccltests.NcclTestsError, match=message):
        nccltests_compare.compare(nccltests.parse(NCCL_217), **kwargs)


def test_every_expected_entry_is_complete():
    for name, entry in nccltests_compare.EXPECTED.items():
        assert entry["fabric"] in ("efa", "ib", "roce", "gib", "tcpx", "tcpxo"), name
        assert entry["op"] in ("all_reduce", "all_gather"), name
        assert entry["points"] and all(v > 0 for v in entry["points"].values()), name
        assert entry["nodes"] == 2 and entry["gpus_per_node"] == 8 and entry["source"], name


# --- the role's facts and the filters ----------------------------------------------------------


def test_result_facts_and_report():
    facts = nccltests_compare.result_facts(NCCL_217, expected="p5.48xlarge", tolerance=0.9,
                                           fabric="efa")
    assert facts["fabric"] == "efa" and facts["nodes"] == 2 and facts["gpus"] == 16
    assert facts["verdict"] == "pass" and facts["tolerance"] == 0.9
    assert facts["busbw_by_size"]["17179869184"] == 487.08 and facts["max_busbw"] == 487.27
    assert len(facts["report"]) == len(facts["sizes"]) + 2
    assert "487.08 GB/s" in facts["report"][4]
    assert facts["report"][-1].startswith("verdict pass: 487.08 GB/s at 17179869184 bytes")


def test_filter_nccl_tests_result():
    filters = nccl_filter.FilterModule().filters()
    facts = filters["nccl_tests_result"](NCCL_217.splitlines(), expected_busbw=1000000)
    assert facts["verdict"] == "below" and facts["ratio"] < 0.001
    assert filters["nccl_tests_result"](NCCL_217)["verdict"] == "unknown"
    empty = filters["nccl_tests_result"]([], allow_empty=True)
    assert empty["sizes"] == [] and empty["verdict"] == "unknown"


@pytest.mark.parametrize("args, kwargs, message", [
    (([],), {}, "no nccl-tests results"),
    ((NCCL_217,), {"expected": "nope"}, "no expected figure"),
    ((42,), {}, "expected the benchmark's output"),
    ((NCCL_217,), {"allow_empty": "perhaps"}, "allow_empty"),
])
def test_filter_nccl_tests_result_errors(args, kwargs, message):
    with pytest.raises(AnsibleFilterError, match=message):
        nccl_filter.nccl_tests_result(*args, **kwargs)


def test_filter_nccl_tests_expected():
    table = nccl_filter.nccl_tests_expected("")
    assert sorted(table) == sorted(nccltests_compare.EXPECTED)
    p5 = nccl_filter.nccl_tests_expected("p5.48xlarge")
    assert p5["points"] == {"2147483648": 443.7, "17179869184": 487.1}
    assert p5["name"] == "p5.48xlarge" and p5["fabric"] == "efa"
    assert nccltests_compare.EXPECTED["p5.48xlarge"]["points"][2 * GIB] == 443.7  # not changed
    with pytest.raises(AnsibleFilterError, match="no expected figure named"):
        nccl_filter.nccl_tests_expected("p6")


def test_filter_nccl_tests_sizes():
    assert nccl_filter.nccl_tests_sizes("8", "8M") == nccltests.expected_sizes(8, 8 * 1024 ** 2)
    assert nccl_filter.nccl_tests_sizes(1024, "4K", 4) == [1024, 4096]
    with pytest.raises(AnsibleFilterError, match="nccl_tests_sizes"):
        nccl_filter.nccl_tests_sizes("8M", "8")


def test_trailing_spaces_and_crlf_as_nccl_tests_prints_them():
    # nccl-tests pads its header lines and the Avg line with spaces; logs may carry CRLF.
    text = NCCL_217.replace("\n", "   \r\n")
    assert rows(nccltests.parse(text)) == rows(nccltests.parse(NCCL_217))
    assert nccltests.parse(text)["avg_busbw"] == 52.9753
