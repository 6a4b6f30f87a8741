"""The ``gpufleet`` command: a thin, dstack-like front over the gpufleet.cluster collection."""

__version__ = "0.1.0"
