"""Unit tests of raft/: the role objects and the voter records. The Raft rules
themselves (votes, pre-vote, check-quorum, fetching, snapshots) are tested in tests/sim:
scenarios named after each rule in test_raft_paper.py, the seeded simulation, and the
mutants that break them."""
