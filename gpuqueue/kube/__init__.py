"""Client side of the Kubernetes API, shared by every component: where the cluster is (config),
watch-backed caches (informers) and careful writes."""
from .config import ClusterConfigError, api_client, load_config
from .informer import Informer, object_key
from .writer import ConflictRetriesExhausted, TokenBucket, retry_on_conflict

__all__ = ["ClusterConfigError", "api_client", "load_config", "Informer", "object_key", "TokenBucket",
           "retry_on_conflict", "ConflictRetriesExhausted"]
