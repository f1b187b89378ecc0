"""The transaction coordinator on a broker (Kafka's transaction-coordinator module):
InitProducerId, AddPartitionsToTxn, EndTxn and the markers, `__transaction_state` through
the coordinator runtime; transactional offset commits; the rules are in `coordinator/`."""
