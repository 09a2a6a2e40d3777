"""loopwise's tests: tests/<folder>/test_<module>.py tests src/loopwise/<folder>/<module>.py."""
