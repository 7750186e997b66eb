"""The cluster as the scheduler extender and the quota engine read it from the controller's watch
caches: the extender's ClusterView (view.py: nodes, pods, their owners and Workloads by UID, kept
current by ControllerClusterView, so a follower answers as well as the leader; filled from lists by
gpuqueue explain) and the engine's node capacities for admission that places pods, from the same
node cache /filter answers from (tas_nodes.py)."""
