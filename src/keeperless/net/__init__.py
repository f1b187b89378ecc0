"""Outgoing connections: one client for every node-to-node request."""
