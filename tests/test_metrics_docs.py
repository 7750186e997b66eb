"""docs/metrics.md says what the exporter exports: every family of the controller's registry (with
the LocalQueue and waitForPodsReady families on) is in one of the page's tables, of the type and
with exactly the labels the page gives it, and the tables name no family the exporter lacks."""

from __future__ import annotations

import re
from pathlib import Path

from gpuqueue.extender.controller.serving.metrics import Metrics
from gpuqueue.extender.controller.podsready.pods_ready_metrics import PodsReadyMetrics
from tests.metrics_support import declared_families

DOC = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"


def _outside_parentheses(text: str) -> str:
    """`status` (`active`, `inadmissible`) -> `status` : the values a label takes are not labels."""
    depth, kept = 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0:
            kept.append(ch)
    return "".join(kept)


def documented_families(text: str) -> list[tuple[str, str, frozenset[str]]]:
    """(family, type, labels) of each row of the page's `| family | type | labels | ... |` tables. A
    row may name several families: one type for all, or one per family in order; `none`: no label."""
    rows, header = [], None
    for line in text.splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
            continue
        if header[:3] != ["family", "type", "labels"] or set(cells[0]) <= {"-", ":"}:
            continue
        names = re.findall(r"`([^`]+)`", cells[0])
        types = [t.strip() for t in cells[1].split(",")]
        types = types * len(names) if len(types) == 1 else types
        assert names and len(types) == len(names), line
        labels = frozenset(re.findall(r"`([^`]+)`", _outside_parentheses(cells[2])))
        rows += [(name, type_, labels) for name, type_ in zip(names, types)]
    return rows


def exported() -> dict[str, tuple[str, frozenset[str]]]:
    metrics = Metrics(local_queue_metrics=True)
    PodsReadyMetrics(metrics.registry, local_queue_metrics=True)
    return declared_families(metrics.registry)


def compare(text: str) -> dict[str, tuple]:
    """family -> (exported, documented) wherever the two differ (None: absent)."""
    rows = documented_families(text)
    documented = {name: (type_, labels) for name, type_, labels in rows}
    assert len(documented) == len(rows), "a family is in two rows"
    declared = exported()
    return {name: (declared.get(name), documented.get(name)) for name in declared.keys() | documented.keys()
            if declared.get(name) != documented.get(name)}


def test_the_tables_say_every_family_with_its_type_and_labels():
    assert compare(DOC.read_text()) == {}


def test_the_comparison_sees_a_label_or_a_family_the_page_leaves_out_or_invents():
    text = DOC.read_text()
    assert len(documented_families(text)) == len(exported()) >= 40
    evicted_row = next(line for line in text.splitlines() if line.startswith("| `kueue_evicted_workloads_total`"))
    # the page as it was before underlying_cause was added to the eviction counter
    without_cause = evicted_row[:evicted_row.index(", `underlying_cause`")] + " | counted |"
    assert set(compare(text.replace(evicted_row, without_cause))) == {"kueue_evicted_workloads_total"}
    assert set(compare(re.sub(r"^\| `gpuqueue_leader` .*\n", "", text, flags=re.M))) == {"gpuqueue_leader"}
    invented = "| `kueue_made_up_total` | counter | `cluster_queue` | nothing |\n"
    assert set(compare(text.replace("| `gpuqueue_leader`", invented + "| `gpuqueue_leader`"))) == {"kueue_made_up_total"}
    wrong_type = text.replace("| `gpuqueue_leader` | gauge |", "| `gpuqueue_leader` | counter |")
    assert set(compare(wrong_type)) == {"gpuqueue_leader"}
