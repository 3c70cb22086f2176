"""The inspection benchmark: `python bench/inspect.py --store sqlite|pg …`.

The implementation, and its documentation, is in bench/inspection.py. This file only
carries the name the benchmark is known by — which is also the name of a standard-library
module. Every script run as `python bench/<name>.py` has bench/ first on sys.path, so an
`import inspect` anywhere in it (dataclasses does one) finds this file: imported under
that name, it therefore loads the standard library's `inspect` and steps aside for it.
"""

import sys

if __name__ == "__main__":
    import os

    _bench = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _bench]
    sys.path.insert(0, os.path.dirname(_bench))
    from bench.inspection import main

    raise SystemExit(main())
elif __name__ == "inspect":
    import importlib.machinery
    import importlib.util
    import os

    _spec = importlib.machinery.PathFinder.find_spec("inspect", [os.path.dirname(os.__file__)])
    if _spec is None or _spec.loader is None:
        raise ImportError("the standard library's inspect module was not found")
    _stdlib = importlib.util.module_from_spec(_spec)
    sys.modules["inspect"] = _stdlib  # what `import inspect` hands out from now on
    _spec.loader.exec_module(_stdlib)
else:  # imported as bench.inspect
    from bench.inspection import main  # noqa: F401
