"""Who may do what: SASL (the mechanisms, the server's state machine, SCRAM
credentials), the listeners' TLS and SASL configuration and the nodes' client side of
it, the StandardAuthorizer over the ACLs of the metadata image, and the rule each API
checks before its handler runs (``api_rules``). Principals and the request context are
the wire protocol's (``protocol/session.py``, ``protocol/context.py``)."""
