"""What a real kube-apiserver's answers cost: an optional model for the stand-in
(`ApiServer(cost_model=REAL_1_24)`, docs/apiserver-standin.md "Costs").

Without it the stand-in answers in well under a millisecond, however many requests arrive at once.
With it, every request other than a watch goes through what kube-apiserver 1.24 does to it:

1. **A seat.** API Priority and Fairness (on by default since 1.20): the request's user picks a
   priority level; each level may run `ceil(server_concurrency * shares / sum of shares)` requests at
   once, where server_concurrency = --max-requests-inflight + --max-mutating-requests-inflight
   (400 + 200). A request that finds no free seat waits in one of its level's queues: its flow (the
   user) is dealt `hand_size` of the level's queues and joins the shortest; a full queue
   (`queue_length_limit`) or a wait longer than `request_wait_limit` (the request timeout / 4: 15 s)
   gets 429 with `Retry-After: 1`. Seats freed go to the queues in turn. The `exempt` level has no
   limit. `max_inflight` instead models APF turned off: at most 400 reads and 200 writes at once, 429
   at once beyond that.
2. **CPU.** Its CPU demand, the server's and etcd's (per verb, resource and patch type, `costs`; the
   profiles at the end of this file are derived from measured single requests) on `cores` cores
   shared by every request in service (less idle work and, in the bench, the controller's CPU):
   n requests each progress at min(1, cores/n) CPU-seconds per second (processor sharing, as Go's scheduler time-slices the goroutines of a CPU-bound server). Two cores cannot
   serve 400 requests of 40 ms of CPU each in less than 8 s, however many seats there are.
3. **A wait without CPU** (`Cost.wait`: what the measured one-connection latency leaves beyond the
   request's CPU on the cores).
4. Then the stand-in handles it, so a write commits - and is seen by watches and conflicts - at the
   end of its service, as in etcd. The seat is held until then.

Nothing spins and nothing blocks the event loop: a request waits on a future that a timer
resolves. What is left out is listed in docs/apiserver-standin.md.
"""
from __future__ import annotations

import asyncio
import heapq
import itertools
import math
import random
import zlib
from collections import deque
from dataclasses import dataclass, replace
from typing import Callable, Mapping

MUTATING = frozenset({"create", "update", "patch", "delete"})


@dataclass(frozen=True)
class Cost:
    cpu: float  # seconds of the server's CPU
    wait: float = 0.0  # seconds more without CPU (etcd's commit)
    etcd: float = 0.0  # seconds of etcd's CPU, on the same cores, once the write is stored
    noop_cpu: float | None = None  # the server's CPU when the write changes nothing (None: as `cpu`)


@dataclass(frozen=True)
class PriorityLevel:
    name: str
    shares: int  # assuredConcurrencyShares; 0 = exempt (no limit, no queue)
    queues: int = 64
    hand_size: int = 8
    queue_length_limit: int = 50


# kube-apiserver 1.24's mandatory and suggested priority levels (flowcontrol v1beta2 bootstrap).
APF_1_24 = (
    PriorityLevel("exempt", 0),
    PriorityLevel("system", 30, 64, 6, 50),
    PriorityLevel("node-high", 40, 64, 6, 50),
    PriorityLevel("leader-election", 10, 16, 4, 50),
    PriorityLevel("workload-high", 40, 128, 6, 50),
    PriorityLevel("workload-low", 100, 128, 6, 50),
    PriorityLevel("global-default", 20, 128, 6, 50),
    PriorityLevel("catch-all", 5, 1, 1, 0),  # its limitResponse is Reject: no queue
)


def flow_by_token(headers: Mapping[str, str]) -> tuple[str, str]:
    """(priority level, flow) of a request: a bearer token is a service account (the FlowSchema
    `service-accounts` -> workload-low, one flow per user); no credentials is the cluster admin
    (system:masters, FlowSchema `exempt`), as kubectl with the admin kubeconfig is."""
    auth = headers.get("Authorization", "")
    if auth:
        return "workload-low", auth
    return "exempt", ""


