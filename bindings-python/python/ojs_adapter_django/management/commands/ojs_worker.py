"""``manage.py ojs_worker``: runs the Django tasks that ``ojs_adapter_django.tasks.OJSBackend``
enqueued, on the core worker loop (fetch, heartbeat, ack and nack against the OJS backend).

    manage.py ojs_worker [--backend ALIAS] [--queue Q ...] [--concurrency N] [--count N]
                         [--once] [--visibility-timeout SECONDS] [--poll-interval SECONDS]
                         [--worker-id ID] [--stop-deadline SECONDS]

``--concurrency`` tasks at once, each in a thread of its own. SIGTERM or SIGINT: no more
fetches, the running tasks have ``--stop-deadline`` to finish (what still runs then is given
back), exit 0 (a second signal gives their jobs back at once). An option
left out takes the core's default. The rules are in ``ojs_adapter_django.worker`` and
docs/django-tasks.md, "Running tasks".
"""

from django.core.management.base import BaseCommand, CommandError

from ojs_adapter_django import relay_log
from ojs_adapter_django.errors import OJSError


class Command(BaseCommand):
    help = "Run the Django tasks of an OJSBackend on the OJS worker loop: fetch, run, ack/nack."

    def add_arguments(self, parser):
        parser.add_argument("--backend", default="default",
                            help="The TASKS alias of the OJSBackend (default: default). Its "
                                 "DATABASE and ADAPTER are used; its QUEUES are the default "
                                 "queues.")
        parser.add_argument("--queue", action="append", dest="queues", metavar="QUEUE",
                            help="A queue to fetch from, in order of preference; repeatable. "
                                 "Default: the backend's QUEUES, else \"default\".")
        parser.add_argument("--concurrency", type=int, default=None, metavar="N",
                            help="Tasks run at once, each in a thread of its own (default: "
                                 "the worker loop's).")
        parser.add_argument("--count", type=int, default=None, metavar="N",
                            help="Stop after taking N jobs (default: no limit; with --once, "
                                 "1).")
        parser.add_argument("--once", action="store_true",
                            help="Run the jobs there are now (up to --count), then exit: a "
                                 "wait of --poll-interval (else 1 s) without a job ends it.")
        parser.add_argument("--visibility-timeout", type=float, default=None,
                            metavar="SECONDS",
                            help="How long a fetched job stays reserved without a heartbeat "
                                 "(default: the worker loop's); heartbeats renew it while "
                                 "the task runs.")
        parser.add_argument("--poll-interval", type=float, default=None, metavar="SECONDS",
                            help="The wait after a fetch that found nothing (default: the "
                                 "worker loop's).")
        parser.add_argument("--worker-id", default=None,
                            help="The id sent to the backend (default: the worker loop's, "
                                 "host-pid-random).")
        parser.add_argument("--stop-deadline", type=float, default=None, metavar="SECONDS",
                            help="After SIGTERM/SIGINT, how long the running tasks have to "
                                 "finish before their jobs are given back (default: the worker "
                                 "loop's, 25 s: below the 30 s most process managers wait "
                                 "before SIGKILL).")

    def handle(self, *args, **options):
        try:
            from ojs_adapter_django.worker import OJSWorkerError, Worker, logger
        except ImportError as exc:  # Django 5.2 without the backport
            raise CommandError(str(exc)) from exc
        try:
            worker = Worker(options["backend"], options["queues"], options["count"],
                            options["visibility_timeout"], options["poll_interval"],
                            options["worker_id"], options["concurrency"],
                            options["stop_deadline"])
        except (OJSWorkerError, OJSError) as exc:
            raise CommandError(str(exc)) from exc
        except Exception as exc:  # an unknown TASKS alias, a bad backend configuration
            if type(exc).__name__.startswith("InvalidTaskBackend"):
                raise CommandError(str(exc)) from exc
            raise
        restore = worker.install_signal_handlers()
        # Without a handler for the worker's logger in LOGGING its records (INFO included) are
        # printed on stderr, as ojs_relay prints the relay's.
        try:
            with relay_log.console("ojs_worker", getattr(self.stderr, "_out", None),
                                   logger=logger):
                try:
                    worker.run(once=options["once"])
                except OJSError as exc:
                    raise CommandError(f"[{exc.code}] {exc}") from exc
        finally:
            restore()
        counts = worker.counts
        self.stdout.write(f"ojs_worker: stopped: {counts['completed']} completed, "
                          f"{counts['failed']} failed, {counts['refused']} refused, "
                          f"{counts['requeued']} given back, {counts['unknown']} unknown")
