"""The Job and its Workload as every part of the controller holds them: pure functions over Kueue's
Workload and the Job it stands for (workload.py), what is kept of each tracked Job and what the
parts read of the controller (job_state.py: JobState, Scheduling), whether a Job still matches its
Workload (equivalence.py, Kueue's EquivalentToWorkload), and the Workloads of each owner by its UID
(owned_workloads.py). No I/O: the writers and the reconcilers build on it."""
