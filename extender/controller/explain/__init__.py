"""gpuqueue explain NAMESPACE/JOB: why a Job is pending, from what the API holds - its queue
position, Kueue's message, what would have to finish, the pods the extender holds back (explain.py)
and what it asks of the topology and the domains it was given (explain_tas.py). Reads only."""
