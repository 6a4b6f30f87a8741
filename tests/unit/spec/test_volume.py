"""``type: volume`` (docs/reference/dstack-files.md#volume-files)."""

from __future__ import annotations

import pytest
from .helpers import assert_rejected, parse


def test_aws_volume_create():
    config = parse(
        """\
        type: volume
        name: my-volume
        backend: aws
        region: eu-central-1
        availability_zone: eu-central-1a
        size: 100GB
        auto_cleanup_duration: 1h
        tags: {team: ml}
        """
    )
    assert config == {
        "type": "volume", "backend": "aws", "name": "my-volume", "region": "eu-central-1",
        "size": 100, "auto_cleanup_duration": 3600, "tags": {"team": "ml"},
        "availability_zone": "eu-central-1a", "volume_id": None,
    }


def test_register_existing_volume_needs_no_size():
    config = parse("type: volume\nbackend: gcp\nregion: us-east1\nvolume_id: disk-123\n")
    assert config["volume_id"] == "disk-123" and config["size"] is None
    assert config["auto_cleanup_duration"] == "off"


def test_size_units():
    assert parse("type: volume\nbackend: aws\nregion: r\nsize: 1TB\n")["size"] == 1024
    assert parse("type: volume\nbackend: aws\nregion: r\nsize: 512MB\n")["size"] == 0.5


def test_kubernetes_volume():
    config = parse("type: volume\nbackend: kubernetes\nclaim_name: data-pvc\n")
    assert config["access_modes"] == ["ReadWriteOnce"] and config["region"] == ""
    config = parse(
        "type: volume\nbackend: kubernetes\nsize: 50GB\nstorage_class_name: fast\n"
        "access_modes: [ReadWriteMany]\n"
    )
    assert config["access_modes"] == ["ReadWriteMany"] and config["size"] == 50


def test_runpod_volume_accepts_availability_zone():
    config = parse("type: volume\nbackend: runpod\nregion: EU-SE-1\nsize: 10GB\navailability_zone: x\n")
    assert config["backend"] == "runpod"


@pytest.mark.parametrize(
    "text,path,fragment",
    [
        ("type: volume\nregion: r\nsize: 1GB\n", "backend", "needs backend"),
        ("type: volume\nbackend: azure\nregion: r\nsize: 1GB\n", "backend", "aws, gcp"),
        ("type: volume\nbackend: aws\nsize: 1GB\n", "region", "needs region"),
        ("type: volume\nbackend: aws\nregion: r\n", "size", "volume_id"),
        ("type: volume\nbackend: kubernetes\n", "size", "claim_name"),
        ("type: volume\nbackend: aws\nregion: r\nsize: 1..2\n", "size", "MB, GB or TB"),
        ("type: volume\nbackend: aws\nregion: r\nsize: 1GB\nclaim_name: x\n", "claim_name",
         "unknown field"),
        ("type: volume\nbackend: aws\nregion: r\nsize: 1GB\nname: Vol_1\n", "name", "invalid name"),
        ("type: volume\nbackend: aws\nregion: r\nsize: 1GB\nauto_cleanup_duration: soon\n",
         "auto_cleanup_duration", "cannot parse"),
        ("type: volume\nbackend: aws\nregion: ''\nsize: 1GB\n", "region", "empty"),
    ],
)
def test_volume_invalid(text, path, fragment):
    assert_rejected(text, path, fragment)


def test_auto_cleanup_off_forms():
    for value in ("off", "-1", "false"):
        text = "type: volume\nbackend: aws\nregion: r\nsize: 1GB\nauto_cleanup_duration: %s\n"
        assert parse(text % value)["auto_cleanup_duration"] == "off"
