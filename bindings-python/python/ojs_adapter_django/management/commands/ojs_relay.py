"""``manage.py ojs_relay``: runs the relay (the same Rust engine as ``ojs-relay run``) in the
foreground until SIGINT or SIGTERM, then stops gracefully and exits 0. Use it with
``OJS_CONFIG = {..., "relay": {"mode": "external"}}`` so web processes run none.

A process manager (systemd, Kubernetes) may send SIGTERM at any moment, also while the command
is still starting. The core's stop-signal handlers are therefore armed before anything else of
this command runs (Django's system checks, the configuration, the ready line): a signal from
then on is remembered and the relay, once it runs, stops at once. What remains outside is
Python's and Django's own start-up before this command's code is reached (``django.setup()``,
loading the command); a SIGTERM there still has its default effect."""

from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS

from ojs_adapter_django import _native, relay_log
from ojs_adapter_django.client import ojs
from ojs_adapter_django.errors import OJSError, from_native


class Command(BaseCommand):
    help = "Run the OJS outbox relay until SIGINT/SIGTERM."

    def add_arguments(self, parser):
        parser.add_argument("--database", default=DEFAULT_DB_ALIAS,
                            help="Django database alias whose outbox to relay.")

    def execute(self, *args, **options):
        # First thing, before the system checks and handle() (manage.py and call_command both
        # come through here).
        try:
            _native.arm_stop_signals()
        except _native.NativeError as native:
            error = from_native(native)
            raise CommandError(f"[{error.code}] {error}") from None
        try:
            return super().execute(*args, **options)
        except KeyboardInterrupt:
            # SIGINT: Python's own handler runs after the core's and raises this wherever the
            # interpreter is at that moment; the relay (if it ran) has stopped gracefully.
            return None

    def handle(self, *args, **options):
        alias = options["database"]
        bridge = ojs.bridge(alias)
        self.stdout.write(f"ojs_relay: relaying {bridge.table_name} of database {alias!r}; "
                          "SIGINT or SIGTERM stops it")
        self.stdout.flush()
        # The relay's records (pauses, resumes, dead letters) go to the "ojs_adapter_django.relay"
        # logger; without a handler for it in LOGGING they are printed on stderr too (the
        # command's stderr stream itself: its OutputWrapper would style every line as an error).
        with relay_log.console("ojs_relay", getattr(self.stderr, "_out", None)):
            try:
                ojs.run_relay_until_signal(alias)
            except OJSError as exc:
                raise CommandError(f"[{exc.code}] {exc}") from exc
        self.stdout.write("ojs_relay: stopped")
