"""``manage.py ojs_outbox``: the outbox's status and its dead letters.

    manage.py ojs_outbox status
    manage.py ojs_outbox dead list [--tenant T] [--limit N]
    manage.py ojs_outbox dead replay [--tenant T]
    manage.py ojs_outbox dead purge [--tenant T] --yes
"""

import json

from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS

from ojs_adapter_django.client import ojs
from ojs_adapter_django.errors import OJSError


class Command(BaseCommand):
    help = "Outbox status and dead-letter administration (list, replay, purge)."

    def add_arguments(self, parser):
        parser.add_argument("--database", default=DEFAULT_DB_ALIAS)
        commands = parser.add_subparsers(dest="command", required=True)
        commands.add_parser("status", help="Row counts by status, oldest pending age, lag.")
        dead = commands.add_parser("dead", help="Dead rows: list, replay, purge.")
        actions = dead.add_subparsers(dest="action", required=True)
        listing = actions.add_parser("list", help="Dead rows, oldest first (JSON).")
        listing.add_argument("--tenant", default=None)
        listing.add_argument("--limit", type=int, default=None, help="default: the core's (100)")
        replay = actions.add_parser("replay", help="Put dead rows back to pending.")
        replay.add_argument("--tenant", default=None)
        purge = actions.add_parser("purge", help="Delete dead rows.")
        purge.add_argument("--tenant", default=None)
        purge.add_argument("--yes", action="store_true", help="Confirm the deletion.")

    def handle(self, *args, **options):
        alias = options["database"]
        try:
            if options["command"] == "status":
                self.stdout.write(json.dumps(ojs.status(using=alias), indent=2))
                return
            action, tenant = options["action"], options.get("tenant")
            scope = f"tenant {tenant!r}" if tenant else "all tenants"
            if action == "list":
                rows = ojs.dead_list(tenant, options["limit"], using=alias)
                self.stdout.write(json.dumps(rows, indent=2))
            elif action == "replay":
                count = ojs.dead_replay(tenant, using=alias)
                self.stdout.write(f"replayed {count} dead rows ({scope})")
            elif action == "purge":
                if not options["yes"]:
                    raise CommandError("dead purge deletes rows for good: add --yes")
                count = ojs.dead_purge(tenant, using=alias)
                self.stdout.write(f"purged {count} dead rows ({scope})")
        except OJSError as exc:
            raise CommandError(f"[{exc.code}] {exc}") from exc
