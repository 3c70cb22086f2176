"""Tools for testing against headgate. `headgate.testing.conformance` is the store port's
conformance suite, for an adapter to run; it needs pytest, which `import headgate` and
this package never import."""
