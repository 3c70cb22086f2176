"""The HTTP enqueue benchmark: `python bench/http.py …`.

The implementation, and its documentation, is in bench/httpbench.py. This file only
carries the name the benchmark is known by, which is also the name of a standard-library
package. Every script run as `python bench/<name>.py` has bench/ first on sys.path, so an
`import http.client` anywhere in it (requests, urllib) finds this file first: imported
under that name, it loads the standard library's `http` package and steps aside for it
(as bench/inspect.py does for `inspect`).
"""

import sys

if __name__ == "__main__":
    import os

    _bench = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _bench]
    sys.path.insert(0, os.path.dirname(_bench))
    from bench.httpbench import main

    raise SystemExit(main())
elif __name__ == "http":
    import importlib.machinery
    import importlib.util
    import os

    _spec = importlib.machinery.PathFinder.find_spec("http", [os.path.dirname(os.__file__)])
    if _spec is None or _spec.loader is None:
        raise ImportError("the standard library's http package was not found")
    _stdlib = importlib.util.module_from_spec(_spec)
    sys.modules["http"] = _stdlib  # what `import http` hands out from now on
    _spec.loader.exec_module(_stdlib)
else:  # imported as bench.http
    from bench.httpbench import main  # noqa: F401
