"""Leadership and the term it opens: leader election on a coordination.k8s.io/v1 Lease as client-go
does it (leader.py), and the rebuild on becoming leader - a fresh engine filled from what the API
holds, every reservation first, so nothing is admitted twice (rebuild.py). Only the leader
writes."""
