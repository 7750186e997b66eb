"""The quota objects and the queues' own records: ResourceFlavors, Cohorts, ClusterQueues,
LocalQueues, priority classes and namespaces from the watch caches into the engine
(quota_objects.py; Kueue's clusterqueue, localqueue, cohort and resourceflavor controllers),
ClusterQueue and LocalQueue status computed from the engine (status.py, pure) and written when it
changes (queue_status.py), and the namespace label that follows a LocalQueue named default
(default_queue_label.py)."""
