"""`python -m aotc.testing.fakecuda` prints the stand-in driver's path; `--env` prints
shell assignments (`eval "$(python -m aotc.testing.fakecuda --env)"`) that make new
processes use it, through aotc's runtime and through cuda-bindings."""
import shlex
import sys

from aotc.errors import AotcError
from aotc.testing.fakecuda import environment, library_path


def main(argv: list[str]) -> int:
    try:
        if argv[1:] == ["--env"]:
            for k, v in environment().items():
                print(f"export {k}={shlex.quote(v)}")
        elif not argv[1:]:
            print(library_path())
        else:
            print("usage: python -m aotc.testing.fakecuda [--env]", file=sys.stderr)
            return 2
    except AotcError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
