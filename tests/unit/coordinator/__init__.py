"""Unit tests of coordinator/: the coordinators' shards."""