@dataclass(frozen=True)
class CostModel:
    name: str
    costs: Mapping[str, Cost]  # "VERB RESOURCE[/SUBRESOURCE]", verbs as Kubernetes names them
    default_read: Cost
    default_write: Cost
    list_item_cpu: float = 0.0  # CPU per stored object of the kind, for a list (read from etcd)
    cores: float = 2.0
    server_concurrency: int = 600  # --max-requests-inflight 400 + --max-mutating-requests-inflight 200
    priority_levels: tuple[PriorityLevel, ...] = APF_1_24
    request_wait_limit: float = 15.0  # --request-timeout 60 s / 4
    max_inflight: tuple[int, int] | None = None  # (read-only, mutating): APF off, 429 at once beyond
    classify: Callable[[Mapping[str, str]], tuple[str, str]] = flow_by_token
    idle_cpu: float = 0.0  # the server's CPU-seconds per second with nothing to serve (on the same cores)
    idle_etcd: float = 0.0  # etcd's
    watch_event_cpu: float = 0.0  # the server's CPU per watch event sent to one watcher
    summary: str = ""  # one line: where the figures come from

    def cost(self, verb: str, resource: str, listed: int = 0, content_type: str = "") -> Cost:
        """The cost of "VERB RESOURCE[/SUBRESOURCE]"; a patch is priced by its content type first
        ("patch RESOURCE CONTENT-TYPE"), then as any patch of the resource."""
        c = None
        if verb == "patch" and content_type:
            c = self.costs.get(f"patch {resource} {content_type}")
        if c is None:
            c = self.costs.get(f"{verb} {resource}")
        if c is None:
            c = self.default_write if verb in MUTATING else self.default_read
        if verb == "list" and listed:
            c = Cost(c.cpu + self.list_item_cpu * listed, c.wait, c.etcd)
        return c

    def seats(self) -> dict[str, int]:
        """Each limited level's share of the server's concurrency (1.24: ceil(SCL * ACS / sum ACS))."""
        total = sum(pl.shares for pl in self.priority_levels)
        return {pl.name: math.ceil(self.server_concurrency * pl.shares / total)
                for pl in self.priority_levels if pl.shares}


