"""``manage.py ojs_relay``: runs the relay (the same Rust engine as ``ojs-relay run``) in the
foreground until SIGINT or SIGTERM, then stops gracefully. Use it with
``OJS_CONFIG = {..., "relay": {"mode": "external"}}`` so web processes run none."""

from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS

from ojs_adapter_django.client import ojs
from ojs_adapter_django.errors import OJSError


class Command(BaseCommand):
    help = "Run the OJS outbox relay until SIGINT/SIGTERM."

    def add_arguments(self, parser):
        parser.add_argument("--database", default=DEFAULT_DB_ALIAS,
                            help="Django database alias whose outbox to relay.")

    def handle(self, *args, **options):
        alias = options["database"]
        adapter = ojs.adapter(alias)
        self.stdout.write(f"ojs_relay: relaying {adapter.table_name} of database {alias!r}; "
                          "SIGINT or SIGTERM stops it")
        self.stdout.flush()
        try:
            ojs.run_relay_until_signal(alias)
        except KeyboardInterrupt:
            pass
        except OJSError as exc:
            raise CommandError(f"[{exc.code}] {exc}") from exc
        try:
            self.stdout.write("ojs_relay: stopped")
        except KeyboardInterrupt:
            pass
