"""``${{ ns.name }}`` references: checking (config model) and filling (used by the runner)."""

from __future__ import annotations

import pytest
from ansible_collections.gpufleet.cluster.plugins.module_utils.spec import interpolation as ip


@pytest.mark.parametrize(
    "text,values,keep,expected",
    [
        ("", {}, (), ""),
        ("${ENV} $HOME", {}, (), "${ENV} $HOME"),
        ("token=${{ secrets.HF }}", {"secrets": {"HF": "abc"}}, (), "token=abc"),
        ("${{secrets.HF}}", {"secrets": {"HF": "abc"}}, (), "abc"),
        ("$${{ secrets.HF }}", {}, (), "${{ secrets.HF }}"),
        ("a $$ b", {}, (), "a $ b"),
        ("cost $5", {}, (), "cost $5"),
        ("end$", {}, (), "end$"),
        # After a lone "$", dstack keeps the text up to the next reference as it is.
        ("$A $$ ${{ run.args }}", {"run": {"args": "-x"}}, (), "$A $$ -x"),
        ("python t.py ${{ run.args }} ${{ secrets.K }}", {"run": {"args": "--lr 1"}}, ("secrets",),
         "python t.py --lr 1 ${{ secrets.K }}"),
        ("data-${{ dstack.node_rank }}", {"dstack": {"node_rank": 3}}, (), "data-3"),
    ],
)
def test_interpolate(text, values, keep, expected):
    assert ip.interpolate(text, values, keep=keep) == expected


def test_missing_values_are_named_but_never_revealed():
    with pytest.raises(ip.InterpolationError) as info:
        ip.interpolate("${{ secrets.A }} ${{ secrets.B }}", {"secrets": {"A": "hunter2"}})
    assert "secrets.B" in str(info.value) and "hunter2" not in str(info.value)


@pytest.mark.parametrize(
    "text,message",
    [
        ("${{ secrets.A", "no closing"),
        ("${{ secrets }}", "illegal reference"),
        ("${{ a.b.c }}", "illegal reference"),
        ("${{ 1a.b }}", "illegal reference"),
        ("${{ env.X }}", "unknown reference"),
    ],
)
def test_check_rejects(text, message):
    with pytest.raises(ip.InterpolationError) as info:
        ip.check(text, {"secrets": None})
    assert message in str(info.value)


def test_check_accepts_group_refs_only_when_asked():
    text = "peer ${{ groups[1].nodes[0].IP_ADDRESS }}"
    ip.check(text, {}, groups=True)
    with pytest.raises(ip.InterpolationError):
        ip.check(text, {})
    assert list(ip.references("${{ a.b }} and ${{ c.d }}")) == ["a.b", "c.d"]
