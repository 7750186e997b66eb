"""Client side of the Kubernetes API: watch-backed caches (informers) and careful writes."""
from .informer import Informer, object_key
from .writer import ConflictRetriesExhausted, TokenBucket, retry_on_conflict

__all__ = ["Informer", "object_key", "TokenBucket", "retry_on_conflict", "ConflictRetriesExhausted"]
