"""`devicectl serve`: the effective settings from the config file and the flags, and the
controller's run loop. Its own module because `agent` runs it too."""

from __future__ import annotations

import asyncio
import signal

from controller.cli._errors import check_sqlite_directory
from controller.cli._options import Options
from controller.cli._render import print_error, print_json
from controller.config import Settings, load_settings
from controller.observability import logs


def settings_from(args: Options) -> Settings:
    names = set(Settings.__dataclass_fields__)
    overrides = {k: v for k, v in vars(args).items() if k in names and v is not None}
    return load_settings(getattr(args, "config", None), overrides=overrides)


def cmd_serve(args: Options) -> int:
    settings = settings_from(args)
    check_sqlite_directory(settings.database_url)
    if args.print_config:
        print_json(settings.display())
        return 0
    # one of several processes (`--workers`: they share one output): each line says which
    several = settings.workers > 0 or settings.role != "all"
    logs.setup(settings.log_level, settings.log_format, instance=settings.instance_id if several else "")
    from controller.app import Controller, SchemaOutdatedError
    from controller.process import runtime
    from controller.process.writer import WriterConflictError

    runtime.tune_process()

    async def main() -> int:
        controller = Controller(settings)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def stop_on_signals() -> None:
            # just before the gRPC server takes calls (`Controller.start`): a SIGTERM from then on
            # stops a started controller gracefully; one before it ends the process as it always
            # did (nothing was acknowledged yet, and a wait at start, for the database's writer lock
            # or a migration, stays interruptible)
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, stop.set)

        try:
            await controller.start(before_accepting=stop_on_signals)
        except SchemaOutdatedError as exc:
            print_error(str(exc))  # one line, however wide the terminal
            return 2
        except WriterConflictError as exc:
            print_error(str(exc))
            return 1
        runtime.freeze_startup_objects()
        await stop.wait()
        await controller.stop()
        return 0

    return asyncio.run(main())
