"""The ``fastnn`` command line: ``fastnn bench`` (the main job), ``fastnn demo``."""
import argparse
import sys


def main(argv=None):
    parser = argparse.ArgumentParser(prog="fastnn", description=__doc__)
    sub = parser.add_subparsers(dest="command")
    from .bench import cli as bench_cli
    bench_cli.add_parser(sub)
    try:
        from . import demo
    except ImportError:
        demo = None
    if demo is not None and hasattr(demo, "add_parser"):
        demo.add_parser(sub)
    args = parser.parse_args(argv)
    if args.command is None:
        args = parser.parse_args(["bench"] + (argv or sys.argv[1:]))
    args.func(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
