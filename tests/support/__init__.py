"""Helpers the tests share, one of each (a test never imports another test module):
- api: real engines (shared per configuration, or a test's own: own_engine) and servers on
  loopback;
- cli: the command line as a child process (run_cli), for the one process-level check per
  command; everything else calls main([...]) in process;
- gui: real console windows (console_window) and a fresh chat per test;
- waiting: wait_for(predicate, timeout, what) and free_port();
- shared: where the development machine's shared assets are, and need() (skip locally, fail
  in CI);
- gguf, models, kernels, loading, offline, serve, fleet_servers, hostile_http, bad_requests,
  standin_wheels: GGUF files, tiny random-weight models of the real transformers classes, kernel
  comparisons that accept near-ties, held loads, offline environments, `serve` processes,
  hostile HTTP servers, the fuzz corpus, stand-in wheels for the bundle tests.
Fakes of the parts that cannot exist here stay in tests/fakes."""
