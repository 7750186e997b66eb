import pytest

from gpuqueue.api.labelselector import LabelSelectorError, check_label_selector, selector_matches


@pytest.mark.parametrize(
    "selector,labels,expected",
    [
        (None, {"a": "1"}, False),
        ({}, {}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]}, {"a": "2"}, True),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}]}, {}, False),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "1"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False),
    ],
)
def test_selector_matches(selector, labels, expected):
    check_label_selector(selector)
    assert selector_matches(selector, labels) is expected


@pytest.mark.parametrize(
    "selector,message",
    [
        ([], "must be an object"),
        ({"matchLabels": {"a": 1}}, "matchLabels"),
        ({"matchExpressions": [{"operator": "In", "values": ["x"]}]}, r"matchExpressions\[0\].key"),
        ({"matchExpressions": [{"key": "a", "operator": "In"}]}, "values: Required"),
        ({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}, "Forbidden"),
    ],
)
def test_invalid_selectors(selector, message):
    with pytest.raises(LabelSelectorError, match=message):
        check_label_selector(selector)
