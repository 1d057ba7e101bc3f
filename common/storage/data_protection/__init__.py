"""Storage of data protection: `erasure_store` (erasure look-ups and sweeps, receipts), `legal_hold_store`
(legal holds) and `retention_store` (retention rules and what they make due)."""