class SharedCores:
    """`cores` CPUs shared by every request in service (processor sharing), in virtual time: each
    request in service has received `v` CPU-seconds; v advances at min(1, cores/n) per second, so a
    request ends when v reaches its start value plus its demand. One timer for the next end."""

    def __init__(self, cores: float) -> None:
        self.cores = cores  # may be lowered while running (CPU taken by others: idle work, other processes)
        self.delivered = 0.0  # CPU-seconds served, in all
        self.busy_since: float | None = None
        self._v = 0.0
        self._t = 0.0
        self._heap: list[list] = []  # [end v, seq, future]
        self._seq = itertools.count()
        self._timer: asyncio.TimerHandle | None = None

    @property
    def in_service(self) -> int:
        return len(self._heap)

    def _advance(self, now: float) -> None:
        n = len(self._heap)
        if n:
            dt = now - self._t
            self._v += dt * min(1.0, self.cores / n)
            self.delivered += dt * min(float(n), self.cores)
        self._t = now

    def set_cores(self, cores: float) -> None:
        """From now on `cores` (what other processes on the machine leave to the server)."""
        loop = asyncio.get_running_loop()
        self._advance(loop.time())
        self.cores = max(cores, 0.05)
        self._arm(loop)

    async def run(self, demand: float) -> None:
        if demand <= 0:
            return
        loop = asyncio.get_running_loop()
        self._advance(loop.time())
        fut = loop.create_future()
        entry = [self._v + demand, next(self._seq), fut]
        heapq.heappush(self._heap, entry)
        self._arm(loop)
        try:
            await fut
        except asyncio.CancelledError:
            if entry in self._heap:  # the client went away: its share goes to the others
                self._advance(loop.time())
                self._heap.remove(entry)
                heapq.heapify(self._heap)
                self._arm(loop)
            raise

    def _arm(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._heap:
            rate = min(1.0, self.cores / len(self._heap))
            self._timer = loop.call_at(self._t + max(0.0, (self._heap[0][0] - self._v) / rate), self._tick)

    def _tick(self) -> None:
        loop = asyncio.get_running_loop()
        self._timer = None
        self._advance(loop.time())
        while self._heap and self._heap[0][0] <= self._v + 1e-9:
            fut = heapq.heappop(self._heap)[2]
            if not fut.done():
                fut.set_result(None)
        self._arm(loop)


class _Level:
    """One priority level's seats and queues."""

    def __init__(self, pl: PriorityLevel, seats: int, wait_limit: float) -> None:
        self.pl = pl
        self.seats = seats
        self.wait_limit = wait_limit
        self.in_use = 0
        self.queues: list[deque[asyncio.Future]] = [deque() for _ in range(max(1, pl.queues))]
        self.waiting = 0
        self._next = 0  # the queue whose turn it is
        self._hands: dict[str, list[int]] = {}

    def hand(self, flow: str) -> list[int]:
        """The queues a flow is dealt (shuffle sharding): fixed per flow, from a hash of it."""
        got = self._hands.get(flow)
        if got is None:
            rng = random.Random(zlib.crc32(flow.encode()))
            got = self._hands[flow] = rng.sample(range(len(self.queues)), min(self.pl.hand_size, len(self.queues)))
        return got

    async def take(self, flow: str) -> str | None:
        """None with a seat; else why the request is rejected."""
        if self.in_use < self.seats and not self.waiting:
            self.in_use += 1
            return None
        if self.pl.queue_length_limit <= 0:
            return "no seat free and the level does not queue"
        queue = min((self.queues[i] for i in self.hand(flow)), key=len)
        if len(queue) >= self.pl.queue_length_limit:
            return "queue full"
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        queue.append(fut)
        self.waiting += 1
        timer = loop.call_later(self.wait_limit, self._expire, queue, fut)
        try:
            return await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled() and fut.result() is None:
                self.give()  # handed a seat just as the client went away
            elif fut in queue:
                queue.remove(fut)
                self.waiting -= 1
            raise
        finally:
            timer.cancel()

    def _expire(self, queue: deque, fut: asyncio.Future) -> None:
        if not fut.done():
            queue.remove(fut)
            self.waiting -= 1
            fut.set_result("waited longer than the request wait limit")

    def give(self) -> None:
        n = len(self.queues)
        for i in range(n):
            idx = (self._next + i) % n
            queue = self.queues[idx]
            while queue:
                fut = queue.popleft()
                self.waiting -= 1
                if not fut.done():
                    self._next = (idx + 1) % n
                    fut.set_result(None)  # the seat passes on
                    return
        self.in_use -= 1


@dataclass
class Served:
    """What the model did, per "VERB resource" (for reports and tests)."""
    requests: int = 0
    rejected: int = 0
    seconds: float = 0.0  # arrival to answer, summed (queueing + service)
    queued: float = 0.0  # waiting for a seat, summed
    cpu: float = 0.0  # the server's CPU demand, summed
    etcd: float = 0.0  # etcd's CPU demand, summed
    noops: int = 0  # writes that changed nothing (not stored, no watch event)


@dataclass
class Ticket:
    level: _Level | None
    mutating_slot: bool | None = None  # which max-inflight counter it holds


class CostedServer:
    """A CostModel at work in one ApiServer."""

    def __init__(self, model: CostModel) -> None:
        self.model = model
        self.cpu = SharedCores(model.cores - model.idle_cpu - model.idle_etcd)
        seats = model.seats()
        self.levels = {pl.name: _Level(pl, seats[pl.name], model.request_wait_limit)
                       for pl in model.priority_levels if pl.shares}
        self.inflight = [0, 0]  # read-only, mutating (max_inflight mode)
        self.served: dict[str, Served] = {}
        self.peak_in_service = 0

    def stats(self, key: str) -> Served:
        s = self.served.get(key)
        if s is None:
            s = self.served[key] = Served()
        return s

    async def admit(self, verb: str, headers: Mapping[str, str]) -> tuple[Ticket | None, str]:
        """(a ticket, "") when the request may be served; (None, why) for a 429."""
        mutating = verb in MUTATING
        if self.model.max_inflight is not None:
            level_name, _ = self.model.classify(headers)
            if level_name == "exempt":  # system:masters is never refused by max-in-flight either
                return Ticket(None), ""
            limit = self.model.max_inflight[1 if mutating else 0]
            if self.inflight[mutating] >= limit:
                return None, "max in flight"
            self.inflight[mutating] += 1
            return Ticket(None, mutating), ""
        level_name, flow = self.model.classify(headers)
        level = self.levels.get(level_name)
        if level is None:
            return Ticket(None), ""  # exempt
        why = await level.take(flow)
        if why is not None:
            return None, why
        return Ticket(level), ""

    def release(self, ticket: Ticket) -> None:
        if ticket.level is not None:
            ticket.level.give()
        elif ticket.mutating_slot is not None:
            self.inflight[ticket.mutating_slot] -= 1

    async def serve(self, cost: Cost) -> None:
        """The server's CPU and etcd's (before the handler: a write commits at the end of its service)."""
        task = self.cpu.run(cost.cpu + cost.etcd)
        self.peak_in_service = max(self.peak_in_service, self.cpu.in_service + 1)
        await task
        if cost.wait > 0:
            await asyncio.sleep(cost.wait)

    async def stored(self, cost: Cost, stats: Served, persisted: bool, watchers: int) -> None:
        """After the handler: a stored write sends a watch event to each watcher; a write that
        changed nothing (not stored, no event) costs the server its no-op price instead, measured
        as much as a real write's or more."""
        if persisted:
            more = self.model.watch_event_cpu * watchers
        else:
            stats.noops += 1
            more = max(0.0, cost.noop_cpu - cost.cpu) if cost.noop_cpu is not None else 0.0
        stats.cpu += more
        await self.cpu.run(more)

    def others_use(self, cores: float) -> None:
        """Other processes on the machine (the controller) use `cores` of its CPUs for now: the
        server and etcd get what is left beside their idle work."""
        self.cpu.set_cores(self.model.cores - self.model.idle_cpu - self.model.idle_etcd - cores)

    def totals(self, seconds: float) -> tuple[float, float]:
        """(the server's CPU, etcd's CPU) demanded so far, with `seconds` of their idle rates."""
        return (sum(s.cpu for s in self.served.values()) + self.model.idle_cpu * seconds,
                sum(s.etcd for s in self.served.values()) + self.model.idle_etcd * seconds)


def _kubernetes_verb(method: str, is_list: bool) -> str:
    return {"GET": "list" if is_list else "get", "POST": "create", "PUT": "update", "PATCH": "patch",
            "DELETE": "delete"}.get(method, method.lower())


def verb_of(method: str, has_name: bool) -> str:
    return _kubernetes_verb(method, method == "GET" and not has_name)


# --- the calibrated profiles ----------------------------------------------------------------------------
#
# From ../shared/data/apiserver-costs.md (2026-12-03; raw figures in apiserver-costs.json beside it):
# single requests against a real kube-apiserver 1.24.0 and 1.36.2 with etcd 3.4.23, nothing else on
# the server (no watchers, no controller manager), on this kind of machine (2 cores), one kind of
# request at a time, each on its own object: the medians of its tables, in ms, by row ("a.job.create"
# ...) and column (version, c1 = one connection, c16 = sixteen). docs/apiserver-standin.md "Costs"
# says how they were turned into the profiles and what is left out.

# table "kube-apiserver CPU per request (ms)": (1.24 c1, 1.24 c16, 1.36 c1, 1.36 c16)
_API_MS = {
    "a.job.create": (4.10, 2.09, 2.94, 1.25),
    "b.wl.create": (5.27, 4.24, 4.03, 3.50),
    "c1.wl.status.put": (7.44, 7.02, 7.37, 5.95),
    "c2.wl.status.merge-rv": (7.90, 6.52, 7.70, 5.94),
    "c4.wl.status.jsonpatch-test": (7.77, 7.01, 6.10, 5.78),
    "c5.wl.status.apply": (7.81, 7.23, 7.56, 5.72),
    "d1.job.unsuspend.put": (4.03, 3.12, 3.90, 2.06),
    "d2.job.unsuspend.merge-rv": (4.16, 3.40, 3.70, 2.53),
    "d3.job.unsuspend.smp-rv": (4.19, 2.69, 3.36, 2.04),
    "e1.noop.wl.status.put": (7.94, 5.59, 7.92, 6.77),
    "e2.noop.wl.status.merge-rv": (8.86, 6.53, 8.89, 6.95),
    "e3.noop.job.merge-rv": (4.37, 2.76, 4.18, 3.25),
    "r.wl.get": (3.05, 2.65, 2.81, 2.44),
}
# table "etcd CPU per request (ms)", same rows and columns
_ETCD_MS = {
    "a.job.create": (1.03, 0.42, 0.78, 0.28),
    "b.wl.create": (0.96, 0.50, 0.69, 0.39),
    "c1.wl.status.put": (1.15, 0.70, 1.20, 0.64),
    "c2.wl.status.merge-rv": (1.16, 0.60, 1.12, 0.58),
    "c4.wl.status.jsonpatch-test": (1.15, 0.69, 0.87, 0.57),
    "c5.wl.status.apply": (1.17, 0.69, 1.00, 0.51),
    "d1.job.unsuspend.put": (1.10, 0.62, 1.05, 0.46),
    "d2.job.unsuspend.merge-rv": (1.11, 0.57, 0.91, 0.62),
    "d3.job.unsuspend.smp-rv": (0.96, 0.60, 0.94, 0.48),
    "r.wl.get": (0.75, 0.27, 0.69, 0.34),
}
# table "Latency (client side, ms)": the p50 at c1 (1.24, 1.36)
_P50_C1_MS = {
    "a.job.create": (4.32, 3.10),
    "b.wl.create": (4.88, 3.17),
    "c1.wl.status.put": (6.51, 6.19),
    "c2.wl.status.merge-rv": (6.99, 6.33),
    "c4.wl.status.jsonpatch-test": (6.86, 4.99),
    "c5.wl.status.apply": (6.49, 5.84),
    "d1.job.unsuspend.put": (4.60, 4.66),
    "d2.job.unsuspend.merge-rv": (5.00, 4.14),
    "d3.job.unsuspend.smp-rv": (4.37, 3.96),
    "r.wl.get": (3.21, 2.74),
}
# "Idle rates subtracted": the server's and etcd's CPU with nothing to serve, ms/s (the start's rate)
_IDLE_MS_PER_S = {"1.24": (28.0, 8.0), "1.36": (17.0, 8.0)}
_COLUMNS = {("1.24", 1): 0, ("1.24", 16): 1, ("1.36", 1): 2, ("1.36", 16): 3}

WORKLOAD_STATUS = "workloads.kueue.x-k8s.io/status"
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY = "application/apply-patch+yaml"


def measured(version: str, connections: int, row: str, cores: float = 2.0, etcd_connections: int | None = None) -> Cost:
    """One row of the tables as the model's Cost: the server's CPU per request at `connections`,
    etcd's at `etcd_connections` (default the same); as the wait, what the one-connection p50
    latency leaves once both CPUs run on the machine's cores (the round trip, the client's own
    time; etcd ran with --unsafe-no-fsync, so no fsync)."""
    col = _COLUMNS[(version, connections)]
    etcd_col = _COLUMNS[(version, etcd_connections or connections)]
    api, etcd = _API_MS[row][col] / 1000, _ETCD_MS.get(row, (0.0,) * 4)[etcd_col] / 1000
    p50 = _P50_C1_MS.get(row, (0.0, 0.0))[0 if version == "1.24" else 1] / 1000
    c1 = _COLUMNS[(version, 1)]
    return Cost(api, max(0.0, p50 - (_API_MS[row][c1] + _ETCD_MS.get(row, (0.0,) * 4)[c1]) / 1000 / cores), etcd)


def profile(version: str, connections: int = 1, etcd_connections: int = 16) -> CostModel:
    """The model of kube-apiserver `version` ("1.24", "1.36"): the server's CPU priced at the
    `connections` column, etcd's at `etcd_connections` (why these: docs/apiserver-standin.md "Costs").

    Kinds the tables did not measure take the measured request they are most like: a Job's status
    (the Job controller's Complete) and other built-in writes (Events, Leases) as a whole-Job PUT or
    a Job create; a ClusterQueue's or LocalQueue's status as a Workload's status (a custom resource,
    decoded, pruned and validated against its schema as a whole); a delete as a create. Reads as the
    GET of a Workload; a list adds 20 µs per stored object of the kind (not measured: issue 16's
    guess, kept; the controller lists each kind once at start)."""
    m = lambda row: measured(version, connections, row, etcd_connections=etcd_connections)  # noqa: E731
    col = _COLUMNS[(version, connections)]
    noop = lambda cost, row: replace(cost, noop_cpu=_API_MS[row][col] / 1000)  # noqa: E731
    status = {  # a Workload's status, by how it is sent (a PUT of the whole object, or a patch)
        "update": noop(m("c1.wl.status.put"), "e1.noop.wl.status.put"),
        "patch": noop(m("c2.wl.status.merge-rv"), "e2.noop.wl.status.merge-rv"),
        f"patch {MERGE}": noop(m("c2.wl.status.merge-rv"), "e2.noop.wl.status.merge-rv"),
        f"patch {JSON_PATCH}": noop(m("c4.wl.status.jsonpatch-test"), "e2.noop.wl.status.merge-rv"),
        f"patch {APPLY}": noop(m("c5.wl.status.apply"), "e2.noop.wl.status.merge-rv"),
    }
    job_write = {  # a Job's spec (suspend, unsuspend, restore)
        "update": noop(m("d1.job.unsuspend.put"), "e3.noop.job.merge-rv"),
        "patch": noop(m("d2.job.unsuspend.merge-rv"), "e3.noop.job.merge-rv"),
        f"patch {MERGE}": noop(m("d2.job.unsuspend.merge-rv"), "e3.noop.job.merge-rv"),
        f"patch {STRATEGIC}": noop(m("d3.job.unsuspend.smp-rv"), "e3.noop.job.merge-rv"),
        f"patch {JSON_PATCH}": noop(m("d2.job.unsuspend.merge-rv"), "e3.noop.job.merge-rv"),
        f"patch {APPLY}": noop(m("d2.job.unsuspend.merge-rv"), "e3.noop.job.merge-rv"),
    }
    costs: dict[str, Cost] = {"create jobs.batch": m("a.job.create"),
                              "create workloads.kueue.x-k8s.io": m("b.wl.create"),
                              "delete jobs.batch": m("a.job.create"),
                              "delete workloads.kueue.x-k8s.io": m("b.wl.create")}
    for how, cost in status.items():
        verb, _, content_type = how.partition(" ")
        for resource in (WORKLOAD_STATUS, "clusterqueues.kueue.x-k8s.io/status",
                         "localqueues.kueue.x-k8s.io/status"):
            costs[f"{verb} {resource}{' ' + content_type if content_type else ''}"] = cost
    for how, cost in job_write.items():
        verb, _, content_type = how.partition(" ")
        for resource in ("jobs.batch", "jobs.batch/status"):
            costs[f"{verb} {resource}{' ' + content_type if content_type else ''}"] = cost
    idle_api, idle_etcd = _IDLE_MS_PER_S[version]
    name = f"real-{version}" + ("" if (connections, etcd_connections) == (1, 16) else
                                f"-c{connections}" + ("" if etcd_connections == connections else f"-etcd-c{etcd_connections}"))
    s = costs[f"patch {WORKLOAD_STATUS} {MERGE}"]
    return CostModel(
        name=name,
        costs=costs,
        default_read=m("r.wl.get"),
        default_write=m("a.job.create"),
        list_item_cpu=0.00002,
        cores=2.0,
        idle_cpu=idle_api / 1000,
        idle_etcd=idle_etcd / 1000,
        summary=(f"kube-apiserver {version} + etcd 3.4, single requests (shared/data/apiserver-costs.md), "
                 f"the server's CPU at {connections} connection(s), etcd's at {etcd_connections}: server/etcd CPU per request: Job create "
                 f"{costs['create jobs.batch'].cpu * 1e3:.2f}/{costs['create jobs.batch'].etcd * 1e3:.2f} ms, "
                 f"Workload create {costs['create workloads.kueue.x-k8s.io'].cpu * 1e3:.2f}/"
                 f"{costs['create workloads.kueue.x-k8s.io'].etcd * 1e3:.2f}, Workload status "
                 f"{costs['update ' + WORKLOAD_STATUS].cpu * 1e3:.2f} (PUT) {s.cpu * 1e3:.2f} (merge patch)/"
                 f"{s.etcd * 1e3:.2f}, Job write {costs['update jobs.batch'].cpu * 1e3:.2f} (PUT) "
                 f"{costs['patch jobs.batch ' + MERGE].cpu * 1e3:.2f} (merge patch), GET "
                 f"{m('r.wl.get').cpu * 1e3:.2f}; a no-op write as measured; idle {idle_api:g}+{idle_etcd:g} ms/s; "
                 f"2 cores"),
    )


REAL_1_24 = profile("1.24")
REAL_1_36 = profile("1.36")
MODELS = {m.name: m for m in (REAL_1_24, REAL_1_36, profile("1.24", 16, 16), profile("1.36", 16, 16),
                               profile("1.24", 1, 1))}
