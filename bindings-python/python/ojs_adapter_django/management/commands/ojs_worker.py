"""``manage.py ojs_worker``: runs the Django tasks that ``ojs_adapter_django.tasks.OJSBackend``
enqueued, fetching them from the OJS backend (``POST /ojs/v1/workers/fetch``, ack, nack,
heartbeat).

    manage.py ojs_worker [--backend ALIAS] [--queue Q ...] [--count N] [--once]
                         [--visibility-timeout SECONDS] [--poll-interval SECONDS]
                         [--worker-id ID]

One job at a time; run several processes for parallelism. SIGTERM or SIGINT: no more fetches,
the running job finishes, exit 0 (a second signal gives the running job back). The rules are
in ``ojs_adapter_django.worker`` and docs/django-tasks.md, "Running tasks".
"""

from django.core.management.base import BaseCommand, CommandError

from ojs_adapter_django import relay_log
from ojs_adapter_django.errors import OJSError


class Command(BaseCommand):
    help = "Run the Django tasks of an OJSBackend: fetch jobs from the OJS backend, run, ack/nack."

    def add_arguments(self, parser):
        parser.add_argument("--backend", default="default",
                            help="The TASKS alias of the OJSBackend (default: default). Its "
                                 "DATABASE and ADAPTER are used; its QUEUES are the default "
                                 "queues.")
        parser.add_argument("--queue", action="append", dest="queues", metavar="QUEUE",
                            help="A queue to fetch from, in order of preference; repeatable. "
                                 "Default: the backend's QUEUES, else \"default\".")
        parser.add_argument("--count", type=int, default=1,
                            help="Jobs asked per fetch, run one after another (default 1).")
        parser.add_argument("--once", action="store_true",
                            help="One fetch: run what it brought, then exit.")
        parser.add_argument("--visibility-timeout", type=float, default=30.0, metavar="SECONDS",
                            help="How long a fetched job stays reserved without a heartbeat "
                                 "(default 30); heartbeats renew it while the job runs.")
        parser.add_argument("--poll-interval", type=float, default=1.0, metavar="SECONDS",
                            help="The wait after a fetch that found nothing (default 1).")
        parser.add_argument("--worker-id", default=None,
                            help="The id sent to the backend (default: host-pid-random).")

    def handle(self, *args, **options):
        try:
            from ojs_adapter_django.worker import OJSWorkerError, Worker, logger
        except ImportError as exc:  # Django 5.2 without the backport
            raise CommandError(str(exc)) from exc
        try:
            worker = Worker(options["backend"], options["queues"], options["count"],
                            options["visibility_timeout"], options["poll_interval"],
                            options["worker_id"])
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

