"""The engine's decisions carried out on the API, in an order that keeps the API's record within
quota at every instant (Kueue's workload controller and the jobframework's writes): the write chain
per Job, the releases under way and the cohort tree that scopes them (writes.py, releases.py,
cohorts.py), read-modify-writes of the cached records (records.py), the Workloads - created,
pending, admitted, evicted, requeued, finished, kept true to their Job (workload_writes.py,
workload_records.py) - the Jobs steered to run or stop and the pods kube-scheduler parked (jobs.py,
parked_pods.py), and Kubernetes Events (events.py)."""
