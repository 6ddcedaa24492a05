"""Entry point: parse, dispatch to the one handler module needed, map errors to exit codes."""

from __future__ import annotations

import sys

from cafleet.errors import CafleetError, ExitCode

TYPE_CHECKING = False  # true for the type checker only: `typing` stays off the hot path
if TYPE_CHECKING:
    from cafleet.cli.context import Context


def main(argv: list[str] | None = None, context: Context | None = None) -> int:
    from cafleet.cli import parser
    from cafleet.cli.context import Context

    args = sys.argv[1:] if argv is None else argv
    ctx = context if context is not None else Context()
    try:
        if args[:1] == ["--version"]:
            from cafleet import __version__

            ctx.out(f"cafleet {__version__}")
            return ExitCode.OK
        parsed = parser.parse(args)
        if parsed.help is not None:
            ctx.out(parsed.help)
            return ExitCode.OK
        ctx.json = parsed.json
        _ = ctx.settings  # every setting is read and bounded before the handler stores anything
        module_name, _, function_name = parsed.command.handler.partition(":")
        module = __import__(module_name, fromlist=[function_name])
        result = getattr(module, function_name)(ctx, **parsed.values)
        return ExitCode.OK if result is None else int(result)
    except CafleetError as error:
        _report(ctx, error.with_hint())
        return error.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        _silence_stdout()
        return ExitCode.OK
    except Exception as error:  # a bug: say so in one line; CAFLEET_DEBUG=1 shows the traceback
        fault = _storage_fault(ctx, error)
        if fault is not None:
            _report(ctx, str(fault))
            return fault.exit_code
        from cafleet.config import debug

        if debug(ctx.environ):
            raise
        _report(ctx, f"internal error ({type(error).__name__}: {error}); rerun with CAFLEET_DEBUG=1 and report it.")
        return ExitCode.FAILURE
    finally:
        ctx.close()


def _storage_fault(ctx: Context, error: Exception):
    """A SQLite error raised while a result was being read (outside the store's own
    translation): a damaged page, a full disk. Told in one line like any other. The open
    store classifies its own engine's errors."""
    store = getattr(ctx, "_store", None)
    if store is not None:
        return store.classify(error)
    from cafleet.store.engines import escaped_error

    return escaped_error(
        error, getattr(ctx, "_database", None), ctx.busy_timeout if hasattr(ctx, "busy_timeout") else 5.0
    )


def _report(ctx: Context, message: str) -> None:
    line = " ".join(message.split("\n"))
    try:  # noqa: SIM105 - contextlib stays off the hot commands' path
        ctx.err(f"Error: {line}")
    except (BrokenPipeError, ValueError):
        pass


def _silence_stdout() -> None:
    """After a closed pipe, point stdout at /dev/null so interpreter shutdown stays quiet."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
