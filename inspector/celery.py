"""The Celery application; turns run as tasks on a thread pool (the agent loop is IO-bound)."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "inspector.settings")

app = Celery("inspector")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
