"""The quota tree: ClusterQueues and Cohorts as one kind of node (Kueue's resourceNode).

Every node knows its own quota, its subtree's quota (its own plus what its children lend
it), and its usage (for a Cohort: what its children use beyond the quota they keep for
themselves). Every question - does it fit, is it borrowing, how much is available - is
answered by walking this one tree.
"""

from __future__ import annotations

from gpuqueue.extender.quota.model import FlavorResource, Quota

_NO_QUOTA = Quota(0)


class QuotaNode:
    __slots__ = ("name", "is_cohort", "parent", "children", "quotas", "subtree_quota", "usage", "weight_milli")

    def __init__(self, name: str, is_cohort: bool, quotas: dict[FlavorResource, Quota] | None = None) -> None:
        self.name = name
        self.is_cohort = is_cohort
        self.parent: QuotaNode | None = None
        self.children: list[QuotaNode] = []
        self.quotas: dict[FlavorResource, Quota] = dict(quotas or {})
        self.subtree_quota: dict[FlavorResource, int] = {}
        self.usage: dict[FlavorResource, int] = {}
        self.weight_milli = 1000

    def __repr__(self) -> str:
        kind = "Cohort" if self.is_cohort else "ClusterQueue"
        return f"<{kind} {self.name}>"

    # -- structure -------------------------------------------------------------
    def root(self) -> "QuotaNode":
        node = self
        while node.parent is not None:
            node = node.parent
        return node

    def path_to_root(self) -> list["QuotaNode"]:
        out, node = [], self
        while node is not None:
            out.append(node)
            node = node.parent
        return out

    def cluster_queues(self) -> list["QuotaNode"]:
        """Every ClusterQueue in this subtree."""
        if not self.is_cohort:
            return [self]
        out: list[QuotaNode] = []
        stack = [self]
        while stack:
            n = stack.pop()
            for c in n.children:
                if c.is_cohort:
                    stack.append(c)
                else:
                    out.append(c)
        return out

    # -- quota arithmetic (resource_node.go) --------------------------------------
    def nominal(self, fr: FlavorResource) -> int:
        return self.quotas.get(fr, _NO_QUOTA).nominal

    def local_quota(self, fr: FlavorResource) -> int:
        """Capacity that lending limits keep inside this subtree (never lent to the parent)."""
        q = self.quotas.get(fr)
        if q is not None and q.lending_limit is not None:
            return max(0, self.subtree_quota.get(fr, 0) - q.lending_limit)
        return 0

    def local_available(self, fr: FlavorResource) -> int:
        return max(0, self.local_quota(fr) - self.usage.get(fr, 0))

    def available(self, fr: FlavorResource) -> int:
        """Unused capacity this node may take now, within borrowing limits.

        Unlike Kueue's available(), over-admission above (usage left over a quota cut) never
        eats into what a lendingLimit keeps at home: that part is a guarantee, and using it
        adds nothing to any ancestor's usage. So a parent's deficit counts as zero here."""
        return self._available(fr, keep_reserves=True)

    def available_with_deficits(self, fr: FlavorResource) -> int:
        """Kueue's available(): a parent's deficit is subtracted (may be negative). What must be
        freed before `val` fits is `val` minus this, the figure of "N more needed"."""
        return self._available(fr, keep_reserves=False)

    def _available(self, fr: FlavorResource, keep_reserves: bool) -> int:
        if self.parent is None:
            return self.subtree_quota.get(fr, 0) - self.usage.get(fr, 0)
        parent_available = self.parent._available(fr, keep_reserves)
        q = self.quotas.get(fr)
        if q is not None and q.borrowing_limit is not None:
            local = self.local_quota(fr)
            stored_in_parent = self.subtree_quota.get(fr, 0) - local
            used_in_parent = max(0, self.usage.get(fr, 0) - local)
            parent_available = min(stored_in_parent - used_in_parent + q.borrowing_limit, parent_available)
        if keep_reserves and parent_available < 0:
            parent_available = 0
        return self.local_available(fr) + parent_available

    def potential_available(self, fr: FlavorResource) -> int:
        """The most this node could ever hold, with no usage anywhere, within borrowing limits."""
        if self.parent is None:
            return self.subtree_quota.get(fr, 0)
        avail = self.local_quota(fr) + self.parent.potential_available(fr)
        q = self.quotas.get(fr)
        if q is not None and q.borrowing_limit is not None:
            avail = min(self.subtree_quota.get(fr, 0) + q.borrowing_limit, avail)
        return avail

    def borrowing_with(self, fr: FlavorResource, val: int) -> bool:
        return self.usage.get(fr, 0) + val > self.subtree_quota.get(fr, 0)

    def is_borrowing(self, fr: FlavorResource) -> bool:
        return self.usage.get(fr, 0) > self.subtree_quota.get(fr, 0)

    def add_usage(self, fr: FlavorResource, val: int) -> None:
        local_avail = self.local_available(fr)
        self.usage[fr] = self.usage.get(fr, 0) + val
        if self.parent is not None and val > local_avail:
            self.parent.add_usage(fr, val - local_avail)

    def remove_usage(self, fr: FlavorResource, val: int) -> None:
        stored_in_parent = self.usage.get(fr, 0) - self.local_quota(fr)
        left = self.usage.get(fr, 0) - val
        if left:
            self.usage[fr] = left
        else:
            self.usage.pop(fr, None)
        if stored_in_parent > 0 and self.parent is not None:
            self.parent.remove_usage(fr, min(val, stored_in_parent))

    def height_of_lowest_subtree_that_fits(self, fr: FlavorResource, val: int) -> tuple[int, bool]:
        """How far up the tree `val` more must come from (0: within this ClusterQueue's own
        quota), and whether a subtree below the root covers it (so reclaiming is possible)."""
        if not self.borrowing_with(fr, val) or self.parent is None:
            return 0, self.parent is not None
        remaining = val - self.local_available(fr)
        height = 1
        node = self.parent
        while node.parent is not None:
            if not node.borrowing_with(fr, remaining):
                return height, True
            remaining -= node.local_available(fr)
            node = node.parent
            height += 1
        return height, False


def rebuild_subtree(root: QuotaNode, cq_usage: dict[str, dict[FlavorResource, int]]) -> None:
    """Recompute subtree quotas and cohort usage from the ClusterQueues' own usage."""

    def visit(node: QuotaNode) -> None:
        node.subtree_quota = {fr: q.nominal for fr, q in node.quotas.items()}
        if not node.is_cohort:
            node.usage = dict(cq_usage.get(node.name, {}))
            return
        node.usage = {}
        for child in node.children:
            visit(child)
            for fr, sub in child.subtree_quota.items():
                node.subtree_quota[fr] = node.subtree_quota.get(fr, 0) + sub - child.local_quota(fr)
            for fr, used in child.usage.items():
                over = max(0, used - child.local_quota(fr))
                if over:
                    node.usage[fr] = node.usage.get(fr, 0) + over

    visit(root)
