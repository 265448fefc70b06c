"""The deployed local-DP protocol: the public plan, the report format, and the client
(numpy and the standard library only) with its ledger."""
