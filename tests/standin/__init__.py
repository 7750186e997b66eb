"""Test support shipped with gpuqueue: an in-process Kubernetes API server stand-in."""
from .apiserver import ApiServer
from .registry import Write
from . import resources

__all__ = ["ApiServer", "Write", "resources"]
