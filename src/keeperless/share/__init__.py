"""Share groups on a broker (Kafka's share-coordinator module and KIP-932's APIs):
ShareFetch and ShareAcknowledge, the share coordinator over `__share_group_state`, its
persister, and share-group offsets; the rules are in `coordinator/`."""
