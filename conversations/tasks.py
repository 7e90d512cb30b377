from celery import shared_task

from conversations.runner import turn_run


@shared_task(acks_late=True, ignore_result=True)
def run_turn(turn_id: int) -> None:
    turn_run(turn_id=turn_id)
