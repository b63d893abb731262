"""Health services: the only road from a signal to a finding and an alert.

INTERFACE (implemented by the health work; other apps call only these):

raise_finding(node_id, *, rule, severity, summary, evidence=None, gpu_index=None,
              recommended_action=RecommendedAction.NONE, source="", subject="",
              observed_at=None, shadow=False, actor=None) -> Finding | None
    Record a finding for ``rule`` on the node (and GPU), open or refresh the deduplicated
    alert keyed by (node, rule, gpu_index, subject), and write a lifecycle event
    (NodeEvent kind=finding) in the same transaction. Shadow findings are recorded and
    marked, but open no alert and write no event.

clear_condition(node_id, *, rule, gpu_index=None, subject="", reason="") -> Alert | None
    The condition behind an open alert is gone: resolve it.
"""
