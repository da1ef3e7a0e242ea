"""The test and demo harness: load test, workloads, the history checker and the demo.

Nothing in the runtime packages imports this package.
"""
