"""autosched: keep a GPU cluster's scheduler well configured as its workload drifts."""

__version__ = "0.1.0"
