"""``manage.py ojs_outbox``: the outbox's status and its dead letters.

    manage.py ojs_outbox status [--json]
    manage.py ojs_outbox dead list [--tenant T] [--limit N] [--json]
    manage.py ojs_outbox dead replay [--tenant T]
    manage.py ojs_outbox dead purge [--tenant T] [--yes]

The arguments are parsed here; what each command does, prints and exits with is the core's
(``Bridge.admin``, the same as ``ojs-relay status`` / ``ojs-relay dead``): its output is
printed unchanged and the process exits with its code (a purge without ``--yes`` says what it
would delete and exits 2). From ``call_command`` a non-zero code raises ``CommandError``.
"""

import sys

from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS

from ojs_adapter_django.facade import ojs
from ojs_adapter_django.errors import OJSError


class Command(BaseCommand):
    help = "Outbox status and dead-letter administration (list, replay, purge)."

    def add_arguments(self, parser):
        parser.add_argument("--database", default=DEFAULT_DB_ALIAS)
        commands = parser.add_subparsers(dest="command", required=True)
        status = commands.add_parser("status", help="Row counts by status, oldest pending age, lag.")
        status.add_argument("--json", action="store_true", help="One JSON object, not a table.")
        dead = commands.add_parser("dead", help="Dead rows: list, replay, purge.")
        actions = dead.add_subparsers(dest="action", required=True)
        listing = actions.add_parser("list", help="Dead rows, oldest first.")
        listing.add_argument("--tenant", default=None)
        listing.add_argument("--limit", type=int, default=None, help="default: the core's")
        listing.add_argument("--json", action="store_true", help="One JSON array, not a table.")
        replay = actions.add_parser("replay", help="Put dead rows back to pending.")
        replay.add_argument("--tenant", default=None)
        purge = actions.add_parser("purge", help="Delete dead rows (with --yes).")
        purge.add_argument("--tenant", default=None)
        purge.add_argument("--yes", action="store_true", help="Confirm the deletion.")

    def run_from_argv(self, argv):
        # From the command line a non-zero code of the core is the process's exit code, its
        # text printed as it is (CommandError would prefix it).
        self._exit = True
        super().run_from_argv(argv)

    def handle(self, *args, **options):
        command = {"command": options["command"]}
        for key in ("action", "tenant", "limit", "json", "yes"):
            value = options.get(key)
            if value is not None and value is not False:
                command[key] = value
        try:
            code, out, err = ojs.admin(command, using=options["database"])
        except OJSError as exc:
            raise CommandError(f"[{exc.code}] {exc}") from exc
        if out:
            self.stdout.write(out, ending="")
        if err:
            # The raw stream: Django's OutputWrapper would style the text as an error.
            stderr = getattr(self.stderr, "_out", self.stderr)
            stderr.write(err)
            stderr.flush()
        if code != 0:
            if getattr(self, "_exit", False):
                sys.exit(code)
            raise CommandError(err.strip() or f"exit code {code}", returncode=code)
