"""nearprep-py: the pip package's console entry point (the C++ `nearprep`
CLI stays the main one). `nearprep-py --version` prints the version;
`nearprep-py info` prints what this installation has (native receive module,
generated stubs, grpcio/protobuf/numpy versions) and exits 1 when the stubs do
not load."""

import argparse
import sys


def info():
    import grpc
    import numpy
    import google.protobuf
    import nearprep
    from nearprep import _stubs
    print(f"nearprep {nearprep.__version__} ({nearprep.__path__[0]})")
    print(f"python {sys.version.split()[0]}  grpcio {grpc.__version__}  "
          f"protobuf {google.protobuf.__version__}  numpy {numpy.__version__}")
    print(f"native receive module: {'yes' if nearprep.native_available() else 'no'}"
          + ("" if nearprep.native_available() else f" ({nearprep.native_missing_reason()})"))
    try:
        pb2, _ = _stubs.load()
    except Exception as e:  # noqa: BLE001 - reported, exit status says it
        print(f"stubs: NOT loadable: {e}")
        return 1
    print(f"stubs: {pb2.__file__}")
    return 0


def main(argv=None):
    import nearprep
    parser = argparse.ArgumentParser(prog="nearprep-py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"nearprep {nearprep.__version__}")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("info", help="what this installation has")
    args = parser.parse_args(argv)
    if args.command == "info":
        return info()
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
