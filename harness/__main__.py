"""`python -m harness`: the command line (harness/run). An interpreter without the harness's own
dependencies (`make compare PYTHON=python3`) is told in one line which package is missing and how to
get it, exit 2; a framework's missing import is the backends' business (a skip with its reason)."""
import sys

# pyproject.toml's [project] dependencies that the harness imports (pytest only runs the tests);
# tests/test_cli.py holds this list to pyproject's.
DEPENDENCIES = ("numpy", "scipy", "hypothesis", "rich", "matplotlib", "jsonschema")


def _missing(e: ImportError) -> str | None:
    """The harness dependency whose import failed, or None (anything else propagates as it is)."""
    top = (e.name or "").split(".")[0]
    return top if top in DEPENDENCIES else None


if __name__ == "__main__":
    from harness.run import stops  # the standard library alone: before anything that can be interrupted

    stops.process_wide()
    from harness.workers import bytecode  # the standard library alone: before the imports it can spare

    bytecode.offer()
    from harness.run import output

    output.install()
    try:
        from harness.run.cli import main

        code = output.finish(main())
        stops.exiting(code)
        sys.exit(code)
    except ImportError as e:
        name = _missing(e)
        if name is None:
            raise
        print(f"harness: error: {sys.executable} has no '{name}', which the harness needs ({e}): run make "
              f"without PYTHON= to set up .venv, or install the dependencies: {sys.executable} -m pip install -e .",
              file=sys.stderr)
        sys.exit(2)
