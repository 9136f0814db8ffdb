"""Alerts where CMS looks: what is wrong now (rules.py, pure) and its push to AlertManager (push.py)."""
from MSUnmerged.alerts.rules import Alert, AlertKind, evaluate
from MSUnmerged.alerts.push import AlertManager, Notifier

__all__ = ["Alert", "AlertKind", "AlertManager", "Notifier", "evaluate"]
