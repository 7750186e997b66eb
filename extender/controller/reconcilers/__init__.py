"""The reconcilers: what the watches see, held against what the engine holds (Kueue's jobframework
reconciler and its workload controller). Every queued kind's objects (job_reconciler.py: the tracked
Jobs), their changes followed (following.py) and their departures counted until their pods are gone
(departures.py); Workload events (workload_events.py); pod groups and LeaderWorkerSet groups
(pod_group_events.py); and an Event on a GPU workload nothing will admit (unqueued_events.py). They
feed the engine and hand what must change to writes/."""
