"""The context transactions of the seed articles, verbatim (refs and versions as written)."""

RELEASE_TX = """(context-tx
  (base-version 12)
  (reason "Incorporate the test result and prepare the release")
  (derive test-result (from @e42) (tests passed))
  (revise release (goal ship-v1) (stage packaging))
  (relate test-result supports release)
  (retire @e42))"""

CONSOLIDATE_TX = """(context-tx
  (base-version 42)
  (reason "Consolidate two release experiences into a reusable procedure")
  (derive release-procedure
    (from release-case-a release-case-b)
    (steps "After tests pass, build, verify this run's artifacts, then package.")
    (single-package
      (test "npm test")
      (build "npm run build")
      (artifact "dist/"))
    (workspace
      (test "pnpm --filter web test")
      (build "pnpm --filter web build")
      (artifact "apps/web/dist/"))
    (applicability "Check the current project layout and scripts before choosing a branch."))
  (relate release-procedure supersedes release-case-a)
  (relate release-procedure supersedes release-case-b)
  (retire release-case-a release-case-b))"""
