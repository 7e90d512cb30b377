from celery import shared_task
from django.conf import settings

from conversations.retention import conversations_prune
from conversations.runner import turn_run


@shared_task(acks_late=True, ignore_result=True)
def run_turn(turn_id: int) -> None:
    turn_run(turn_id=turn_id)


@shared_task(ignore_result=True)
def prune_conversations() -> None:
    """The daily retention run (Celery beat); ``RETENTION_DAYS=0`` keeps everything."""
    if settings.RETENTION_DAYS > 0:
        conversations_prune(older_than_days=settings.RETENTION_DAYS)
